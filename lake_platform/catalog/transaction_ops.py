"""The registry side of an atomic multi-table commit (``transaction``): what one table's version
costs in one registry write, the ops themselves, and the limits per backend that follow
(``MetaStore.max_transact_ops``: SQLite's one transaction, DynamoDB's one TransactWriteItems;
past it, ``transaction_chunks`` spreads the same ops over several)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from lake_platform.engine import lance_engine as engine
from lake_platform.errors import TransactionTooLarge
from lake_platform.registry import keys
from lake_platform.registry.records import CommitMarker, TableRecord, VersionRecord
from lake_platform.registry.store import ABSENT, MetaStore, Op, Put

if TYPE_CHECKING:
    from lake_platform.catalog.context import CatalogContext
    from lake_platform.catalog.table_write import TableWrite

#: Registry operations one table's version costs in the transaction: its version record, its
#: table record (the head; a branch's line: the branch record), its commit-log entry, its commit
#: marker, its lease (fence + release).
OPS_PER_TABLE = 5
#: The most tables a transaction spanning several registry writes takes (``transaction_chunks``):
#: its record (every table's log entry and marker) stays far below DynamoDB's 400 KB item, and
#: each table's new version names every other one.
MAX_CHUNKED_TABLES = 200


def one_write_ops(writes: list[TableWrite]) -> int:
    """The registry operations ``writes`` (staged) take in one registry write."""
    return sum(OPS_PER_TABLE + 2 * (len(w.pending.held) - 1 if w.pending else 0) for w in writes)


def max_tables(store: MetaStore) -> int:
    """The most tables one transaction writes on ``store``'s backend: what one registry write
    takes (appends without a schema step; each step costs two more operations), or, when more,
    ``MAX_CHUNKED_TABLES`` over several (SQLite: 2,000 tables in one; DynamoDB: 19 in one
    TransactWriteItems, 200 over several)."""
    return max(store.max_transact_ops // OPS_PER_TABLE, MAX_CHUNKED_TABLES)


def too_large(store: MetaStore, tables: int) -> TransactionTooLarge:
    limit = max_tables(store)
    return TransactionTooLarge(
        f"a transaction on the {store.backend} registry writes at most {limit} tables; {tables} "
        "were given; nothing was written: split the transaction",
        max_tables=limit,
    )


def too_large_with_branch(store: MetaStore, lines: int, limit: int) -> TransactionTooLarge:
    """A commit that moves a branch's line must fit one registry write of ``limit`` ops: over
    several (``transaction_chunks``), its commit point would make a version visible that a
    branch's readers do not look for, and its completion moves main's heads only."""
    most = limit // OPS_PER_TABLE
    return TransactionTooLarge(
        f"a transaction that moves a branch's line commits in one registry write: at most {most} "
        f"lines on the {store.backend} registry; {lines} were given; nothing was written: split it",
        max_tables=most,
    )


def table_ops(
    ctx: CatalogContext, w: TableWrite, siblings: dict[str, int], txn_id: str | None = None
) -> tuple[list[Op], VersionRecord]:
    """One table's operations in the transaction, and its final version's record (naming
    ``siblings``, the other tables' new versions, and ``txn_id``, the transaction record of a
    commit over several registry writes, on every version record)."""
    assert w.pending is not None and w.ns is not None and w.lease is not None
    pending, ns = w.pending, w.ns
    record = ns.record
    *steps, (last, log_key, entry) = pending.held
    staging = last.manifest_path
    canonical = engine.canonical_manifest_path(staging, last.version)
    storage = ctx.storage(record.location)
    final = last.model_copy(update={"transaction": siblings, "transaction_id": txn_id})
    if not engine.manifest_exists(record.location, canonical, storage):
        # Registered at its canonical path, published right after (as a single commit does).
        final = final.model_copy(update={"manifest_path": canonical, "staged_from": staging})
    pending.staged[last.version] = staging
    rows, nbytes = pending.stream_totals() if pending.stream_totals else (0, 0)
    entry = entry.model_copy(
        update={
            "operation": pending.operation,
            "from_version": record.current_version,
            "rows_added": rows,
            "bytes_added": nbytes,
            "rows_removed": pending.rows_removed,
            "detail": dict(pending.detail),
        }
    )
    updates: dict[str, object] = {"current_version": last.version}
    if pending.schema_ipc is not None:
        updates["schema_ipc_b64"] = TableRecord.encode_schema(pending.schema_ipc)
    marker = CommitMarker(
        commit_id=pending.commit_id,
        target=str(w.name),
        operation=pending.operation,
        branch=w.branch,
        incarnation=record.incarnation,
        from_version=record.current_version,
        to_version=last.version,
        log_key=log_key,
        at_ms=entry.at_ms,
    )
    ops: list[Op] = [
        Put(keys.version(record.incarnation, last.version), final.encode(), ABSENT),
        Put(ns.head_key, record.model_copy(update=updates).encode(), ns.record_revision),
        Put(log_key, entry.encode(), ABSENT),
        Put(keys.commit_marker(pending.commit_id), marker.encode(), ABSENT),
        w.lease.release_op(),
    ]
    for ver, step_key, step_entry in steps:
        pending.staged[ver.version] = ver.manifest_path
        ops += [
            Put(
                keys.version(record.incarnation, ver.version),
                ver.model_copy(update={"transaction_id": txn_id}).encode(),
                ABSENT,
            ),
            Put(step_key, step_entry.encode(), ABSENT),
        ]
    return ops, final


__all__ = [
    "MAX_CHUNKED_TABLES",
    "OPS_PER_TABLE",
    "max_tables",
    "one_write_ops",
    "table_ops",
    "too_large",
    "too_large_with_branch",
]
