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
from lake_platform_tests.catalog.conftest import Lake, ids_of
from lake_platform_tests.catalog.test_commit_conflicts import ReadOnlyRegistry, read_while_lagging
from lake_platform_tests.catalog.test_rogue_writers import (
    T,
    _as_left_by_older_writers,
    _interrupted_append,
)
from lake_platform_tests.catalog.test_rogue_writers import (
    storage as storage_of_table,
)
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


def test_a_reader_that_may_not_write_meets_a_version_at_its_staging_manifest_without_a_traceback(
    lake: Lake, caplog: pytest.LogCaptureFixture
) -> None:
    """Version 2 registered at its staging manifest (its writer stopped before finishing it, as
    older writers left it): a pylance reader through read-only registry credentials reads it on
    every open, cannot point the registry at the canonical manifest, and says so in one
    WARNING line once, without a traceback, naming who finishes it."""
    location = _interrupted_append(lake)
    _as_left_by_older_writers(lake, location, canonical=False)
    registry = ReadOnlyRegistry(lake.catalog.store)
    with caplog.at_level(logging.WARNING), Catalog(lake.settings, registry) as reading:
        for _ in range(READS):
            opened = lance.dataset(
                namespace_client=LakeNamespace(reading),
                table_id=T.split("."),
                storage_options=storage_of_table(lake, location),
            )
            assert opened.version == 2 and sorted(opened.to_table()["id"].to_pylist()) == [1, 2]
    warnings = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert [r.exc_info for r in warnings] == [None], [r.getMessage() for r in warnings]
    assert "lake table repair" in warnings[0].getMessage() and T in warnings[0].getMessage()
    # A reader that may write finishes it.
    assert lake.catalog.manifests.repair_table(T)["finalized"] == [2]
