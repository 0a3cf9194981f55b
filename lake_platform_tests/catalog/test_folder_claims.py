"""A table an older release adopted at a folder other tables' folders later lay in (``<root>/ns2``,
where namespace ``ns2``'s tables are put) is never purged over them: drop --purge and trash
expiry refuse, naming the other tables, and delete nothing; the tables inside are purged as
before. The old registration is written as the release before f4fbe89 wrote it."""

from __future__ import annotations

from datetime import timedelta

import lance
import pytest

from lake_platform.catalog.catalog import Catalog
from lake_platform.engine import manifests as engine_manifests
from lake_platform.errors import InvalidTableState
from lake_platform.naming import TableName
from lake_platform.registry import keys
from lake_platform.registry.records import TableRecord, VersionRecord, new_id
from lake_platform.registry.store import ABSENT, Put
from lake_platform_tests.catalog.conftest import Lake, ids_of, rows, state, storage_options_of
from lake_platform_tests.catalog.registry_calls import RegistryCalls

ADOPTED = "p.w.ns.adopted"
INSIDE = "p.w.ns2.t2"


def old_registration(lake: Lake, name: str, folder: str) -> str:
    """A Lance dataset at ``<root>/<folder>`` registered as ``name`` with the records RegisterTable
    wrote before it refused namespace folders; its location."""
    where = f"{lake.root.rstrip('/')}/{folder}"
    lance.write_dataset(
        rows([1, 2]).read_all(), where, mode="create", storage_options=storage_options_of(lake)
    )
    found = engine_manifests.canonical_manifests(where, lake.settings.storage_options(where))
    version = max(found)
    store_path = where.removeprefix("s3://").partition("/")[2] if where.startswith("s3://") else where
    incarnation = new_id()
    record = TableRecord(name=name, incarnation=incarnation, location=where, current_version=version)
    registered = VersionRecord(
        incarnation=incarnation,
        version=version,
        manifest_path=f"{store_path.strip('/')}/{found[version][0]}",
        naming_scheme="V2",
    )
    lake.catalog.store.transact(
        [
            Put(keys.table(TableName.parse(name)), record.encode(), ABSENT),
            Put(keys.version(incarnation, version), registered.encode(), ABSENT),
        ]
    )
    return where


@pytest.fixture
def nested(lake: Lake) -> Lake:
    """``ADOPTED`` at ``<root>/ns2``, then ``INSIDE`` created in namespace ``ns2``: inside it."""
    where = old_registration(lake, ADOPTED, "ns2")
    lake.catalog.containers.create_namespace("p.w.ns2")
    lake.catalog.tables.create_table(INSIDE, rows([7]))
    assert lake.catalog.reads.open_table(INSIDE).record.location.startswith(where + "/")
    return lake


def test_purging_a_table_whose_folder_holds_another_is_refused_unchanged(nested: Lake) -> None:
    before = state(nested)
    with pytest.raises(InvalidTableState, match=INSIDE):
        nested.catalog.trash.drop_table(ADOPTED, purge=True)
    assert state(nested) == before
    assert ids_of(nested.catalog.reads.open_table(INSIDE)) == [7]


def test_expiry_leaves_it_in_the_trash_and_the_other_table_whole(nested: Lake) -> None:
    nested.catalog.trash.drop_table(ADOPTED)
    trashed = nested.catalog.trash.list_trash()[0]
    with pytest.raises(InvalidTableState, match=INSIDE):
        nested.catalog.trash.expire_trash(now_ms=trashed.expires_at_ms)
    assert ids_of(nested.catalog.reads.open_table(INSIDE)) == [7]
    assert [(r.target, r.state) for r in nested.catalog.trash.list_trash()] == [(ADOPTED, "trashed")]
    nested.catalog.trash.undrop_table(ADOPTED)  # not claimed: it comes back whole
    assert ids_of(nested.catalog.reads.open_table(ADOPTED)) == [1, 2]


def test_the_table_inside_is_purged_and_the_adopted_one_kept(nested: Lake) -> None:
    nested.catalog.trash.drop_table(INSIDE, purge=True)
    assert ids_of(nested.catalog.reads.open_table(ADOPTED)) == [1, 2]
    assert nested.catalog.trash.list_trash() == []


