"""The catalog at scale: 20,000 tables on SQLite, 2,000 on DynamoDB (moto), each with history.
A cold load reads the current heads and no history; a refresh reads one range per feed shard
when nothing changed and the changed keys when something did; listings of one namespace page
through the registry and read that namespace only. Records are written in bulk, straight into
the registry (``catalog_records``; on DynamoDB with BatchWriteItem): nothing here opens a Lance
table."""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest

from lake_platform.catalog.catalog import Catalog
from lake_platform.naming import TableName, WarehouseName
from lake_platform.query.snapshot import load_snapshot
from lake_platform.registry import keys
from lake_platform.registry.changes import DEFAULT_SHARDS
from lake_platform.registry.records import WarehouseRecord
from lake_platform.registry.sqlite import SqliteMetaStore
from lake_platform.registry.store import MetaStore, Op, Put
from lake_platform.settings import LakeSettings, load_settings
from lake_platform_tests.registry.catalog_records import (
    Reads,
    commit,
    dynamodb_batch_loader,
    table_ops,
    write_catalog,
)
from lake_platform_tests.servers import SLOW_IO

PER_NAMESPACE = 100


@dataclass
class Lake:
    store: MetaStore
    settings: LakeSettings
    tables: int
    #: How the records are loaded: the registry's own transactions, or on DynamoDB BatchWriteItem
    #: (moto copies its whole table per transaction, which made the load most of this test).
    write: Callable[[Sequence[Op]], object] | None = None


# moto answers a query by reading the whole partition in Python: over 2,000 tables on a loaded
# machine that took longer than the 1 s a registry read gets by default (servers.SLOW_IO).


@pytest.fixture(params=[("sqlite", 20_000), ("dynamodb", 2_000)], ids=["sqlite-20000", "dynamodb-2000"])
def lake(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Lake]:
    backend, tables = request.param
    write = None
    if backend == "sqlite":
        url = f"sqlite:///{tmp_path / 'registry.db'}"
        store: MetaStore = SqliteMetaStore(tmp_path / "registry.db")
        cleanup = None
    else:
        from lake_platform.registry.dynamodb import DynamoMetaStore
        from lake_platform.registry.dynamodb_admin import delete_table, init_table
        from lake_platform.registry.dynamodb_items import parse_url

        url = request.getfixturevalue("dynamodb_url")
        init_table(url, LakeSettings(_env_file=None, home=tmp_path / "home", registry_url=url))  # type: ignore[call-arg]
        settings = load_settings(home=tmp_path / "home", registry_url=url, **SLOW_IO)
        dynamo = DynamoMetaStore.from_url(url, settings)
        store, cleanup = dynamo, functools.partial(delete_table, dynamo)
        parsed = parse_url(url)
        write = dynamodb_batch_loader(parsed.endpoint_url, dynamo.table, parsed.region)
    try:
        yield Lake(store, load_settings(home=tmp_path / "home", registry_url=url, **SLOW_IO), tables, write)
    finally:
        if cleanup is not None:
            cleanup()
        store.close()


@pytest.mark.slow
def test_listings_paging_and_refreshes_at_scale(lake: Lake) -> None:
    store, settings, tables = lake.store, lake.settings, lake.tables
    namespaces = tables // PER_NAMESPACE
    # The warehouse through a registry transaction, which starts the change feed (the bulk load
    # writes no change records, as a catalog that existed before its last snapshot has none).
    warehouse = WarehouseRecord(name="p.w", root="/nowhere")
    store.transact([Put(keys.warehouse(WarehouseName.parse("p.w")), warehouse.encode())])
    names = write_catalog(
        store, "p", namespaces=namespaces, per_namespace=PER_NAMESPACE, versions=3, write=lake.write
    )
    reads = Reads(store)

    snap = load_snapshot(reads)  # cold: current heads only
    assert snap.table_count() == tables
    assert not [p for p in reads.scanned if p.startswith("ver/")]
    view = snap.project("p")
    assert view.tables_in("w", "ns00007") == [f"t{i:04d}" for i in range(PER_NAMESPACE)]
    assert view.table("w", "ns00003", "t0042").ref.version == 3  # type: ignore[union-attr]

    reads.reset()
    snap = load_snapshot(reads, snap)  # nothing changed
    assert reads.count == DEFAULT_SHARDS

    moved = names[:: tables // 25][:24]  # 24 tables in as many namespaces move on
    for name in moved:
        commit(store, name)
    dropped, created = names[1], "p.w.ns00001.fresh"
    item = store.get(keys.table(TableName.parse(dropped)))
    assert item is not None
    store.compare_and_delete(item.key, item.revision)
    store.transact(table_ops(created, 2))
    touched = {n.split(".")[2] for n in [*moved, dropped, created]}
    quiet = next(f"ns{n:05d}" for n in range(namespaces) if f"ns{n:05d}" not in touched)
    untouched = snap.project("p").tables.in_namespace("w", quiet)
    reads.reset()
    snap = load_snapshot(reads, snap)
    # A read per shard (two where it moved more than once), then the 52 changed keys: one get_many.
    assert DEFAULT_SHARDS + 1 <= reads.count <= 2 * DEFAULT_SHARDS + 1
    view = snap.project("p")
    assert all(view.table(*_where(n)).ref.version == 4 for n in moved)  # type: ignore[union-attr]
    assert view.table(*_where(dropped)) is None and view.table(*_where(created)).ref.version == 2  # type: ignore[union-attr]
    assert snap.table_count() == tables
    assert view.tables.in_namespace("w", quiet) is untouched  # a namespace no change touched: not copied

    counted = Reads(store)
    catalog = Catalog(settings, counted, heartbeat=False)
    try:
        listed: list[str] = []
        after = None
        while True:
            counted.reset()
            page = catalog.reads.tables_in("p.w.ns00007", after=after, limit=30)
            assert counted.count == 1  # one page, one registry request
            listed += [r.name for r in page]
            if len(page) < 30:
                break
            after = page[-1].name.rsplit(".", 1)[1]
        assert listed == names[700:800]
        counted.reset()
        assert [r.name for r in catalog.reads.list_tables("p.w.ns00007")] == names[700:800]
        # Its nested namespaces' tables, then its own, as one key range: nothing else.
        assert counted.scanned == ["[tbl/p/w/ns00007., tbl/p/w/ns000070)"]
        children, after = [], None
        while True:
            found = catalog.reads.namespaces_in("p.w", after=after, limit=7)
            children += found
            if len(found) < 7:
                break
            after = found[-1]
        assert children == [f"ns{n:05d}" for n in range(namespaces)]
    finally:
        catalog.close()


def _where(name: str) -> tuple[str, str, str]:
    parts = name.split(".")
    return parts[1], ".".join(parts[2:-1]), parts[-1]
