"""Completing or clearing a multi-table commit that spans several registry writes
(``transaction_chunks``) from its transaction record alone: what its writer does after the
commit point, and what the next writer of any of its tables, or ``lake table repair``, does when
it finds one of its versions above a head; a single-table reader finding one completes a
committed one too (``committed_head``), so no reader sees one table of it new and another old
(a reader whose registry credentials may only read tries once per commit, then only views it).

A version above a head that names a transaction (``VersionRecord.transaction_id``) is resolved
by reading the record once:

- ``committed``: the commit is visible already (readers view it through the record,
  ``query.snapshot_transactions``); every table's head is moved to its new version (a
  compare-and-swap from the version it left, with its log entries and commit marker), then the
  record is deleted. Moving a head needs no lease: only a head still at the version the commit
  left moves, and a writer holding that table's lease meanwhile finds its own commit refused on
  the version key (the commit's) and resolves it here first.
- ``pending``: a writer that holds the lease of one of its tables resolves it, since holding
  that lease proves the commit's writer lost it (taken over from a dead process, or expired);
  anyone else only once its deadline passed. The record is flipped to ``aborted`` only if still
  pending, so a commit point that won the race stands and is completed instead (aborting is
  always safe; the deadline only spares a live writer), then cleared.
- ``aborted``, or no record (deleted after an abort; a committed record is deleted only once no
  version of it is above a head): every version it registered above a head is deleted (only
  while it still names the transaction), then the record.
"""

from __future__ import annotations

import logging
import threading
import weakref
from collections.abc import Sequence
from typing import TYPE_CHECKING, Literal

from lake_platform.errors import ConcurrentModification, ConditionFailed, LakeError, PermissionDenied
from lake_platform.lru import BoundedLRU
from lake_platform.naming import TableName
from lake_platform.registry import keys
from lake_platform.registry.records import (
    TableRecord,
    TransactionRecord,
    TransactionTable,
    VersionRecord,
    decode,
    now_ms,
)
from lake_platform.registry.store import Check, Delete, Item, MetaStore, Op, Put, cost, get_all, pack

if TYPE_CHECKING:
    from lake_platform.catalog.lease import Lease

log = logging.getLogger(__name__)

#: ``gone``: no record (deleted once its heads all moved, or once it was aborted and cleared).
Outcome = Literal["committed", "aborted", "pending", "gone"]
#: Rounds of moving heads at most: each one only retries tables another completer raced.
ROUNDS = 4


def read_transaction(store: MetaStore, txn_id: str) -> tuple[TransactionRecord, int] | None:
    item = store.get(keys.transaction(txn_id))
    return None if item is None else (decode(TransactionRecord, item.value, item.key), item.revision)


def resolve(store: MetaStore, txn_id: str, *, leased: bool, limit: int | None = None) -> Outcome:
    """Complete or clear transaction ``txn_id``; ``leased``: the caller holds the lease of one of
    its tables (so a pending one is aborted). ``pending``: left alone (the caller holds no lease
    and its writer may still commit it before its deadline). ``limit``: ops per registry write."""
    limit = limit or store.max_transact_ops
    for _ in range(ROUNDS):
        found = read_transaction(store, txn_id)
        if found is None:
            return "gone"
        record, revision = found
        if record.state == "committed":
            if roll_forward(store, record, limit):
                forget(store, record.txn_id)  # kept while a version of it may be above a head
            return "committed"
        if record.state == "pending":
            if not leased and now_ms() < record.deadline_ms:
                return "pending"
            aborted = record.model_copy(update={"state": "aborted"})
            try:
                store.transact([Put(keys.transaction(txn_id), aborted.encode(), revision)])
            except ConditionFailed:
                continue  # committed or aborted meanwhile: read it again
            log.warning(
                "multi-table commit %s aborted: its writer lost a lease or its deadline", record.commit_id
            )
            record = aborted
        if clear(store, record, limit):
            forget(store, record.txn_id)
        return "aborted"
    return "pending"


