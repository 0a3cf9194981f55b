"""The registry side of an atomic multi-table commit (``transaction``): what one table's version
costs in the one registry transaction, the ops themselves, and the limit per backend that
follows (``MetaStore.max_transact_ops``: SQLite's one transaction, DynamoDB's one
TransactWriteItems)."""

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
#: table record (the head), its commit-log entry, its commit marker, its lease (fence + release).
OPS_PER_TABLE = 5


def max_tables(store: MetaStore) -> int:
    """The most tables one transaction writes on ``store``'s backend (appends without a schema
    step; each step costs two more operations)."""
    return store.max_transact_ops // OPS_PER_TABLE


def too_large(store: MetaStore, tables: int, steps: int = 0) -> TransactionTooLarge:
    limit = max_tables(store)
    need = f"{tables} tables" + (f" and {steps} schema steps" if steps else "")
    return TransactionTooLarge(
        f"a transaction on the {store.backend} registry writes at most {limit} tables "
        f"(one atomic registry write of {store.max_transact_ops} operations, {OPS_PER_TABLE} per table "
        f"and 2 per schema step); {need} need {OPS_PER_TABLE * tables + 2 * steps}; nothing was "
        "written: split the transaction",
        max_tables=limit,
    )


def table_ops(ctx: CatalogContext, w: TableWrite, siblings: dict[str, int]) -> tuple[list[Op], VersionRecord]:
    """One table's operations in the transaction, and its final version's record (naming
    ``siblings``, the other tables' new versions)."""
    assert w.pending is not None and w.ns is not None and w.lease is not None
    pending, ns = w.pending, w.ns
    record = ns.record
    *steps, (last, log_key, entry) = pending.held
    staging = last.manifest_path
    canonical = engine.canonical_manifest_path(staging, last.version)
    storage = ctx.storage(record.location)
    final = last.model_copy(update={"transaction": siblings})
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
        incarnation=record.incarnation,
        from_version=record.current_version,
        to_version=last.version,
        log_key=log_key,
        at_ms=entry.at_ms,
    )
    ops: list[Op] = [
        Put(keys.version(record.incarnation, last.version), final.encode(), ABSENT),
        Put(keys.table(w.name), record.model_copy(update=updates).encode(), ns.record_revision),
        Put(log_key, entry.encode(), ABSENT),
        Put(keys.commit_marker(pending.commit_id), marker.encode(), ABSENT),
        w.lease.release_op(),
    ]
    for ver, step_key, step_entry in steps:
        pending.staged[ver.version] = ver.manifest_path
        ops += [
            Put(keys.version(record.incarnation, ver.version), ver.encode(), ABSENT),
            Put(step_key, step_entry.encode(), ABSENT),
        ]
    return ops, final


__all__ = ["OPS_PER_TABLE", "max_tables", "table_ops", "too_large"]
