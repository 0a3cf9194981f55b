"""A multi-table commit larger than one registry write (DynamoDB: one TransactWriteItems of 100
items and 4 MB, so 19 tables, fewer wide ones), made over several and still all or nothing for
readers. Each write is packed by count and by bytes (``MetaStore.max_transact_bytes``: a wide
table's head holds its schema), so none is refused for its size, least of all after the commit
point.

Under every table's lease, with every table staged (``transaction``):

1. a transaction record ``txn/<id>`` is put, pending, only if absent: every table's versions,
   the head move, log entries and commit marker it will write, and a deadline before the leases
   run out (``TransactionRecord``); point ``transaction:recorded``;
2. every table's version records are registered ABOVE its head, each naming the transaction
   (``VersionRecord.transaction_id``), in chunks that each fit one registry write, every chunk
   conditional on its tables' leases; point ``transaction:chunk-registered`` after each. No reader
   reaches a version above the head it reads, so nothing is visible yet;
3. THE COMMIT POINT: one conditional update of the record, pending -> committed (refused when
   someone aborted it, ``transaction_recovery``); point ``transaction:committed``. From here the
   commit is visible: a reader holding one table's new version and another's old one reads the
   record and views the new one (``query.snapshot_transactions``);
4. the heads are moved in chunks (each: the head's compare-and-swap, log entries, commit marker,
   lease release); point ``transaction:rolled-forward`` after each; then the record is deleted.

A failure before the commit point aborts: the record is flipped to aborted and the versions
above the heads are deleted. A writer killed anywhere leaves what ``transaction_recovery``
completes (committed) or clears (not): the next writer of any of its tables, or ``lake table
repair``, does it under that table's lease.
"""

from __future__ import annotations

import contextlib
import logging
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from lake_platform.catalog import transaction_recovery as recovery
from lake_platform.errors import (
    ConcurrentModification,
    ConditionFailed,
    LakeError,
    RecordTooLarge,
    ServiceUnavailable,
    TransactionTooLarge,
)
from lake_platform.registry import keys
from lake_platform.registry.records import (
    CommitLogEntry,
    CommitMarker,
    TableRecord,
    TransactionRecord,
    TransactionTable,
    VersionRecord,
    decode,
    new_id,
    now_ms,
)
from lake_platform.registry.store import ABSENT, Check, Item, Op, Put, cost, pack

if TYPE_CHECKING:
    from lake_platform.catalog.context import CatalogContext
    from lake_platform.catalog.table_write import TableWrite

log = logging.getLogger(__name__)


@dataclass
class TablePart:
    """One table's ops in the chunked commit, by phase, with their places in the flat list
    ``transaction_ops.table_ops`` returned (the caller reads the results by those places)."""

    write: TableWrite
    #: Its version records (held schema steps and the final one), registered above the head.
    versions: list[tuple[int, Put]] = field(default_factory=list)
    #: The head, log entries and commit marker: written when the head moves.
    moves: list[tuple[int, Put]] = field(default_factory=list)
    #: The lease release's place (the op itself is made under the fence, at the time).
    release_at: int = -1

    def entry(self) -> TransactionTable:
        w = self.write
        assert w.ns is not None and w.pending is not None
        head = next(op for _, op in self.moves if op.key.startswith("tbl/"))
        moved = decode(TableRecord, head.value, head.key)
        marker = next(op for _, op in self.moves if op.key.startswith("cid/"))
        return TransactionTable(
            name=str(w.name),
            incarnation=w.ns.record.incarnation,
            from_version=w.ns.record.current_version,
            to_version=moved.current_version,
            versions=sorted(int(op.key.rpartition("/")[2]) for _, op in self.versions),
            schema_ipc_b64=moved.schema_ipc_b64 if w.pending.schema_ipc is not None else None,
            logs={
                op.key: decode(CommitLogEntry, op.value, op.key)
                for _, op in self.moves
                if op.key.startswith("log/")
            },
            marker=decode(CommitMarker, marker.value, marker.key),
        )


def split(write: TableWrite, ops: list[Op], at: int) -> TablePart:
    """``write``'s ops (from ``table_ops``, starting at place ``at`` of the flat list) by phase."""
    part = TablePart(write)
    for i, op in enumerate(ops, start=at):
        if op.key.startswith("lse/"):
            part.release_at = i
        elif isinstance(op, Put) and op.key.startswith("ver/"):
            part.versions.append((i, op))
        elif isinstance(op, Put):
            part.moves.append((i, op))
    return part


