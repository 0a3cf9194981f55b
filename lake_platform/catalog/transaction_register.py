"""A multi-table commit's registry step (``transaction``, step 3): every staged table's version
registered, head moved, log entries and commit marker written and lease released, in ONE registry
write when its ops fit one by count and by bytes (``MetaStore.max_transact_ops`` and
``max_transact_bytes``: DynamoDB's TransactWriteItems takes 99 items and 4 MB), else over several
(``transaction_chunks``). Tables with wide schemas fit one by count and not by bytes (each head
holds its schema): they take several, as many tables do."""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING

from lake_platform.catalog.transaction_chunks import commit_chunked
from lake_platform.catalog.transaction_ops import OPS_PER_TABLE, one_write_ops, table_ops
from lake_platform.errors import ConcurrentModification, ConditionFailed, ServiceUnavailable
from lake_platform.registry.records import VersionRecord
from lake_platform.registry.store import ABSENT, Item, Op, fits

if TYPE_CHECKING:
    from lake_platform.catalog.context import CatalogContext
    from lake_platform.catalog.table_write import TableWrite


def register(ctx: CatalogContext, commit_id: str, writes: list[TableWrite], limit: int) -> None:
    """The registry write(s) that make every table's version visible, and what they tell each
    table's pending commit (its versions' revisions, its lease released); ``limit``: ops a
    registry write of this commit carries at most."""
    # Each version names main's other lines (a snapshot completes a commit it sees part of;
    # it holds main's lines only).
    got = {w.line: w.pending.held[-1][0].version for w in writes if w.pending and not w.branch}
    once = None if one_write_ops(writes) > limit else _register_once(ctx, commit_id, writes, got, limit)
    chunked = once is None
    if once is not None:
        results, finals = once
    elif any(w.lease is not None and w.lease.optimistic for w in writes):
        # Several registry writes need the leases held (its record's deadline, the abort): the
        # caller commits the same rows under acquired leases.
        raise ConcurrentModification(
            f"the transaction {commit_id} takes several registry writes; nothing was committed"
        )
    else:
        results, finals = commit_chunked(ctx, commit_id, writes, got, limit)
    at = 0
    for w, final in zip(writes, finals, strict=True):
        assert w.pending is not None and w.lease is not None and w.ns is not None
        pending, steps = w.pending, len(w.pending.held) - 1
        version_item, table_item, _, marker_item, lease_item = results[at : at + OPS_PER_TABLE]
        if lease_item is not None or not chunked:  # chunked: released only as its head moved
            w.lease.released_by_commit(lease_item.revision if lease_item is not None else None)
        pending.from_version = w.ns.record.current_version
        pending.marker_revision = marker_item.revision if marker_item is not None else ABSENT
        pending.versions[final.version] = (final, version_item.revision if version_item else 0)
        held = [(h[0], h[1]) for h in pending.held[:-1]]
        for i, (ver, log_key) in enumerate(held):
            item = results[at + OPS_PER_TABLE + 2 * i]
            pending.versions[ver.version] = (ver, item.revision if item is not None else 0)
            pending.landed.append((ver.version, log_key))
        pending.landed.append((final.version, pending.held[-1][1]))
        w.record = w.ns.record.model_copy(update={"current_version": final.version})
        if table_item is not None:
            w.ns.record_revision = table_item.revision
        at += OPS_PER_TABLE + 2 * steps


def _register_once(
    ctx: CatalogContext, commit_id: str, writes: list[TableWrite], got: dict[str, int], limit: int
) -> tuple[list[Item | None], list[VersionRecord]] | None:
    """The commit as one registry write; None, with nothing written, when its ops are more
    bytes than one carries."""
    ops: list[Op] = []
    finals: list[VersionRecord] = []
    with contextlib.ExitStack() as fences:
        for w in writes:
            assert w.lease is not None
            fences.enter_context(w.lease.fenced())
        for w in writes:
            table, final = table_ops(ctx, w, {n: v for n, v in got.items() if n != w.line})
            ops += table
            finals.append(final)
        if not fits(ctx.store, ops, limit):
            return None
        try:
            return ctx.store.transact(ops), finals
        except ConditionFailed as exc:
            raise ConcurrentModification(
                f"the transaction {commit_id} was refused ({exc.key} changed); nothing was committed"
            ) from None
        except ServiceUnavailable:
            if ctx.commit_landed(writes[0].commit_id) is None:
                raise
            return [None] * len(ops), finals  # landed: revisions are read back when publishing


__all__ = ["register"]
