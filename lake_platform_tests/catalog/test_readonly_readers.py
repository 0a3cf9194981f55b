"""A reader whose registry credentials may only read (DynamoDB's AccessDenied, PermissionDenied)
meeting a committed multi-table commit whose heads lag (its writer stopped at its commit point):
it reads the committed versions every time, tries to move the heads once for that commit and
then never again, and says so in one WARNING line without a traceback, naming who settles it
(``transaction_recovery.committed_head``). Before, every read tried again and logged a
traceback."""

from __future__ import annotations

import logging

import lance  # the test plays a pylance reader
import pytest

from lake_platform.catalog import transaction_recovery
from lake_platform.catalog.catalog import Catalog
from lake_platform.catalog.pylance_namespace import LakeNamespace
from lake_platform_tests.catalog.conftest import ids_of
from lake_platform_tests.catalog.test_commit_conflicts import read_while_lagging
from lake_platform_tests.catalog.test_transaction import catalog, heads  # noqa: F401 - the fixture

TARGET = "p.w.ns.t003"
READS = 5


def test_a_reader_that_may_not_write_tries_once_and_warns_once(
    catalog: Catalog,  # noqa: F811
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level(logging.WARNING, logger=transaction_recovery.__name__):
        # One pylance open of TARGET through read-only credentials: the first read.
        names, registry, storage = read_while_lagging(catalog, TARGET)
        with Catalog(catalog.settings, registry) as reading:
            for _ in range(READS):
                opened = lance.dataset(
                    namespace_client=LakeNamespace(reading),
                    table_id=TARGET.split("."),
                    storage_options=storage,
                )
                assert opened.version == 2
                assert sorted(opened.to_table()["id"].to_pylist()) == [3, 1003]
                assert sorted(ids_of(reading.reads.open_table(TARGET))) == [3, 1003]
                assert reading.reads.describe_table(TARGET, with_stats=False).current_version == 2
                assert sorted(reading.reads.readable_versions(TARGET)[1]) == [1, 2]
                # Another table of the same commit: no new attempt either.
                assert reading.reads.describe_table(names[0], with_stats=False).current_version == 2
    assert registry.refused == 1  # one attempt to move the heads, over every read
    (warning,) = [r for r in caplog.records if r.name == transaction_recovery.__name__]
    assert warning.levelno == logging.WARNING and warning.exc_info is None
    assert "lake table repair" in warning.getMessage() and TARGET in warning.getMessage()
    assert heads(catalog, names) == dict.fromkeys(names, 1)  # nothing moved them

    # The refusal was that registry's: a reader that may write still completes the commit.
    assert catalog.reads.describe_table(TARGET, with_stats=False).current_version == 2
    assert heads(catalog, names) == dict.fromkeys(names, 2)