class ChunkedCommit:
    """The commit of ``parts`` over registry writes of at most ``limit`` ops (module docstring)."""

    def __init__(self, ctx: CatalogContext, commit_id: str, txn_id: str, parts: list[TablePart], limit: int):
        self.ctx, self.commit_id, self.txn_id = ctx, commit_id, txn_id
        self.parts, self.limit = parts, limit
        self.key = keys.transaction(txn_id)
        #: Every op's result, at its place in the flat list (None: not known; read back later).
        self.results: list[Item | None] = [None] * (1 + max(p.release_at for p in parts))
        self.record = TransactionRecord(
            txn_id=txn_id,
            commit_id=commit_id,
            # One lease TTL: its registry writes take seconds. A writer slower than that aborts
            # rather than commits, and past it anyone may abort the record (``recovery.sweep``).
            deadline_ms=now_ms() + int(1000 * ctx.settings.lease_ttl_seconds),
            tables=[p.entry() for p in parts],
        )
        self.revision = ABSENT

    def run(self) -> list[Item | None]:
        self._check_record()
        recovery.sweep(self.ctx.store, self.limit)  # what killed writers left, past its deadline
        self._put_record()
        try:
            self._register()
            committed = self._commit_point()
        except BaseException:
            self._abort()
            raise
        if not committed:
            self._abort()
            raise ConcurrentModification(
                f"the transaction {self.commit_id} was aborted (by a writer that took one of its "
                "tables' leases, or past its deadline); nothing was committed"
            )
        for p in self.parts:  # committed: the staging manifests are its versions' now, kept
            p.write.staged = []
        self.ctx.at("transaction:committed")
        self._roll_forward()
        return self.results

    def _check_record(self) -> None:
        """The record holds every table's log entries and new schema in one registry record: one
        the backend cannot store (DynamoDB: 400 KB) refuses the commit before anything is written,
        as a transaction to split."""
        try:
            self.ctx.store.check_record(self.key, self.record.encode())
        except RecordTooLarge as exc:
            fit = max(1, len(self.parts) * exc.limit // max(exc.size, 1))
            raise TransactionTooLarge(
                f"the transaction {self.commit_id} spans several registry writes, so one registry "
                f"record holds every table's log entries and new schema: {exc.size:,} bytes for "
                f"{len(self.parts)} tables, over the {exc.limit:,} the {self.ctx.store.backend} "
                "registry stores in one record; nothing was written: split the transaction (about "
                f"{fit} of these tables at once), or give them less detail or narrower new schemas",
                max_tables=fit,
            ) from None

    def _put_record(self) -> None:
        item = self.ctx.store.transact([Put(self.key, self.record.encode(), ABSENT)])[0]
        assert item is not None
        self.revision = item.revision
        self.ctx.at("transaction:recorded")

    def _chunks(self, ops: list[list[Op]]) -> list[list[TablePart]]:
        """The parts packed in order into registry writes the store takes (at most ``limit``
        ops, and ``max_transact_bytes``: wide tables' heads are a few hundred KB each), ``ops``:
        each part's, by its index."""
        costs = [cost(self.ctx.store, part) for part in ops]
        batches = pack(costs, self.limit, self.ctx.store.max_transact_bytes)
        return [[self.parts[i] for i in batch] for batch in batches]

    def _register(self) -> None:
        """Every version record above its head, chunk by chunk, each fenced by its tables' leases."""
        # Each part's versions and its lease's fence (a condition on its lease record).
        fence = [[Check(p.write.lease.key, 0)] if p.write.lease else [] for p in self.parts]
        weighed = [[op for _, op in p.versions] + f for p, f in zip(self.parts, fence, strict=True)]
        for chunk in self._chunks(weighed):
            with contextlib.ExitStack() as fenced:
                fences = [fenced.enter_context(p.write.lease.fenced()) for p in chunk if p.write.lease]
                ops = [op for p in chunk for _, op in p.versions]
                try:
                    landed = self.ctx.store.transact([*ops, *fences])
                except ConditionFailed as exc:
                    raise ConcurrentModification(
                        f"the transaction {self.commit_id} was refused ({exc.key} changed); "
                        "nothing was committed"
                    ) from None
            for (at, _), item in zip((v for p in chunk for v in p.versions), landed, strict=False):
                self.results[at] = item
            self.ctx.at("transaction:chunk-registered")

    def _commit_point(self) -> bool:
        """Pending -> committed, if nobody aborted it and the leases and deadline still hold."""
        for p in self.parts:
            assert p.write.lease is not None
            p.write.lease.check()  # LeaseExpired: abort rather than commit on a lease run out
        if now_ms() >= self.record.deadline_ms:
            return False
        committed = self.record.model_copy(update={"state": "committed"})
        try:
            item = self.ctx.store.transact([Put(self.key, committed.encode(), self.revision)])[0]
        except ConditionFailed:
            return False
        except ServiceUnavailable:
            found = recovery.read_transaction(self.ctx.store, self.txn_id)
            if found is None or found[0].state != "committed":
                raise
            item = Item(self.key, committed.encode(), found[1])
        assert item is not None
        self.record, self.revision = committed, item.revision
        return True

    def _roll_forward(self) -> None:
        """The heads moved, chunk by chunk, each with its leases released; whatever a chunk could
        not move (a lease taken over, a head moved by another completer) is completed from the
        record without the leases, which the gate then releases as usual."""
        released = [[p.write.lease.release_op()] if p.write.lease else [] for p in self.parts]
        for chunk in self._chunks(
            [[op for _, op in p.moves] + r for p, r in zip(self.parts, released, strict=True)]
        ):
            try:
                self._move(chunk)
            except (ConditionFailed, LakeError) as exc:
                log.info("transaction %s: completing from its record (%s)", self.commit_id, exc)
                self._complete()
                return
            self.ctx.at("transaction:rolled-forward")
        recovery.forget(self.ctx.store, self.txn_id, self.revision)

    def _complete(self) -> None:
        """The heads a chunk could not move, moved from the record; past the commit point the
        commit is made whatever this meets (a throttled or unreachable registry): answering it
        as failed would have a caller write it again. Readers view it through the record, and
        the next writer of its tables, a reader or ``lake table repair`` completes it."""
        try:
            if recovery.roll_forward(self.ctx.store, self.record, self.limit):
                recovery.forget(self.ctx.store, self.txn_id)
        except LakeError as exc:
            log.warning(
                "transaction %s is committed; its heads lag until its tables' next writer, a reader "
                "or `lake table repair` completes it (%s)",
                self.commit_id,
                exc.message,
            )

    def _move(self, chunk: list[TablePart]) -> None:
        with contextlib.ExitStack() as fenced:
            for p in chunk:
                assert p.write.lease is not None
                fenced.enter_context(p.write.lease.fenced())
            ops = [op for p in chunk for _, op in p.moves]
            releases = [p.write.lease.release_op() for p in chunk if p.write.lease is not None]
            landed = self.ctx.store.transact([*ops, *releases])
        places = [at for p in chunk for at, _ in p.moves] + [p.release_at for p in chunk]
        for at, item in zip(places, landed, strict=True):
            self.results[at] = item

    def _abort(self) -> None:
        """Before the commit point: the record flipped to aborted (unless someone did), the
        versions above the heads deleted, the record deleted; best effort (whatever stays is
        cleared by the next writer of the table, ``transaction_recovery``)."""
        try:
            outcome = recovery.resolve(self.ctx.store, self.txn_id, leased=True, limit=self.limit)
            if outcome in ("aborted", "gone"):  # and what it registered after another's abort
                recovery.clear(self.ctx.store, self.record, self.limit)
        except Exception:  # noqa: BLE001 - only tidying: the next writer resolves it
            log.warning("could not clear the aborted transaction %s", self.commit_id, exc_info=True)


def commit_chunked(
    ctx: CatalogContext, commit_id: str, writes: list[TableWrite], siblings: dict[str, int], limit: int
) -> tuple[list[Item | None], list[VersionRecord]]:
    """Commit ``writes`` (staged, held back, under their leases) over registry writes of at most
    ``limit`` ops: the results of ``table_ops``' ops in their flat order (None where not known),
    and each table's final version record."""
    from lake_platform.catalog.transaction_ops import table_ops, too_large_with_branch

    if any(w.branch for w in writes):  # its recovery and readers know main's heads only
        raise too_large_with_branch(ctx.store, len(writes), limit)
    txn_id = new_id()
    parts: list[TablePart] = []
    finals: list[VersionRecord] = []
    at = 0
    for w in writes:
        others = {n: v for n, v in siblings.items() if n != w.line}
        ops, final = table_ops(ctx, w, others, txn_id)
        parts.append(split(w, ops, at))
        finals.append(final)
        at += len(ops)
    return ChunkedCommit(ctx, commit_id, txn_id, parts, limit).run(), finals


__all__ = ["ChunkedCommit", "TablePart", "commit_chunked", "split"]