def sweep(store: MetaStore, limit: int, most: int = 16) -> int:
    """Resolve the first ``most`` transaction records past their deadline (a writer killed before
    it registered anything leaves a pending one nothing else leads to); how many were."""
    now, done = now_ms(), 0
    for item in store.scan_prefix(keys.transaction(""), limit=most):
        record = decode(TransactionRecord, item.value, item.key)
        if record.deadline_ms < now and resolve(store, record.txn_id, leased=False, limit=limit) != "pending":
            done += 1
    return done


def resolve_version(store: MetaStore, item: Item, head_key: str, *, leased: bool) -> Outcome | None:
    """Resolve the transaction of ``item``, a version record found above the head ``head_key``
    holds; None when it names none (an interrupted publish's, ``branch_publish``). With its
    record gone, the version is deleted if still above the head (aborted, and missed by the
    clearing: a committed record is deleted only once every head moved), and ``aborted``."""
    ver = decode(VersionRecord, item.value, item.key)
    if ver.transaction_id is None:
        return None
    outcome = resolve(store, ver.transaction_id, leased=leased)
    if outcome != "gone":
        return outcome
    head = store.get(head_key)
    table = decode(TableRecord, head.value, head.key) if head is not None else None
    if head is not None and table is not None and table.current_version < ver.version:
        try:
            store.transact([Delete(item.key, item.revision), Check(head.key, head.revision)])
        except ConditionFailed:
            pass  # cleared, replaced, or the head moved meanwhile: nothing of it left to clear
    return "aborted"


def resolve_above(store: MetaStore, record: TableRecord, head_key: str, *, leased: bool) -> Outcome | None:
    """Resolve the transaction of the version record just above ``record`` (the head
    ``head_key`` holds), when there is one naming a transaction: one get otherwise. For whoever
    is about to take the table record away (drop, cascade): what a committed commit left behind
    this head must land in it first, or the dropped (and undropped) table would lack it."""
    item = store.get(keys.version(record.incarnation, record.current_version + 1))
    return None if item is None else resolve_version(store, item, head_key, leased=leased)


def settle_above(store: MetaStore, record: TableRecord, head_key: str, what: str) -> bool:
    """``resolve_above`` under the table's lease, for whoever is about to take the table record
    away (drop, cascade, rename): True when it changed the head (read it again); a commit still
    being made (only if its writer still held this lease) is ConcurrentModification."""
    item = store.get(keys.version(record.incarnation, record.current_version + 1))
    return item is not None and settle_version(store, item, head_key, what)


def settle_version(store: MetaStore, item: Item, head_key: str, what: str) -> bool:
    """``settle_above`` of ``item``, the version record just above the head, read already (a
    writer reads it with the head under the lease, ``Manifests.leased_head``)."""
    above = resolve_version(store, item, head_key, leased=True)
    if above == "pending":
        raise ConcurrentModification(
            f"{what} is in a multi-table commit still being made; nothing was changed"
        )
    return above is not None


class _RefusedCompletions:
    """Per registry store (held weakly: it goes with its catalog), the multi-table commits it was
    refused completing (read-only registry credentials): reads through it view them at their
    committed versions without trying again. Bounded per store; thread-safe."""

    def __init__(self, per_store: int = 256) -> None:
        self._per_store = per_store
        self._lock = threading.Lock()
        self._stores: weakref.WeakKeyDictionary[MetaStore, BoundedLRU[str, bool]] = (
            weakref.WeakKeyDictionary()
        )

    def note(self, store: MetaStore, txn_id: str) -> None:
        with self._lock:
            refused = self._stores.get(store)
            if refused is None:
                refused = self._stores[store] = BoundedLRU(self._per_store)
        refused.put(txn_id, True)

    def holds(self, store: MetaStore, txn_id: str) -> bool:
        with self._lock:
            refused = self._stores.get(store)
        return refused is not None and refused.peek(txn_id) is not None


