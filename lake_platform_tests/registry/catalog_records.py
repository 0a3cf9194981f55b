"""A catalog written straight into the registry, in bulk: warehouses, namespaces, tables and their
version history as records only (no Lance dataset behind them). For the scale test and
``bench/catalog_scale.py``: tens of thousands of tables in seconds, which listings, paging and
snapshot refreshes read exactly as they read real ones (nothing here opens a table)."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Any

from lake_platform.naming import NamespaceName, TableName, WarehouseName
from lake_platform.registry import keys
from lake_platform.registry.records import NamespaceRecord, TableRecord, VersionRecord, WarehouseRecord
from lake_platform.registry.store import MAX_TRANSACT_OPS, Item, MetaStore, Op, Put
from lake_platform_tests.registry.wrapping import WrappedStore

#: BatchWriteItem's limit.
_BATCH_WRITE = 25


class Reads(WrappedStore):
    """Counts the registry reads made through it (requests: a get, a get_many, a scan) and the
    prefixes scanned (a range as ``[start, stop)``): what a replica asks of the registry."""

    def __init__(self, inner: MetaStore) -> None:
        super().__init__(inner)
        self.count = 0
        self.scanned: list[str] = []

    def get(self, key: str) -> Item | None:
        self.count += 1
        return self.inner.get(key)

    def get_many(self, keys: Sequence[str]) -> list[Item | None]:
        self.count += 1
        return self.inner.get_many(keys)

    def scan_prefix(
        self, prefix: str, *, start_after: str | None = None, limit: int | None = None
    ) -> Iterator[Item]:
        self.count += 1
        self.scanned.append(prefix)
        return self.inner.scan_prefix(prefix, start_after=start_after, limit=limit)

    def scan_range(
        self, start: str, stop: str, *, start_after: str | None = None, limit: int | None = None
    ) -> Iterator[Item]:
        self.count += 1
        self.scanned.append(f"[{start}, {stop})")
        return self.inner.scan_range(start, stop, start_after=start_after, limit=limit)

    def reset(self) -> None:
        self.count = 0
        self.scanned.clear()


def table_names(project: str, namespaces: int, per_namespace: int, warehouse: str = "w") -> Iterator[str]:
    for n in range(namespaces):
        for t in range(per_namespace):
            yield f"{project}.{warehouse}.ns{n:05d}.t{t:04d}"


def write_catalog(
    store: MetaStore,
    project: str,
    *,
    namespaces: int,
    per_namespace: int,
    versions: int,
    warehouse: str = "w",
    root: str = "/nowhere",
    write: Callable[[Sequence[Op]], object] | None = None,
) -> list[str]:
    """``namespaces`` namespaces of ``per_namespace`` tables, each at version ``versions`` with
    every earlier version registered; the table names, in order. ``write`` takes each batch of
    records (default: one registry transaction per batch)."""
    ops: list[Op] = []
    write = write or store.transact

    def add(op: Op) -> None:
        ops.append(op)
        if len(ops) == MAX_TRANSACT_OPS:
            write(ops)
            ops.clear()

    wh = WarehouseName.parse(f"{project}.{warehouse}")
    if store.get(keys.warehouse(wh)) is None:  # a real catalog's warehouse is kept as it is
        add(Put(keys.warehouse(wh), WarehouseRecord(name=str(wh), root=root).encode()))
    for n in range(namespaces):
        ns = NamespaceName.parse(f"{project}.{warehouse}.ns{n:05d}")
        add(Put(keys.namespace(ns), NamespaceRecord(name=str(ns)).encode()))
    names = list(table_names(project, namespaces, per_namespace, warehouse))
    for name in names:
        for op in table_ops(name, versions, root):
            add(op)
    if ops:
        write(ops)
    return names


def table_ops(name: str, versions: int, root: str = "/nowhere", incarnation: str | None = None) -> list[Op]:
    """The records of table ``name`` at version ``versions`` (history included)."""
    inc = incarnation or name.replace(".", "-")
    location = f"{root}/{inc}"
    record = TableRecord(name=name, incarnation=inc, location=location, current_version=versions)
    # Created, not overwritten: DynamoDB reads an unconditional put's revision back, one by one.
    ops: list[Op] = [Put(keys.table(TableName.parse(name)), record.encode())]
    for v in range(1, versions + 1):
        ver = VersionRecord(incarnation=inc, version=v, manifest_path=f"{location}/_versions/{v}.manifest")
        ops.append(Put(keys.version(inc, v), ver.encode()))
    return ops


def commit(store: MetaStore, name: str, *, tags: tuple[str, ...] = ()) -> int:
    """One more version of registry-only table ``name`` (its head moves): the new version."""
    key = keys.table(TableName.parse(name))
    item = store.get(key)
    assert item is not None
    record = TableRecord.model_validate_json(item.value)
    version = record.current_version + 1
    moved = record.model_copy(update={"current_version": version})
    ver = VersionRecord(
        incarnation=record.incarnation,
        version=version,
        manifest_path=f"{record.location}/_versions/{version}.manifest",
        tags=list(tags),
    )
    store.transact(
        [
            Put(key, moved.encode(), item.revision),
            Put(keys.version(record.incarnation, version), ver.encode()),
        ]
    )
    return version


def dynamodb_batch_loader(
    endpoint: str | None, table: str, region: str | None = None
) -> Callable[[Sequence[Op]], None]:
    """A ``write`` for :func:`write_catalog` that loads new records into DynamoDB table ``table``
    with BatchWriteItem, each item as the registry writes a created record (revision 1). No
    change records: a snapshot loaded afterwards reads them as its cold start. On moto, whose
    TransactWriteItems copies its whole table, transactions make a bulk load quadratic."""
    import boto3

    from lake_platform.registry.dynamodb_items import conditional_put

    client = boto3.client("dynamodb", endpoint_url=endpoint, region_name=region)

    def load(ops: Sequence[Op]) -> None:
        items = []
        for op in ops:
            assert isinstance(op, Put) and op.expected is not None, op
            items.append(conditional_put(table, op, "bulk-load")["Item"])
        batch_put_items(client, table, items)

    return load


def batch_put_items(client: Any, table: str, items: Sequence[dict[str, Any]]) -> None:
    """Put raw DynamoDB ``items`` into ``table`` with BatchWriteItem, retrying what it leaves
    unprocessed."""
    puts = [{"PutRequest": {"Item": item}} for item in items]
    for start in range(0, len(puts), _BATCH_WRITE):
        pending: dict[str, Any] = {table: puts[start : start + _BATCH_WRITE]}
        while pending:
            pending = client.batch_write_item(RequestItems=pending).get("UnprocessedItems") or {}
