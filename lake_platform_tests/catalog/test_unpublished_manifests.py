"""A writer killed (SIGKILL, ``faults.kill_writer``) after its registry commit, before publishing
its manifest, on SQLite and on DynamoDB (moto): once the version is older than the minute in
which its writer may still be linking the file (``pylance_commits.ensure_published``), a pylance
reader (``LakeNamespace``) is refused it with the platform's typed "committed but not
finalized" error, writing nothing, as a catalog reader is, until ``lake table repair``
publishes it. Before, Lance was handed the missing canonical manifest and answered a bare
"Dataset at path ... was not found"."""

from __future__ import annotations

import signal
from pathlib import Path

import lance  # the test plays a pylance reader
import lance_namespace.errors as ns_errors
import pytest
from lance_namespace_urllib3_client.models import (
    DescribeTableVersionRequest,
    ListTableVersionsRequest,
)

from lake_platform.catalog.catalog import Catalog
from lake_platform.catalog.pylance_namespace import LakeNamespace
from lake_platform.errors import InvalidTableState
from lake_platform.settings import LakeSettings
from lake_platform_tests.catalog import faults
from lake_platform_tests.catalog.conftest import ids_of, rows

T = faults.T  # the table faults.op_append appends [100, 101] to
TID = T.split(".")
REFUSED = r"Invalid table state: version 2 of p\.w\.ns\.t is committed but not finalized"


@pytest.fixture
def settings(backend_settings: LakeSettings) -> LakeSettings:
    """``T`` at version 1 ([1]), then an append of [100, 101] killed after its registry commit."""
    with Catalog(backend_settings) as c:
        c.tables.create_table(T, rows([1]))
    point = "append:registered"  # the version committed, its manifest not published
    code, _ = faults.kill_writer(backend_settings, faults.op_append, point, 1, "killed-append-1")
    assert code == -signal.SIGKILL, f"the writer never reached {point}; exit code {code}"
    return backend_settings


def files(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())


def test_a_pylance_reader_of_a_version_left_unpublished_is_refused_typed(settings: LakeSettings) -> None:
    root = Path(settings.home)
    before = files(root)
    # A reader arriving past the minute: its writer is not linking the file any more.
    with Catalog(settings, clock=faults.ShiftedClock(61)) as later:
        storage = later.settings.storage_options(later.reads.describe_table(T, with_stats=False).location)
        ns = LakeNamespace(later)
        for version in (None, 2):  # the latest (ListTableVersions), and version 2 by number
            with pytest.raises(ValueError, match=REFUSED):
                lance.dataset(namespace_client=ns, table_id=TID, version=version, storage_options=storage)
        # What a REST client is answered: the namespace's typed error (409, code 13).
        with pytest.raises(ns_errors.InvalidTableStateError, match="committed but not finalized"):
            ns.list_table_versions(ListTableVersionsRequest(id=TID, descending=True, limit=1))
        with pytest.raises(ns_errors.InvalidTableStateError, match="committed but not finalized"):
            ns.describe_table_version(DescribeTableVersionRequest(id=TID, version=2))
        with pytest.raises(InvalidTableState, match="committed but not finalized"):
            later.reads.open_table(T)  # the catalog's own readers: the same refusal
        assert ids_of(later.reads.open_table(T, 1)) == [1]  # older versions still open
        assert files(root) == before, "a refused read wrote to storage"

        assert later.manifests.repair_table(T)["finalized"] == [2]
        opened = lance.dataset(namespace_client=ns, table_id=TID, storage_options=storage)
        assert opened.version == 2
        assert sorted(opened.to_table()["id"].to_pylist()) == [1, 100, 101]
