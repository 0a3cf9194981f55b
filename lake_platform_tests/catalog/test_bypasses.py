"""Writers that bypass the registry are told: pylance's ``LanceDataset.commit`` through the
catalog's namespace without managed versioning (what lance-ray's writes do) publishes a manifest
no registry commit made. Whoever finds it (the bypass sensor's ``catch_bypasses``, the next
writer) moves it to quarantine, keeps the data, and writes one ``bypass`` entry in the table's
history naming the version."""

from __future__ import annotations

import shutil
from pathlib import Path

import lance  # the tests play the bypassing writer; the package never writes around the registry
import pyarrow as pa
import pytest
from lance.dataset import LanceDataset, LanceOperation

from lake_platform.catalog.catalog import Catalog
from lake_platform.catalog.pylance_namespace import LakeNamespace
from lake_platform.engine import lance_engine as engine
from lake_platform.engine.manifests import final_manifest_name
from lake_platform.errors import InvalidTableState
from lake_platform.naming import TableName
from lake_platform_tests.catalog.conftest import Lake, ids_of, rows
from lake_platform_tests.catalog.test_commit_conflicts import read_while_lagging
from lake_platform_tests.catalog.test_transaction import catalog, heads  # noqa: F401 - the fixture

T = "p.w.ns.t"
TID = T.split(".")


def bypassing_commit(lake: Lake, ids: list[int]) -> None:
    """Fragments written to the table's location and committed with the catalog's namespace,
    as lance-ray does: pylance 14's default (``namespace_client_managed_versioning=False``)
    writes the manifest itself; the registry never hears of it."""
    ns = LakeNamespace(lake.catalog)
    ds = lance.dataset(namespace_client=ns, table_id=TID)
    location = lake.catalog.reads.open_table(T).record.location
    storage = lake.settings.storage_options(location) or None
    fragments = lance.fragment.write_fragments(
        rows(ids, tag="bypass").read_all(), location, schema=ds.schema, storage_options=storage
    )
    LanceDataset.commit(
        location,
        LanceOperation.Append(fragments),
        read_version=ds.version,
        namespace_client=ns,
        table_id=TID,
        storage_options=storage,
    )


def bypasses(lake: Lake) -> list[dict[str, object]]:
    return [
        {"versions": e.detail["versions"], "from": e.from_version, "n": len(e.detail["quarantined"])}
        for e in lake.catalog.reads.history(T)
        if e.operation == "bypass"
    ]


def ids(lake: Lake) -> list[int]:
    return sorted(lake.catalog.reads.open_table(T).dataset.to_table()["id"].to_pylist())


def test_a_bypassing_commit_is_caught_quarantined_and_in_the_history(lake: Lake) -> None:
    lake.catalog.tables.create_table(T, rows([1, 2]))
    bypassing_commit(lake, [3])
    location = lake.catalog.reads.open_table(T).record.location
    storage = lake.settings.storage_options(location) or None
    assert engine.versions_on_disk(location, storage) == [1, 2]  # on storage, not in the registry

    assert lake.catalog.manifests.catch_bypasses(T) == [2]

    assert engine.versions_on_disk(location, storage) == [1]
    quarantined = [e.path for e in engine.quarantined_files(location, storage)]
    assert [engine.manifest_version(p) for p in quarantined] == [2]
    assert bypasses(lake) == [{"versions": [2], "from": 1, "n": 1}]
    assert ids(lake) == [1, 2]  # readers never see it
    # Found once: a second look finds nothing and writes no second entry.
    assert lake.catalog.manifests.catch_bypasses(T) == []
    assert len(bypasses(lake)) == 1
    # The table stays writable, and its next version takes the number.
    lake.catalog.tables.append(T, rows([4]))
    assert (lake.catalog.reads.open_table(T).version, ids(lake)) == (2, [1, 2, 4])


def test_a_clean_table_costs_no_lease_and_reports_nothing(lake: Lake) -> None:
    lake.catalog.tables.create_table(T, rows([1]))
    assert lake.catalog.manifests.catch_bypasses(T) == []
    assert bypasses(lake) == []


def test_the_next_writer_that_quarantines_a_bypass_reports_it_too(lake: Lake) -> None:
    lake.catalog.tables.create_table(T, rows([1]))
    bypassing_commit(lake, [2])
    lake.catalog.tables.append(T, rows([3]))
    assert bypasses(lake) == [{"versions": [2], "from": 1, "n": 1}]
    assert ids(lake) == [1, 3]


