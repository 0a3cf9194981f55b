"""Atomic multi-table commits: several tables' new versions become visible together or not at all.

``with catalog.transaction() as tx: tx.append(a, r1); tx.overwrite(b, r2)`` records the writes;
leaving the block without an exception commits them:

1. every table's lease is taken, in sorted name order (two transactions never deadlock); small
   appends to tables whose leases are free first try without acquiring them
   (``transaction_unacquired``: the registry transaction is conditional on every lease record as
   read, and a refusal commits the same rows under acquired leases);
2. each table's data files and staging manifest are written through its bound namespace, which
   *holds back* the version instead of registering it (``PendingCommit.hold``): nothing visible;
3. ONE registry transaction registers every version, moves every table's head, appends every
   log entry and commit marker and releases every lease (SQLite: one transaction; DynamoDB: one
   TransactWriteItems). A failure before it leaves nothing visible; the staging files are
   removed here when possible, else by the next writer's settle or the orphan scan. When the
   ops do not fit one registry write, the commit spans several, through a transaction record
   whose one conditional update is the commit point (``transaction_chunks``);
4. each manifest is published at its canonical path, as a single-table commit does; a crash
   here leaves versions registered at their canonical path with ``staged_from`` set, which the
   next reader or writer publishes (``manifests.finish_version``).

A table costs ``OPS_PER_TABLE`` registry operations (plus two per schema step an evolving
append takes), and one registry transaction carries at most the backend's ``max_transact_ops``
(SQLite: 2,000 tables; DynamoDB, one TransactWriteItems of 100 items: 19) and
``max_transact_bytes`` (DynamoDB: 4 MB, fewer wide tables; ``transaction_register``); over several, a
transaction takes ``MAX_CHUNKED_TABLES`` (``max_tables``). One over it is refused
(TransactionTooLarge) before any lease is taken or byte written. Before staging, under the
leases, a record above a table's head (a killed publish's, or another transaction's) is
cleared or, if its transaction committed, completed (``transaction_recovery``).
Each table's commit id is the transaction's with ``-t<i>`` appended (``i`` in sorted-name order),
so a transaction given a commit id replays like a single commit.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING

from lake_platform.catalog.context import UNREAD, check_commit_id, input_error
from lake_platform.catalog.pending import PendingCommit
from lake_platform.catalog.provenance import UNSTATED, Provenance
from lake_platform.catalog.replays import Wanted
from lake_platform.catalog.results import CommitResult
from lake_platform.catalog.staging_pool import stage_all
from lake_platform.catalog.table_write import TableWrite
from lake_platform.catalog.transaction_ops import OPS_PER_TABLE, max_tables, too_large
from lake_platform.catalog.transaction_recovery import clear_above
from lake_platform.catalog.transaction_register import register
from lake_platform.catalog.transaction_unacquired import read_ahead, rewind, unacquired_lease
from lake_platform.engine import lance_engine as engine
from lake_platform.errors import (
    ConcurrentModification,
    InvalidInput,
)
from lake_platform.naming import TableName
from lake_platform.registry import keys
from lake_platform.registry.store import Item, Put, fits, get_all

if TYPE_CHECKING:
    import pyarrow as pa

    from lake_platform.catalog.principals import Principal
    from lake_platform.catalog.tables import Tables

log = logging.getLogger(__name__)


class Transaction:
    """The writes of one atomic multi-table commit (see the module docstring). Recording a write
    reads nothing; ``commit`` (called on leaving the ``with`` block) does all the work."""

    def __init__(self, tables: Tables, by: Provenance = UNSTATED, *, max_ops: int | None = None) -> None:
        self._tables = tables
        self._ctx = tables.ctx
        self._by = by
        #: Registry operations one registry write of this transaction carries: the backend's
        #: (a smaller ``max_ops`` spreads the commit over several writes on any backend).
        self._limit = min(max_ops or tables.ctx.store.max_transact_ops, tables.ctx.store.max_transact_ops)
        self.commit_id = check_commit_id(by.commit_id)
        self._writes: dict[str, TableWrite] = {}
        #: Set once committed: one result per table, in sorted name order.
        self.results: list[CommitResult] = []

    def append(
        self, name: str, data: pa.RecordBatchReader, *, detail: dict[str, object] | None = None
    ) -> None:
        self._add(name, data, "append", detail)

    def overwrite(
        self, name: str, data: pa.RecordBatchReader, *, detail: dict[str, object] | None = None
    ) -> None:
        self._add(name, data, "overwrite", detail)

    def _add(
        self,
        name: str,
        data: pa.RecordBatchReader,
        mode: str,
        detail: dict[str, object] | None,
        branch: str | None = None,
    ) -> TableWrite:
        """``branch``: the write moves that branch's line of the table, not main's."""
        from lake_platform.catalog.arrow_io import as_reader

        if self.results:
            raise InvalidInput("this transaction is committed already")
        w = TableWrite(TableName.parse(name), mode, as_reader(data), dict(detail or {}), branch=branch)
        if w.line in self._writes:
            raise InvalidInput(f"a transaction writes each table once (each branch too); {w.line} is in it")
        if len(self._writes) >= max_tables(self._ctx.store):
            raise too_large(self._ctx.store, len(self._writes) + 1)
        self._writes[w.line] = w
        return w

    def __enter__(self) -> Transaction:
        return self

    def __exit__(self, exc_type: object, *exc: object) -> None:
        if exc_type is None:
            self.commit()

    # -- the commit ---------------------------------------------------------------------------

    def commit(self) -> list[CommitResult]:
        if self.results:
            return self.results
        if not self._writes:
            raise InvalidInput("a transaction needs at least one write")
        writes = sorted(self._writes.values(), key=lambda w: w.order)
        for i, w in enumerate(writes):
            w.detail.setdefault("transaction", self.commit_id)
            w.detail.setdefault("transaction_tables", len(writes))
            w.commit_id = f"{self.commit_id}-t{i}"
        replay = self._replayed(writes)
        if replay is not None:
            self.results = replay
            return replay
        who = self._ctx.who(self._by.principal)
        # Every table and its parent in one registry request (not one per table).
        for w, (parent_item, table_item) in zip(
            writes, self._read_pairs(writes, self._plan_keys), strict=True
        ):
            w.table_item = table_item
            self._plan(w, who, parent_item, table_item)
        if not self._commit_unacquired(writes, who):
            replay = self._commit_leased(writes, who)
            if replay is not None:  # this commit's own, completed from its transaction record
                self.results = replay
                return replay
        self._ctx.at("transaction:registered")
        for w in writes:
            self._publish(w)
            self._ctx.at("transaction:published")
        self.results = [self._tables.commits.result(w.pending, str(w.name)) for w in writes if w.pending]
        return self.results

    def _commit_leased(self, writes: list[TableWrite], who: Principal) -> list[CommitResult] | None:
        # Every lease record in a request or two, not one read a table before its acquire.
        self._ctx.gate.read_ahead([w.record.incarnation for w in writes if w.record is not None])
        with contextlib.ExitStack() as leases:
            for w in writes:  # sorted: two transactions take shared leases in the same order
                assert w.record is not None
                w.lease = leases.enter_context(self._ctx.gate.hold(w.record.incarnation))
                self._ctx.at(f"transaction:leased:{w.name}")
            try:
                # Re-read under the leases: every table with its current version's record (the
                # settle needs it) and the one above it, in one registry request; a record above
                # a head is cleared or completed (its transaction committed) first.
                heads = self._read_pairs(writes, self._head_keys)
                above = [(w.lease, table, up) for w, (table, _, up) in zip(writes, heads, strict=True)]
                if clear_above(self._ctx.store, above):
                    replay = self._replayed(writes)
                    if replay is not None:
                        return replay
                    heads = self._read_pairs(writes, self._head_keys)
                self._stage_all(writes, who, [[table, current] for table, current, _ in heads])
                self._ctx.at("transaction:staged")
                register(self._ctx, self.commit_id, writes, self._limit)
            except BaseException:
                self._discard_staged(writes)
                raise
        return None

    def _commit_unacquired(self, writes: list[TableWrite], who: Principal) -> bool:
        """Small appends to tables whose leases are free, committed the way one small append is
        (architecture.md, "Small appends without acquiring the lease"): one read of every
        table's lease, current version and next version records (a record there: the leased
        path); each table staged under an unacquired lease (no acquire, heartbeat or settle:
        the namespace refuses, LeaseRaced, whatever would need them); the one registry
        transaction conditional on every lease record's revision read, so it lands only if
        nobody took a lease since. False when this cannot be tried or was refused, with nothing
        landed: the caller commits the same rows under the leases."""
        # Its heads alone more bytes than one registry write carries (wide schemas): several.
        heads = [Put(w.table_item.key, w.table_item.value) for w in writes if w.table_item is not None]
        one_write = OPS_PER_TABLE * len(writes) <= self._limit and fits(self._ctx.store, heads)
        if not one_write or not read_ahead(writes, self._ctx.settings):
            return False  # several registry writes: under acquired leases only
        ahead = self._read_pairs(writes, self._ahead_keys)
        with contextlib.ExitStack() as turns:
            for w, (lease_item, version_item, above_item) in zip(writes, ahead, strict=True):
                w.lease = unacquired_lease(self._ctx.gate, w, lease_item, version_item, above_item, turns)
                if w.lease is None:
                    rewind(writes)
                    return False
                self._ctx.at(f"transaction:leased:{w.name}")
            try:
                self._stage_all(writes, who, [[w.table_item, None] for w in writes])
                self._ctx.at("transaction:staged")
                register(self._ctx, self.commit_id, writes, self._limit)
            except ConcurrentModification as exc:  # LeaseRaced among them: nothing registered
                self._discard_staged(writes)
                log.info("transaction %s: %s; committing under the leases", self.commit_id, exc.message)
                rewind(writes)
                return False
            except BaseException:
                self._discard_staged(writes)
                raise
        return True

    def _stage_all(self, writes: list[TableWrite], who: Principal, heads: list[list[Item | None]]) -> None:
        """Stage every table side by side (``staging_pool``); the first failure is raised once
        every table's write has stopped."""
        staged = list(zip(writes, heads, strict=True))
        stage_all(lambda pair: self._stage(pair[0], who, *pair[1]), staged)

    def _replayed(self, writes: list[TableWrite]) -> list[CommitResult] | None:
        if self._by.commit_id is None:
            return None
        first, *others = (self._wanted(w) for w in writes)
        # The first alone (a new id, the usual case, is one read); the rest in a few registry
        # requests, not two round trips a table.
        (replay,) = self._ctx.replayed_all([first])
        if replay is None:
            return None
        results = [replay, *(r for r in self._ctx.replayed_all(others) if r is not None)]
        # Some tables only: committed over several registry writes, not every head moved yet
        # (the leased path completes it from its record, then replays).
        return results if len(results) == len(writes) else None

    def _wanted(self, w: TableWrite) -> Wanted:
        """What ``w``'s id must have landed as to be answered from it (table, mode, line); an id
        that landed as another commit: InvalidInput."""
        return Wanted(w.commit_id, str(w.name), w.mode, w.branch)

    def _read_pairs(
        self, writes: list[TableWrite], wanted: Callable[[TableWrite], list[str]]
    ) -> list[list[Item | None]]:
        """Two registry items per table (``wanted``), read in as few requests as ``get_many``
        allows (a key several tables share, their namespace, is read once)."""
        pairs = [wanted(w) for w in writes]
        distinct = list(dict.fromkeys(k for pair in pairs for k in pair))
        found = dict(zip(distinct, get_all(self._ctx.store, distinct), strict=True))
        return [[found[k] for k in pair] for pair in pairs]

    def _plan_keys(self, w: TableWrite) -> list[str]:
        return [self._ctx.parent_key(w.name), keys.table(w.name)]

    @staticmethod
    def _ahead_keys(w: TableWrite) -> list[str]:
        assert w.record is not None
        return [
            keys.lease(w.record.incarnation),
            *(keys.version(w.record.incarnation, w.record.current_version + i) for i in (0, 1)),
        ]

    @staticmethod
    def _head_keys(w: TableWrite) -> list[str]:
        assert w.record is not None
        inc, current = w.record.incarnation, w.record.current_version
        return [w.head_key, keys.version(inc, current), keys.version(inc, current + 1)]

    def _plan(self, w: TableWrite, who: Principal, parent_item: Item | None, table_item: Item | None) -> None:
        """Identity, parent, permission and schema, before any lease is taken or byte written."""
        from lake_platform.catalog.arrow_io import schema_from_ipc

        self._ctx.require_parent(w.name, parent_item, who=who)
        who.require(w.name.project, "write", f"write to {w.name}")
        w.record, _ = self._ctx.table(w.name, item=table_item)
        if w.mode == "append":
            current = schema_from_ipc(w.record.schema_ipc)
            w.change = self._tables.schemas.plan_schema(w.name, current, [w.data.schema])
            if w.change or w.change.filled:
                w.detail.update(w.change.describe())

    def _stage(
        self, w: TableWrite, who: Principal, table_item: Item | None, version_item: Item | None
    ) -> None:
        """Under the lease: write the table's data files and staging manifest(s); the namespace
        holds the versions back, so nothing is registered."""
        from lake_platform.catalog.arrow_io import StreamCounter, schema_to_ipc
        from lake_platform.catalog.column_names import check_schema

        assert w.record is not None and w.lease is not None
        planned_on = w.record.schema_ipc_b64
        expected = w.record.current_version
        record, revision = self._ctx.table(w.name, incarnation=w.record.incarnation, item=table_item)
        if w.mode == "append" and record.schema_ipc_b64 != planned_on:
            raise ConcurrentModification(
                f"the schema of {w.name} changed while this transaction was being prepared; "
                "nothing was written, retry"
            )
        w.record = record
        change = w.change
        if w.mode == "overwrite":
            check_schema(w.data.schema, str(w.name))
            schema_ipc: bytes | None = schema_to_ipc(w.data.schema)
        else:
            schema_ipc = schema_to_ipc(change.target) if change else None
        counter = StreamCounter()
        # Conformed whenever planned: a column filled with nulls is no schema change.
        stream = counter.wrap(w.data, change.target if change is not None else None)
        pending = PendingCommit(
            commit_id=w.commit_id,
            operation=w.mode,
            actor=self._ctx.actor(self._by.actor, who),
            run_id=self._by.run_id,
            schema_ipc=schema_ipc,
            stream_totals=counter.totals,
            detail=w.detail,
            # Every version this write makes is held back, the last one too: the transaction
            # registers them all at once.
            hold=[*(change.steps if change else []), w.mode],
        )
        w.pending = pending
        if w.lease.optimistic:
            pending.base = w.base  # no settle: it needs the lease (see _commit_unacquired)
        else:
            ahead = version_item if record.current_version == expected else UNREAD
            self._tables.manifests.settle(w.name, record, pending, current_item=ahead)
        if w.mode == "overwrite":
            pending.rows_removed = self._tables.reads.snapshot(
                w.name, record, record.current_version
            ).count_rows()
        ns = self._tables.commits.bind(w.name, record, revision, pending, w.lease)
        w.ns = ns
        w.lease.check()
        storage = self._ctx.storage(record.location)
        try:
            self._ctx.at("transaction:before-write")
            if change:
                ds = engine.open_version(
                    namespace=ns,
                    table_id=w.name.parts,
                    version=record.current_version,
                    storage_options=storage,
                )
                engine.evolve_schema(ds, widened=change.widened, added=change.added)
            engine.write(stream, namespace=ns, table_id=w.name.parts, mode=w.mode, storage_options=storage)
        except Exception as exc:  # noqa: BLE001 - nothing can have landed: every version is held
            w.staged = [h[0].manifest_path for h in pending.held]
            if counter.error is not None:
                raise input_error(counter.error) from None
            if ns.failure is not None:
                raise ns.failure from None
            self._tables.commits.resolve_failure(pending, ns, exc)
            raise
        w.staged = [h[0].manifest_path for h in pending.held]
        if len(pending.held) != len(pending.hold):
            raise ConcurrentModification(f"the write to {w.name} staged no version; nothing was committed")
        self._ctx.at("transaction:written")

    def _publish(self, w: TableWrite) -> None:
        """Put each landed manifest at its canonical path and remove the staging objects; a
        failure leaves the versions committed, for the next reader or writer to publish."""
        assert w.pending is not None and w.ns is not None and w.record is not None
        pending = w.pending
        for version, (ver, revision) in list(pending.versions.items()):
            if revision == 0:
                item = self._ctx.store.get(keys.version(w.record.incarnation, version))
                if item is None:
                    continue
                revision = item.revision
            pending.versions[version] = w.ns.publisher.publish(ver, revision)
        pending.held.clear()
        self._tables.manifests.finalize(w.record, pending)
        self._tables.commits.enrich(w.name, w.record, pending)  # an overwrite's file counts

    def _discard_staged(self, writes: list[TableWrite]) -> None:
        """Nothing was registered: remove the staging manifests written (their data files are
        the orphan scan's, as after any refused commit)."""
        for w in writes:
            if not w.staged or w.record is None:
                continue
            if self._ctx.store.get(keys.commit_marker(w.pending.commit_id if w.pending else "-")) is not None:
                return  # the commit landed after all (an unknown outcome resolved): keep everything
            try:
                engine.remove_files(w.record.location, w.staged, self._ctx.storage(w.record.location))
            except Exception:  # noqa: BLE001 - settle or the orphan scan removes them later
                log.warning("could not remove the staging manifests of %s", w.name, exc_info=True)


__all__ = ["OPS_PER_TABLE", "Transaction", "max_tables"]