_REFUSED = _RefusedCompletions()


def committed_head(store: MetaStore, record: TableRecord, ahead: Item | None) -> TableRecord:
    """``record`` (a table's head) as a single-table reader must see it: ``ahead`` is the
    version record just above it (``keys.version(incarnation, current_version + 1)``, None when
    absent), read with the head or with the head's own version record. Nothing more is read
    unless it names a transaction (a killed chunked commit's table its heads did not reach):
    then its record, once. ``committed``: the commit is completed here (``roll_forward``: it
    needs no lease) and the table viewed at its new version whatever the completion met (a
    store refused the write, read-only registry credentials, tries once per commit and logs one
    WARNING line naming who settles it; its later reads write nothing);
    ``pending``/``aborted``: the head is right (a reader holds no lease: a pending one is left
    to its writer, a writer of its tables or ``sweep``). Record gone: the head is read again,
    since the heads all moved meanwhile, or the version is an aborted one's leftover."""
    if ahead is None:
        return record
    ver = decode(VersionRecord, ahead.value, ahead.key)
    if (
        ver.transaction_id is None
        or ver.incarnation != record.incarnation
        or ver.version != record.current_version + 1
    ):
        return record
    found = read_transaction(store, ver.transaction_id)
    if found is None:
        item = store.get(keys.table(TableName.parse(record.name)))
        fresh = decode(TableRecord, item.value, item.key) if item is not None else None
        if (
            fresh is not None
            and fresh.incarnation == record.incarnation
            and fresh.current_version >= ver.version
        ):
            return fresh
        return record
    txn, _ = found
    mine = next((t for t in txn.tables if t.incarnation == record.incarnation), None)
    if txn.state != "committed" or mine is None or mine.from_version != record.current_version:
        return record
    # The commit is visible whether or not this reader moves its heads: the next writer of its
    # tables, repair or sweep completes it too.
    if not _REFUSED.holds(store, txn.txn_id):
        try:
            if roll_forward(store, txn, store.max_transact_ops):
                forget(store, txn.txn_id)
        except PermissionDenied as exc:
            # Credentials that may only read: every read would be refused again. Tried once.
            _REFUSED.note(store, txn.txn_id)
            log.warning(
                "multi-table commit %s is committed but its heads lag (%s shown at version %s); "
                "this reader may not write the registry (%s), so it reads the committed versions "
                "and leaves the heads: the next writer of its tables or `lake table repair %s` "
                "settles it",
                txn.commit_id,
                record.name,
                mine.to_version,
                exc.message,
                record.name,
            )
        except LakeError as exc:  # transient (unavailable, throttled): the next read tries again
            log.warning("could not complete multi-table commit %s on a read: %s", txn.commit_id, exc.message)
    updates: dict[str, object] = {"current_version": mine.to_version}
    if mine.schema_ipc_b64 is not None:
        updates["schema_ipc_b64"] = mine.schema_ipc_b64
    return record.model_copy(update=updates)


def clear_above(store: MetaStore, above: Sequence[tuple[Lease | None, Item | None, Item | None]]) -> bool:
    """Under each table's lease (a multi-table commit about to stage): each table's record
    (``Item``) and the version record just above its head, when there is one, which would refuse
    the commit's own. A transaction's is resolved (completed or cleared); any other (an
    interrupted publish's, ``branch_publish``: unreachable) is deleted, fenced by the lease.
    True when anything changed (the caller reads the heads again)."""
    changed = False
    for lease, table, item in above:
        if table is None or item is None or lease is None:
            continue
        head = decode(TableRecord, table.value, table.key).current_version
        if decode(VersionRecord, item.value, item.key).version <= head:
            continue
        outcome = resolve_version(store, item, table.key, leased=True)
        if outcome == "pending":
            raise ConcurrentModification(
                f"{item.key} belongs to a multi-table commit still being made; nothing was committed"
            )
        if outcome is None:
            try:
                with lease.fenced() as fence:
                    store.transact([Delete(item.key, item.revision), fence])
            except ConditionFailed:
                raise ConcurrentModification(f"{item.key} changed meanwhile; nothing was committed") from None
            log.warning("removed %s, left above the head by an interrupted publish", item.key)
        changed = True
    return changed


