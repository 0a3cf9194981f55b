"""Why a version commit through the bound namespace did not land, as the typed error its writer
gets (``BoundTableNamespace.create_table_version``).

A failed registry condition is explained by its key (the lease: taken over; the table record:
dropped, replaced or changed; a marker the commit carries: landed concurrently); an unknown
outcome is resolved by looking for the commit's own version record (invariant 5); a commit
built on the version a committed multi-table commit made visible above a lagging head completes
that commit and lands on it; one built on anything else but the registered version (manifests
written around the registry) is refused, and under an acquired lease those manifests are moved
to quarantine so the next write lands where it should.

Under an unacquired lease (``WriteGate.hold_for_commit``, ``hold_unacquired``) whatever needs
storage changed, or a typed refusal, is LeaseRaced instead: nothing landed, and the caller
writes again under an acquired lease, whose settle sees the same and acts on it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import NoReturn

from lake_platform.catalog.bypasses import report_bypass
from lake_platform.catalog.lease import Lease, LeaseRaced
from lake_platform.catalog.pending import PendingCommit
from lake_platform.catalog.transaction_recovery import resolve_version
from lake_platform.engine import lance_engine as engine
from lake_platform.errors import (
    ConcurrentModification,
    ConditionFailed,
    Internal,
    InvalidTableState,
    LakeError,
    LeaseExpired,
    NamespaceNotFound,
    ServiceUnavailable,
    TableAlreadyExists,
    TableNotFound,
)
from lake_platform.naming import TableName
from lake_platform.registry import keys
from lake_platform.registry.records import TableRecord, VersionRecord, decode, new_id
from lake_platform.registry.store import ABSENT, Delete, Item, MetaStore, Op, Put

log = logging.getLogger(__name__)


class CommitConflicts:
    """The refusals of one bound namespace's commits, and the first LeaseRaced among them."""

    def __init__(
        self,
        store: MetaStore,
        name: TableName,
        incarnation: str,
        location: str,
        storage_options: dict[str, str] | None,
        *,
        pending: PendingCommit | None,
        lease: Lease | None,
        tidy_refused: bool,
        head_key: str | None = None,
    ) -> None:
        self.store = store
        #: The record whose current version a commit moves: the table's, or a branch's.
        self.head_key = head_key or keys.table(name)
        self.name = name
        self.incarnation = incarnation
        self.location = location
        self.pending = pending
        self.lease = lease
        self.storage_options = storage_options
        # The staging manifests Lance wrote for this namespace alone (the catalog's own write,
        # which writes again if refused; a REST client's commit retries the same manifest).
        self._tidy_refused = tidy_refused
        #: Under an unacquired lease: what refused the write for want of an acquired one.
        self.raced: LeaseRaced | None = None

    @property
    def branch(self) -> str | None:
        """The branch whose line the commits move (the head a branch's record), None on main."""
        prefix = keys.branches_of(self.name)
        return self.head_key.removeprefix(prefix) if self.head_key.startswith(prefix) else None

    @property
    def unacquired(self) -> bool:
        """Writing under an unacquired lease (``WriteGate.hold_for_commit``, ``hold_unacquired``)."""
        return self.lease is not None and self.lease.optimistic

    def refuse_unacquired(self, why: str) -> None:
        """LeaseRaced under an unacquired lease: what ``why`` says needs storage changed or a
        typed refusal, both the work of a writer holding the lease; nothing landed, so the
        caller retries under an acquired one (whose settle sees the same and acts on it)."""
        if self.unacquired:
            raise self._raced_by(LeaseRaced(f"{why}; nothing was committed"))

    def _raced_by(self, exc: LeaseRaced) -> LeaseRaced:
        """Note the first LeaseRaced: it is the write's outcome, whatever Lance's retries meet
        after it, and nothing more is committed under the lease."""
        if self.lease is not None:
            self.lease.mark_lost()
        if self.raced is None:
            self.raced = exc
        return exc

    def _lease_is_current(self) -> bool:
        if self.lease is None or self.lease.optimistic:
            # An unacquired lease guards one commit, not storage: never quarantine under it
            # (another writer may acquire, commit and publish at any moment).
            return False
        item = self.store.get(self.lease.key)
        return item is not None and item.revision == self.lease.revision

    def remove_refused(self, staging: str) -> None:
        """The staging manifest of a commit refused under an unacquired lease: certainly not
        registered (the refusal came before the transaction, or as its definite condition
        failure), and named for this write alone, so removed like any finalized one. Its data
        files are left to the orphan scan, as for any refused write."""
        if not self._tidy_refused or not engine.is_staging_manifest(staging):
            return
        try:
            engine.remove_files(self.location, [staging], self.storage_options)
        except Exception:  # noqa: BLE001 - only tidying: the orphan scan finds it otherwise
            log.warning("could not remove the refused staging manifest %s", staging, exc_info=True)

    def require_next(self, version: int, current: int, refreshed: Callable[[], int]) -> None:
        """Accept version N only on top of the registered N-1 (Lance builds on whatever it
        found newest on storage, registered or not), or on the version a committed multi-table
        commit put just above it (``_resolved_above``). ``current``: the registered version as
        last read; ``refreshed`` reads it again."""
        if version == current + 1:
            return
        current = refreshed()  # Lance may be retrying after a conflict: compare with the latest
        if version == current + 1:
            return
        if version <= current:
            raise ConcurrentModification(f"version {version} of {self.name} is already committed")
        if self._resolved_above(current):
            current = refreshed()
            if version == current + 1:
                return
        self._refuse_built_around(version, current)

    def _resolved_above(self, current: int) -> bool:
        """Whether the version just above the head ``current`` named a multi-table commit, now
        resolved (``transaction_recovery``). A committed one's version is visible already
        (readers view it through its record; the head is a cache), so a Lance client may have
        read it and built on it: its heads are moved here (that needs no lease), and the commit
        lands on top of it. A pending one is aborted only under an acquired lease (its writer
        lost it). Read only on this refusal path."""
        item = self.store.get(keys.version(self.incarnation, current + 1))
        if item is None:
            return False
        leased = self.lease is not None and not self.unacquired
        return resolve_version(self.store, item, self.head_key, leased=leased) not in (None, "pending")

    def _refuse_built_around(self, version: int, current: int) -> NoReturn:
        """Refuse ``version``, above ``current`` + 1: Lance built it on manifests it found on
        storage above the registered version."""
        on_disk = engine.canonical_manifests(self.location, self.storage_options)
        rogue = sorted(p for v, paths in on_disk.items() if v > current for p in paths)
        if rogue:
            self.refuse_unacquired(
                f"manifests written around the registry sit above version {current} of {self.name}"
            )
        moved: list[str] = []
        if rogue and self._lease_is_current():  # a writer that lost its lease moves nothing
            moved = engine.quarantine_files(self.location, rogue, f"refused-{new_id()}", self.storage_options)
            actor = self.pending.actor if self.pending is not None else "lake"
            report_bypass(self.store, self.name, self.incarnation, current, moved, actor, self.branch)
        raise InvalidTableState(
            f"commit of version {version} of {self.name} refused: it was not built on the registered version "
            f"{current} but on manifests written around the registry "
            f"({', '.join(rogue) or 'since removed'}); "
            f"nothing was committed{'; they were moved to ' + engine.QUARANTINE_DIR + '/' if moved else ''}. "
            "Retry the write."
        )

    def resolve_unknown(self, version: int, commit_id: str) -> list[Item | None]:
        """After an unknown outcome: the transaction's results if this commit's version record
        landed, else ServiceUnavailable."""
        item = self.store.get(keys.version(self.incarnation, version))
        if item is None or decode(VersionRecord, item.value).commit_id != commit_id:
            raise ServiceUnavailable(
                f"registry unavailable while committing version {version} of {self.name}"
            )
        table = self.store.get(self.head_key)
        marker = self.store.get(keys.commit_marker(commit_id))
        if table is None or marker is None:
            raise Internal(f"commit {commit_id} landed partially")  # transact is atomic: cannot happen
        return [item, table, None, marker, None]

    def explain(self, exc: ConditionFailed, version: int, record_revision: int) -> LakeError:
        """The typed error for the commit of ``version`` whose transaction failed ``exc``;
        ``record_revision``: the table record's revision the commit was conditional on."""
        lease_key = self.lease.key if self.lease else None
        if exc.key == lease_key:
            if self.lease is not None:
                self.lease.mark_lost()
            if self.unacquired:
                return self._raced_by(
                    LeaseRaced(
                        f"another writer took the lease on {self.name} meanwhile; version {version} "
                        "was not committed, retry"
                    )
                )
            return LeaseExpired(
                f"write lease on {self.name} was taken over; commit of version {version} refused"
            )
        if exc.key == self.head_key and record_revision == ABSENT:
            return TableAlreadyExists(f"table {self.name} already exists")
        if self.pending is not None and exc.key in {
            op.key for op in self.pending.extra_ops if isinstance(op, Put)
        }:
            return ConcurrentModification(
                f"part of this commit to {self.name} (a marker it carries) landed "
                f"concurrently; version {version} was not committed"
            )
        if self.pending is not None and exc.key in {op.key for op in self.pending.extra_ops}:
            return NamespaceNotFound(f"namespace {self.name.namespace_name} was dropped during the create")
        if exc.key == self.head_key or exc.key is None:
            # Find out whether our incarnation is still the registered one.
            item = self.store.get(self.head_key)
            if item is None or decode(TableRecord, item.value).incarnation != self.incarnation:
                return TableNotFound(f"table {self.name} was dropped or replaced while being written")
            if self.unacquired and exc.key is not None:
                # The record was read before the lease, not under it: nothing landed, and the
                # write made again under an acquired lease reads what changed.
                return self._raced_by(
                    LeaseRaced(
                        f"the record of {self.name} changed since it was read; version {version} "
                        "was not committed, retry"
                    )
                )
        return ConcurrentModification(f"version {version} of {self.name} was committed concurrently")

    def transact(self, ops: list[Op], version: int) -> list[Item | None]:
        """The commit's one registry transaction. Should version ``version``'s key be taken by a
        record an interrupted publish left above the head (``branch_publish``), which no reader
        reaches, the writer holding the lease removes it and commits once more (under a free
        lease: LeaseRaced, made again under an acquired one). A multi-table commit's version
        there is resolved through its transaction record: cleared (not committed) and the commit
        made once more, or the head moved to it (committed) and this commit, built on the old
        head, refused (a client's staged manifest; the catalog's writers complete such a commit
        under the lease before Lance plans on the head, ``Manifests.leased_head``)."""
        try:
            return self.store.transact(ops)
        except ConditionFailed as exc:
            item = self._above_head(version) if exc.key == keys.version(self.incarnation, version) else None
            if item is None or self.lease is None:
                raise
        if self.unacquired:
            raise self._raced_by(
                LeaseRaced(f"version {version} of {self.name} must be cleared under the lease")
            )
        # A multi-table commit's version (``transaction_chunks``): completed or cleared first.
        outcome = resolve_version(self.store, item, self.head_key, leased=True)
        if outcome == "aborted":
            return self.store.transact(ops)
        if outcome is not None:
            raise ConcurrentModification(
                f"version {version} of {self.name} belongs to a multi-table commit ({outcome}); retry"
            )
        try:
            with self.lease.fenced() as fence:
                self.store.transact([Delete(item.key, item.revision), fence])
        except ConditionFailed:
            raise ConcurrentModification(
                f"version {version} of {self.name} was committed concurrently"
            ) from None
        log.warning(
            "removed version %s of %s, left above the head by an interrupted publish", version, self.name
        )
        return self.store.transact(ops)

    def _above_head(self, version: int) -> Item | None:
        """Version ``version``'s record when it sits above the head (None otherwise)."""
        head = self.store.get(self.head_key)
        item = self.store.get(keys.version(self.incarnation, version))
        if head is None or item is None or decode(TableRecord, head.value).current_version >= version:
            return None  # gone, or committed for real
        return item
