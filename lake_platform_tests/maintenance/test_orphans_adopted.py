"""The orphan scan and reclaim of a table an older release adopted at a namespace's folder
(``<root>/ns2``, as in tests/catalog/test_folder_claims): the tables later created inside it,
in namespaces named like Lance's folders (``ns2.data``, ``ns2.tree``) too, have files that look
like the adopted table's own. They are never reported or reclaimed as its orphans."""

from __future__ import annotations

import base64
from datetime import timedelta
from pathlib import Path

import lance
import pytest

from lake_platform.catalog.arrow_io import schema_to_ipc
from lake_platform.catalog.catalog import Catalog
from lake_platform.engine import manifests as engine_manifests
from lake_platform.maintenance import orphans
from lake_platform.naming import TableName
from lake_platform.registry import keys
from lake_platform.registry.records import TableRecord, VersionRecord, WarehouseRecord, decode, new_id
from lake_platform.registry.store import ABSENT, Put
from lake_platform_tests.maintenance.helpers import age_tree, make_lake, rows

ADOPTED = "p.w.ns.adopted"
INSIDE = ["p.w.ns2.t2", "p.w.ns2.data.t3", "p.w.ns2.tree.t4"]


def adopt(catalog: Catalog, name: str, folder: str) -> str:
    """A Lance dataset at ``<root>/<folder>`` registered as ``name`` with the records RegisterTable
    wrote before it refused namespace folders; its location."""
    item = catalog.store.get(keys.warehouse(TableName.parse(name).warehouse_name))
    assert item is not None
    where = f"{decode(WarehouseRecord, item.value).root.rstrip('/')}/{folder}"
    lance.write_dataset(rows(1, 2), where, mode="create")
    found = engine_manifests.canonical_manifests(where, {})
    version = max(found)
    incarnation = new_id()
    ipc = base64.b64encode(schema_to_ipc(rows(1, 2).schema)).decode()
    record = TableRecord(
        name=name, incarnation=incarnation, location=where, current_version=version, schema_ipc_b64=ipc
    )
    registered = VersionRecord(
        incarnation=incarnation,
        version=version,
        manifest_path=f"{where.strip('/')}/{found[version][0]}",
        naming_scheme="V2",
    )
    catalog.store.transact(
        [
            Put(keys.table(TableName.parse(name)), record.encode(), ABSENT),
            Put(keys.version(incarnation, version), registered.encode(), ABSENT),
        ]
    )
    return where


@pytest.fixture
def nested(tmp_path: Path) -> tuple[Catalog, str]:
    catalog = make_lake(tmp_path / "home", ticket_lifetime_seconds=0.001, reader_max_stale_seconds=0.0)
    where = adopt(catalog, ADOPTED, "ns2")
    for space in ("p.w.ns2", "p.w.ns2.data", "p.w.ns2.tree"):
        catalog.containers.create_namespace(space)
    for i, name in enumerate(INSIDE):
        catalog.tables.create_table(name, rows(10 * i, 3))
        catalog.tables.append(name, rows(10 * i + 3, 1))
        assert catalog.reads.open_table(name).record.location.startswith(where + "/")
    age_tree(where, 60 * 86400)
    return catalog, where


def test_the_scan_reports_no_file_of_a_table_inside(nested: tuple[Catalog, str]) -> None:
    catalog, _ = nested
    report = orphans.scan(catalog, ADOPTED)
    assert report.orphans == [], [o.path for o in report.orphans]


def test_the_reclaim_deletes_no_file_of_a_table_inside(nested: tuple[Catalog, str]) -> None:
    catalog, _ = nested
    result = orphans.reclaim(catalog, ADOPTED, timedelta(hours=1))
    assert result.deleted == []
    for i, name in enumerate(INSIDE):
        got = catalog.reads.open_table(name).dataset.to_table().column("id").to_pylist()
        assert sorted(got) == list(range(10 * i, 10 * i + 4))
    assert catalog.reads.open_table(ADOPTED).dataset.count_rows() == 2


def test_version_cleanup_deletes_no_file_of_a_table_inside(nested: tuple[Catalog, str]) -> None:
    # Lance's cleanup of the adopted table took ns2.data.t3's data files (unnamed by its
    # manifests, under its data/): t3 no longer read. It is skipped there now; what the removed
    # versions alone named is left to the orphan reclaim, which keeps out of t3's folder.
    catalog, where = nested
    catalog.tables.append(ADOPTED, rows(3, 1))
    catalog.tables.append(ADOPTED, rows(4, 1))
    age_tree(where, 60 * 86400)
    done = catalog.versions.cleanup(ADOPTED, retention=timedelta(0))
    assert (done.detail["versions_removed"], done.detail["lance_cleanup_skipped"]) == ([1, 2], 1)
    age_tree(where, 60 * 86400)
    taken = orphans.reclaim(catalog, ADOPTED, timedelta(hours=1)).deleted
    assert taken and all(d["path"].split("/")[0] in ("_versions", "_transactions") for d in taken), taken
    # The removed versions' manifests went with the cleanup (their registered paths) or with
    # the reclaim: only the current version's is left.
    current = catalog.reads.open_table(ADOPTED).record.current_version
    assert sorted(p.name for p in Path(where, "_versions").iterdir()) == [
        engine_manifests.final_manifest_name(current),
        "latest_version_hint.json",
    ]
    for i, name in enumerate(INSIDE):
        got = catalog.reads.open_table(name).dataset.to_table().column("id").to_pylist()
        assert sorted(got) == list(range(10 * i, 10 * i + 4))
    assert catalog.reads.open_table(ADOPTED).dataset.count_rows() == 4