def roll_forward(store: MetaStore, record: TransactionRecord, limit: int) -> bool:
    """Move every table's head that is still at the version the commit left to its new one,
    with its log entries and commit marker, in registry writes of at most ``limit`` ops; True
    once no head is left behind."""
    todo = list(record.tables)
    for _ in range(ROUNDS):
        heads = get_all(store, [keys.table(TableName.parse(t.name)) for t in todo])
        moving = [(t, ops) for t, item in zip(todo, heads, strict=True) if (ops := head_ops(t, item))]
        # By count and by bytes: a wide table's head holds its schema (a few hundred KB).
        batches = pack([cost(store, ops) for _, ops in moving], limit, store.max_transact_bytes)
        raced: list[TransactionTable] = []
        for batch in batches:
            try:
                store.transact([op for i in batch for op in moving[i][1]])
            except ConditionFailed:
                raced += [moving[i][0] for i in batch]  # a head moved meanwhile: read it again
        if not raced:
            return True
        todo = raced
    log.warning("multi-table commit %s: heads still moving elsewhere", record.commit_id)
    return False


def head_ops(t: TransactionTable, head: Item | None) -> list[Op]:
    """What moves ``t``'s head to its new version: none when it moved already (or the table was
    dropped or replaced since, its incarnation gone with the versions)."""
    if head is None:
        return []
    table = decode(TableRecord, head.value, head.key)
    if table.incarnation != t.incarnation or table.current_version != t.from_version:
        return []
    updates: dict[str, object] = {"current_version": t.to_version}
    if t.schema_ipc_b64 is not None:
        updates["schema_ipc_b64"] = t.schema_ipc_b64
    return [
        Put(head.key, table.model_copy(update=updates).encode(), head.revision),
        *(Put(key, entry.encode()) for key, entry in t.logs.items()),
        Put(keys.commit_marker(t.marker.commit_id), t.marker.encode()),
    ]


def clear(store: MetaStore, record: TransactionRecord, limit: int) -> bool:
    """Delete every version ``record`` registered that still names it (each above its head:
    an aborted commit's heads never moved); True when none is left."""
    wanted = [keys.version(t.incarnation, v) for t in record.tables for v in t.versions]
    doomed: list[Op] = []
    for item in (i for i in get_all(store, wanted) if i is not None):
        if decode(VersionRecord, item.value, item.key).transaction_id == record.txn_id:
            doomed.append(Delete(item.key, item.revision))
    left = False
    for at in range(0, len(doomed), limit):
        try:
            store.transact(doomed[at : at + limit])
        except ConditionFailed:
            left = True  # changed meanwhile: the next resolver looks again
    return not left


def forget(store: MetaStore, txn_id: str, revision: int | None = None) -> None:
    """Delete the record of a transaction whose heads all moved, or whose versions are cleared;
    ``revision``: the record's as its writer left it (deleted without reading it first)."""
    if revision is not None:
        try:
            store.transact([Delete(keys.transaction(txn_id), revision)])
            return
        except ConditionFailed:
            pass  # deleted or written meanwhile: read it, as without
    item = store.get(keys.transaction(txn_id))
    if item is None:
        return
    try:
        store.transact([Delete(item.key, item.revision)])
    except ConditionFailed:
        pass  # another completer deleted it first


__all__ = [
    "Outcome",
    "clear",
    "clear_above",
    "committed_head",
    "forget",
    "head_ops",
    "read_transaction",
    "resolve",
    "resolve_above",
    "resolve_version",
    "roll_forward",
    "settle_above",
    "settle_version",
    "sweep",
]
