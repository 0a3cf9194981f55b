"""Recoverable drops: table drops file a trash record, undrop restores it, expiry purges it
The name is free at once; the data stays until the record expires.

Every transition of a trash record is conditional on its revision, so an undrop racing an
expiry either wins entirely (the table is back, intact) or loses entirely (expiry first claims
the record as "purging", then destroys the data, then deletes the record).
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from lake_platform.catalog import transaction_recovery as recovery
from lake_platform.catalog.context import CatalogContext, Log, check_commit_id
from lake_platform.catalog.folder_claims import refuse_overlap
from lake_platform.catalog.policies import Policies
from lake_platform.catalog.principals import Principal
from lake_platform.catalog.provenance import UNSTATED, Provenance
from lake_platform.catalog.results import CommitResult
from lake_platform.catalog.trash_restore import (
    cascade_record,
    release_abandoned,
    restore,
    restore_namespace,
)
from lake_platform.catalog.versions import Versions
from lake_platform.errors import (
    ConcurrentModification,
    ConditionFailed,
    InvalidInput,
    InvalidTableState,
    Protected,
    TableAlreadyExists,
    TableNotFound,
    TrashExpiryFailed,
)
from lake_platform.naming import NamespaceName, TableName
from lake_platform.registry import keys
from lake_platform.registry.records import TableRecord, TrashRecord, decode, new_id
from lake_platform.registry.store import ABSENT, Check, Delete, Item, Op, Put

log = logging.getLogger(__name__)


class Trash:
    def __init__(self, ctx: CatalogContext, policies: Policies, versions: Versions) -> None:
        self.ctx = ctx
        self.policies = policies
        self.versions = versions
        #: Other trash expired with the tables: deleted branches (set by ``Catalog``).
        self.also_expire: Callable[..., list[CommitResult]] | None = None

    def drop_table(
        self,
        name: str,
        *,
        purge: bool = False,
        force: bool = False,
        incarnation: str | None = None,
        detail: dict[str, object] | None = None,
        by: Provenance = UNSTATED,
    ) -> CommitResult:
        """Deregister a table (compare-and-delete on its incarnation, under its lease); ``detail``
        goes into the log entry and ``by.commit_id`` is its commit id (an idempotent request's).

        With a grace period (the effective policy's ``trash_grace``, default 7 days) the data
        stays and a trash record allows undrop; ``purge=True`` or a zero grace destroys the data
        right after the registration is gone, through a trash record that is due at once and
        already claimed for purging: the registry always names the folder until it is gone, so
        a drop killed after its commit leaves work for the next ``expire_trash``, never a leak.
        """
        who = self.ctx.who(by.principal)
        tname = TableName.parse(name)
        self.ctx.require_parent(tname, who=who)
        who.require(tname.project, "admin", f"drop table {tname}")
        # A table declared but never written is dropped like any other (into the trash, undoable).
        record, _ = self.ctx.table(tname, declared=True)
        if incarnation is not None and record.incarnation != incarnation:
            raise TableNotFound(f"table {tname} is not at incarnation {incarnation}")
        if record.protected and not force:
            raise Protected(f"table {tname} is protected; unprotect it or pass force")
        grace = self.policies.effective_policy(str(tname)).policy.trash_grace
        destroy = purge or grace.total_seconds() == 0
        if destroy:  # refused before the registration goes: nothing changes
            refuse_overlap(self.ctx.store, record, f"purge table {tname}")
        self.ctx.at("drop:resolved")
        actor_name = self.ctx.actor(by.actor, who)
        dropped_at = self.ctx.clock.wall_ms()
        expires = dropped_at if destroy else dropped_at + int(grace.total_seconds() * 1000)
        detached = self.detach_table(
            tname,
            record.incarnation,
            actor=actor_name,
            dropped_at=dropped_at,
            expires_at=expires,
            step="drop",
            purging=destroy,
            commit_id=check_commit_id(by.commit_id),
            logged=detail,
            unless_protected=not force,
        )
        assert detached is not None  # _detach_table raises unless asked to skip a vanished table
        current, commit_id = detached
        self.ctx.at("drop:after-commit")
        if destroy:
            self.expire_trash(
                now_ms=dropped_at,
                by=Provenance(principal=who, actor=actor_name),
                only=[keys.trash(str(tname), dropped_at, current.incarnation)],
            )
        return CommitResult(commit_id, str(tname), "drop", current.current_version, None)

    def detach_table(
        self,
        tname: TableName,
        incarnation: str,
        *,
        actor: str,
        dropped_at: int,
        expires_at: int | None,
        step: str,
        cascade_id: str | None = None,
        skip_vanished: bool = False,
        purging: bool = False,
        commit_id: str | None = None,
        logged: dict[str, object] | None = None,
        unless_protected: bool = False,
    ) -> tuple[TableRecord, str] | None:
        """Deregister exactly ``incarnation`` of ``tname`` (under its lease), with its policy
        record; file a trash record unless ``expires_at`` is None (the caller destroys the data).
        ``purging`` files it already claimed by expiry, so no undrop can take it back.
        ``commit_id`` (default: a new one) and ``logged`` (added to the detail): the log entry's.
        ``unless_protected``: Protected if the table is protected under the lease (a protect that
        landed after the caller's own check; set_protected takes no lease).

        Returns the registration as it was when removed, or None (with ``skip_vanished``) when
        that incarnation is no longer registered: a replacement is never touched.
        """
        with self.ctx.gate.hold(incarnation) as lease:
            # Re-read under the lease: only the holder of this incarnation's lease can remove it,
            # so if it is still there the revision we condition on cannot be reused (no ABA).
            try:
                current, revision = self.ctx.table(tname, incarnation=incarnation, declared=True)
                # A multi-table commit's version above the head is completed (or cleared) first:
                # the trash record keeps this head, and undrop would bring the table back without it.
                if recovery.settle_above(self.ctx.store, current, keys.table(tname), f"table {tname}"):
                    current, revision = self.ctx.table(tname, incarnation=incarnation, declared=True)
            except TableNotFound:
                if skip_vanished:
                    return None
                raise
            if unless_protected and current.protected:
                raise Protected(f"table {tname} is protected; unprotect it or pass force")
            self.ctx.at(f"{step}:before-commit")
            commit_id = commit_id or new_id()
            policy_ops, kept = self.policies.detach(str(tname))
            with lease.fenced() as fence:
                ops: list[Op] = [Delete(keys.table(tname), revision), fence, *policy_ops]
                detail: dict[str, object] = {**(logged or {}), "purge": expires_at is None or purging}
                if cascade_id is not None:
                    detail["cascade_id"] = cascade_id
                if expires_at is not None:
                    trash = TrashRecord(
                        kind="table",
                        target=str(tname),
                        dropped_at_ms=dropped_at,
                        expires_at_ms=expires_at,
                        dropped_by=actor,
                        table=current,
                        cascade_id=cascade_id,
                        policies=kept,
                        state="purging" if purging else "trashed",
                    )
                    ops.append(Put(keys.trash(str(tname), dropped_at, incarnation), trash.encode(), ABSENT))
                    detail["expires_at_ms"] = expires_at
                entry = Log(
                    str(tname),
                    "drop",
                    actor,
                    commit_id=commit_id,
                    incarnation=incarnation,
                    from_version=current.current_version,
                    detail=detail,
                )
                try:
                    self.ctx.commit(ops, log=entry)
                except ConditionFailed:
                    raise ConcurrentModification(
                        f"table {tname} changed while being dropped; nothing was dropped"
                    ) from None
        return current, commit_id

    def list_trash(self, prefix: str = "", *, by: Provenance = UNSTATED) -> list[TrashRecord]:
        who = self.ctx.who(by.principal)
        if prefix:
            for part in prefix.split("."):
                from lake_platform.naming import check_segment

                check_segment(part, "name prefix")
        # What was in the object (``t.``), then its own records (``t/``), in key order, one key
        # range: never a sibling's sharing its first letters (``t2`` for ``t``).
        scanned = (
            self.ctx.store.scan_range(*keys.nested_and_own(keys.trash_prefix(prefix)))
            if prefix
            else self.ctx.store.scan_prefix(keys.trash_prefix())
        )
        records = [decode(TrashRecord, i.value, i.key) for i in scanned]
        return [
            r
            for r in records
            if (not prefix or r.target == prefix or r.target.startswith(prefix + "."))
            and who.can(r.target.split(".")[0], "read")
        ]

    def undrop_table(
        self,
        name: str,
        *,
        as_name: str | None = None,
        incarnation: str | None = None,
        detail: dict[str, object] | None = None,
        by: Provenance = UNSTATED,
    ) -> CommitResult:
        """Re-register a dropped table from its trash record (the newest, unless ``incarnation``).
        ``detail`` goes into the log entry (an idempotent request's key and digest) and the
        commit is ``by.commit_id`` when given: one that landed is refused with the rest (the
        record gone, the name taken), and its marker is what a keyed caller looks up."""
        commit = (check_commit_id(by.commit_id), dict(detail or {}))
        who = self.ctx.who(by.principal)
        tname = TableName.parse(name)
        target = TableName.parse(as_name) if as_name is not None else tname
        if (target.project, target.warehouse) != (tname.project, tname.warehouse):
            raise InvalidInput("a table can only be undropped into the warehouse its data lives in")
        parent = self.ctx.require_parent(target, who=who)
        who.require(tname.project, "admin", f"undrop table {tname}")
        item, trash = self._pick_trash(tname, incarnation)
        if self.ctx.store.get(keys.table(target)) is not None:
            raise TableAlreadyExists(f"table {target} already exists; undrop it under another name with --as")
        self.ctx.at("undrop:checked")
        return restore(self.ctx, self.policies, item, trash, target, parent, who, commit)

    def _pick_trash(self, tname: TableName, incarnation: str | None) -> tuple[Item, TrashRecord]:
        candidates = [
            (i, decode(TrashRecord, i.value, i.key))
            for i in self.ctx.store.scan_prefix(keys.trash_prefix(str(tname) + "/"))
        ]
        candidates = [(i, r) for i, r in candidates if r.kind == "table" and r.state == "trashed" and r.table]
        if incarnation is not None:
            candidates = [(i, r) for i, r in candidates if r.table and r.table.incarnation == incarnation]
        if not candidates:
            which = f" at incarnation {incarnation}" if incarnation else ""
            raise TableNotFound(f"no dropped table {tname}{which} in the trash")
        return candidates[-1]  # keys sort by drop time: the newest is last

    def undrop_namespace(
        self, name: str, *, detail: dict[str, object] | None = None, by: Provenance = UNSTATED
    ) -> CommitResult:
        """Rebuild a cascade-dropped namespace subtree, shallowest first (``restore_namespace``:
        claimed first, so expiry leaves it alone; refused unchanged while expiry purges one of
        its tables). Resumable: run it again after an interruption and it finishes the job;
        pieces already restored are skipped.
        ``detail`` and ``by.commit_id``: as ``undrop_table``'s, for its last commit (the trash
        record's removal, logged ``undrop namespace cascade``)."""
        commit_id = check_commit_id(by.commit_id)
        who = self.ctx.who(by.principal)
        nname = NamespaceName.parse(name)
        self.ctx.require_parent(nname, who=who)
        who.require(nname.project, "admin", f"undrop namespace {nname}")
        return restore_namespace(self.ctx, self.policies, nname, who, commit_id, detail or {})

    def expire_trash(
        self,
        now_ms: int | None = None,
        *,
        only: list[str] | None = None,
        by: Provenance = UNSTATED,
    ) -> list[CommitResult]:
        """Purge the data of every trash record whose deadline has passed; one commit each.

        One record failing never stops the others: a record whose folder holds another table's
        files (``folder_claims``) is left in the trash unclaimed and untouched, one whose purge
        failed part way (storage, registry) stays claimed for the next expiry to finish; every
        other due record (deleted branches too) is expired, then TrashExpiryFailed names each."""
        who = self.ctx.who(by.principal)
        now = self.ctx.clock.wall_ms() if now_ms is None else now_ms
        purged: list[CommitResult] = []
        failures: list[tuple[str, str]] = []
        items = (
            [self.ctx.store.get(k) for k in only]
            if only is not None
            else list(self.ctx.store.scan_prefix(keys.trash_prefix()))
        )
        for item in items:
            if item is None:
                continue
            record = decode(TrashRecord, item.value, item.key)
            if record.expires_at_ms > now or not who.can(record.target.split(".")[0], "admin"):
                continue
            try:
                if record.kind == "namespace":
                    self._expire_namespace_record(item, record, who, by.actor)
                elif (result := self._purge_trash(item, record, who, by.actor, by.run_id)) is not None:
                    purged.append(result)
            except Exception as exc:  # noqa: BLE001 - one record's failure must not starve the rest
                failures.append(failed(record.target, exc))
        if only is None and self.also_expire is not None:
            purged += self.also_expire(now, by=by, failures=failures)  # deleted branches
        if failures:
            raise TrashExpiryFailed(
                f"trash expiry purged {len(purged)} and could not purge {len(failures)}: "
                + "; ".join(f"{target}: {why}" for target, why in failures)
                + ". Each stays in the trash and the next expiry tries it again",
                failures,
            )
        return purged

    def sweep_transactions(self, most: int = 16) -> int:
        """Resolve the first ``most`` multi-table commit records past their deadline
        (``transaction_recovery.sweep``): a writer killed before it registered anything leaves a
        pending one no reader or writer leads to. Run with trash expiry, the registry's other
        housekeeping; how many were resolved."""
        return recovery.sweep(self.ctx.store, self.ctx.store.max_transact_ops, most)

    def _purge_trash(
        self, item: Item, record: TrashRecord, who: Principal, actor: str | None, run_id: str | None
    ) -> CommitResult | None:
        assert record.table is not None
        self.ctx.at("expire:found")
        refuse_overlap(self.ctx.store, record.table, f"purge dropped table {record.target}")
        if record.state == "trashed":
            # A cascade's table is claimed only while its namespace's record is not claimed by
            # an undrop (which claims it, then refuses should it find a table claimed here).
            cascade = cascade_record(self.ctx, record)
            if cascade is not None and decode(TrashRecord, cascade.value, cascade.key).state == "restoring":
                cascade = release_abandoned(self.ctx, cascade)  # taken back from a dead undrop
                if cascade is None:
                    return None  # the undrop is running
            claim = Put(item.key, record.model_copy(update={"state": "purging"}).encode(), item.revision)
            try:  # claim it: from here on an undrop refuses and only expiry can finish it
                claimed = self.ctx.store.transact(
                    [claim, *([Check(cascade.key, cascade.revision)] if cascade is not None else [])]
                )[0]
            except ConditionFailed:
                return None  # undropped (or claimed) meanwhile: the other side won entirely
            assert claimed is not None
            item = claimed
        self.ctx.at("expire:claimed")
        self.versions.purge_storage(record.table)
        self.ctx.at("expire:purged")
        commit_id = new_id()
        try:
            self.ctx.commit(
                [Delete(item.key, item.revision)],
                log=Log(
                    record.target,
                    "purge",
                    self.ctx.actor(actor, who),
                    commit_id=commit_id,
                    run_id=run_id,
                    incarnation=record.table.incarnation,
                    from_version=record.table.current_version,
                    detail={"dropped_at_ms": record.dropped_at_ms, "expires_at_ms": record.expires_at_ms},
                ),
            )
        except ConditionFailed:
            return None  # another expiry finished it first
        return CommitResult(commit_id, record.target, "purge", record.table.current_version, None)

    def _expire_namespace_record(
        self, item: Item, record: TrashRecord, who: Principal, actor: str | None
    ) -> None:
        if record.state == "restoring":
            # An undrop claimed it: left to it while it runs; taken back if it died.
            released = release_abandoned(self.ctx, item)
            if released is None:
                return
            item = released
        if any(self.ctx.store.get(k) is not None for k in record.table_trash_keys):
            return  # its tables go first (they share its deadline)
        try:
            self.ctx.commit(
                [Delete(item.key, item.revision)],
                log=Log(
                    record.target,
                    "purge namespace",
                    self.ctx.actor(actor, who),
                    detail={"cascade_id": record.cascade_id},
                ),
            )
        except ConditionFailed:
            pass


def failed(target: str, exc: Exception) -> tuple[str, str]:
    """One expiry failure as TrashExpiryFailed lists it, logged with its traceback: a refusal
    by its message, anything else by its type and message."""
    log.error("trash expiry could not purge %s", target, exc_info=exc)
    why = exc.message if isinstance(exc, InvalidTableState) else f"{type(exc).__name__}: {exc}"
    return target, why


__all__ = ["Trash", "TableRecord", "failed"]