def test_a_folder_inside_another_tables_data_is_not_purged(lake: Lake) -> None:
    lake.catalog.tables.create_table("p.w.ns.t", rows([5]))
    data = lake.catalog.reads.open_table("p.w.ns.t").record.location.removeprefix(lake.root.rstrip("/") + "/")
    old_registration(lake, ADOPTED, f"{data}/data/x.lance")
    before = state(lake)
    with pytest.raises(InvalidTableState, match="p.w.ns.t"):
        lake.catalog.trash.drop_table(ADOPTED, purge=True)
    assert state(lake) == before


def test_a_cascade_purge_over_another_tables_files_is_refused_unchanged(nested: Lake) -> None:
    # Refused once the namespace was marked and its tables detached, the namespace stayed
    # "dropping" with the table in the trash: no drop, undrop or create could use it again.
    before = state(nested)
    with pytest.raises(InvalidTableState, match=INSIDE):
        nested.catalog.cascade.drop_namespace("p.w.ns", cascade=True, purge=True)
    assert state(nested) == before
    assert ids_of(nested.catalog.reads.open_table(ADOPTED)) == [1, 2]
    nested.catalog.cascade.drop_namespace("p.w.ns", cascade=True)  # into the trash: fine
    assert [r.target for r in nested.catalog.trash.list_trash() if r.kind == "table"] == [ADOPTED]


def test_a_table_put_inside_during_a_cascade_purge_is_kept_and_the_cascade_ends(lake: Lake) -> None:
    # The adopted table's folder is empty of other tables when the cascade checks; ns2.t2 lands
    # in it before the purge: the adopted table stays in the trash, the namespace is gone.
    old_registration(lake, ADOPTED, "ns2")
    lake.catalog.containers.create_namespace("p.w.ns2")

    def create_inside(point: str) -> None:
        if point == "drop-namespace:filed":
            lake.catalog.tables.create_table(INSIDE, rows([7]))

    dropper = lake.new_catalog(hook=create_inside)
    try:
        with pytest.raises(InvalidTableState, match=INSIDE):
            dropper.cascade.drop_namespace("p.w.ns", cascade=True, purge=True)
    finally:
        dropper.close()
    assert ids_of(lake.catalog.reads.open_table(INSIDE)) == [7]
    assert [n.name for n in lake.catalog.containers.list_namespaces("p.w")] == ["p.w.ns2"]
    assert [(r.target, r.state) for r in lake.catalog.trash.list_trash(ADOPTED)] == [(ADOPTED, "trashed")]


def test_only_the_first_check_reads_every_table(lake: Lake) -> None:
    # Each purge and cleanup read every table and trash record of the warehouse (a purge of each
    # table of a cascade too): the whole catalog's cost on every one. Now the first check files
    # the odd folders of older releases once; checks after it read those records only.
    for t in ["t0", "t1", "t2"]:
        lake.catalog.tables.create_table(f"p.w.ns.{t}", rows([1]))
    calls = RegistryCalls(lake.catalog.store)
    catalog = Catalog(lake.settings, calls)
    catalog.trash.drop_table("p.w.ns.t0", purge=True)
    assert _wide_reads(calls) == ["tbl/", "trs/"]
    calls.calls.clear()
    catalog.trash.drop_table("p.w.ns.t1", purge=True)
    catalog.versions.cleanup("p.w.ns.t2", retention=timedelta(0))
    assert _wide_reads(calls) == []


def _wide_reads(calls: RegistryCalls) -> list[str]:
    """The prefixes scanned that span more than one table."""
    wide = {keys.tables_under(), keys.tables_under(["p", "w"])}
    wide |= {keys.trash_prefix(), keys.trash_prefix("p.w.")}
    return [k[0] for m, k in calls.reads() if m == "scan_prefix" and k[0] in wide]


def test_a_purged_odd_folder_is_forgotten(nested: Lake) -> None:
    nested.catalog.trash.drop_table(INSIDE, purge=True)
    nested.catalog.trash.drop_table(ADOPTED, purge=True)
    nested.catalog.tables.create_table(INSIDE, rows([8]))  # in the purged adopted folder
    nested.catalog.trash.drop_table(INSIDE, purge=True)  # finds it gone: forgets its record
    assert list(nested.catalog.store.scan_prefix(keys.odd_folders())) == []