@pytest.mark.parametrize("storage", ["local"], indirect=True)
def test_the_quarantined_commit_keeps_its_data_and_can_be_recovered(lake: Lake, tmp_path: Path) -> None:
    lake.catalog.tables.create_table(T, rows([1, 2]))
    bypassing_commit(lake, [3])
    lake.catalog.manifests.catch_bypasses(T)
    location = Path(lake.catalog.reads.open_table(T).record.location)
    # What an operator does to look at it: a copy of the table with the manifest put back.
    copy = tmp_path / "recovered.lance"
    shutil.copytree(location, copy)
    (moved,) = [p for p in (copy / "_quarantine").rglob("*.manifest")]
    shutil.move(moved, copy / "_versions" / moved.name)
    recovered = lance.dataset(str(copy))
    assert recovered.version == 2
    assert sorted(recovered.to_table()["id"].to_pylist()) == [1, 2, 3]
    assert pa.compute.sum(recovered.to_table()["id"]).as_py() == 6


def test_a_bypass_found_on_a_branch_names_the_branch(lake: Lake) -> None:
    lake.catalog.tables.create_table(T, rows([1]))
    lake.catalog.branches.create_branch(T, "dev")
    dev, _ = lake.catalog.branches.branch(TableName.parse(T), "dev")
    # A manifest no registry commit made, one above the branch's head: a copy of the head's.
    storage = lake.settings.storage_options(dev.location) or None
    fs, root = engine.filesystem(dev.location, storage)
    at = f"{root}/_versions/{{}}"
    fs.copy_file(
        at.format(final_manifest_name(dev.current_version)),
        at.format(final_manifest_name(dev.current_version + 1)),
    )
    lake.catalog.branch_writes.append(T, "dev", rows([2]))  # its settle quarantines it
    (entry,) = [e for e in lake.catalog.reads.history(T) if e.operation == "bypass"]
    assert (entry.detail["branch"], entry.incarnation) == ("dev", dev.incarnation)
    assert entry.detail["versions"] == [dev.current_version + 1]


def test_a_commit_refused_on_a_branch_for_building_on_a_stray_manifest_names_the_branch(
    lake: Lake,
) -> None:
    lake.catalog.tables.create_table(T, rows([1]))
    lake.catalog.branches.create_branch(T, "dev")
    dev, _ = lake.catalog.branches.branch(TableName.parse(T), "dev")
    storage = lake.settings.storage_options(dev.location) or None

    def stray_after_the_settle(point: str) -> None:
        # After the writer's settle looked: Lance builds on it, and the registry refuses.
        if point == "branch-append:before-write":
            lance.write_dataset(rows([99], tag="stray"), dev.location, mode="append", storage_options=storage)

    racing = lake.new_catalog(hook=stray_after_the_settle)
    try:
        with pytest.raises(InvalidTableState, match="not built on the registered version"):
            racing.branch_writes.append(T, "dev", rows([2]))
    finally:
        racing.close()
    (entry,) = [e for e in lake.catalog.reads.history(T) if e.operation == "bypass"]
    assert (entry.detail["branch"], entry.incarnation) == ("dev", dev.incarnation)
    assert entry.detail["versions"] == [dev.current_version + 1]


def test_the_sensor_leaves_a_committed_multi_table_commit_s_manifest_alone(
    catalog: Catalog,  # noqa: F811
) -> None:
    """A reader that could not move the heads published the manifest of the version a committed
    multi-table commit made visible above a lagging head: that is no bypass. The sensor completes
    the commit under the lease and finds nothing."""
    target = "p.w.ns.t004"
    names, _, storage = read_while_lagging(catalog, target)
    location = catalog.ctx.table(TableName.parse(target))[0].location
    assert engine.versions_on_disk(location, storage) == [1, 2]  # published by the reader's open
    assert catalog.manifests.catch_bypasses(target) == []
    assert engine.quarantined_files(location, storage) == []
    assert heads(catalog, names) == dict.fromkeys(names, 2)
    assert [e.operation for e in catalog.reads.history(target)][1:] == ["append"]
    assert sorted(ids_of(catalog.reads.open_table(target))) == [4, 1004]
