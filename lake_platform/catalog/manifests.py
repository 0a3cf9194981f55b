"""Storage agrees with the registry: finalize the versions a write landed (canonical manifest
in place, registry repointed, staging object gone), settle a line (main, or a branch: its record is
the head) before writing on it (finish what a stopped writer left, quarantine and report manifests
written around the registry, ``bypasses``), and the ``finish_versions`` / ``repair_table`` (main and
every live branch) / ``catch_bypasses`` maintenance steps built from the same parts.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from typing import Any

from lake_platform.catalog.bypasses import bypassed_versions, report_bypass
from lake_platform.catalog.context import UNREAD, CatalogContext, Prefetched
from lake_platform.catalog.pending import PendingCommit
from lake_platform.catalog.provenance import UNSTATED, Provenance
from lake_platform.catalog.transaction_recovery import clear_above, settle_version
from lake_platform.engine import lance_engine as engine
from lake_platform.engine.manifests import manifest_mtime, names_not_older
from lake_platform.engine.staging import canonical_versions, staging_manifests
from lake_platform.errors import ConcurrentModification, InvalidTableState, PermissionDenied
from lake_platform.lru import BoundedLRU
from lake_platform.naming import TableName
from lake_platform.registry import keys
from lake_platform.registry.records import BranchRecord, TableRecord, VersionRecord, decode, new_id
from lake_platform.registry.store import Item

log = logging.getLogger(__name__)


class Manifests:
    def __init__(self, ctx: CatalogContext) -> None:
        self.ctx = ctx
        # Versions this catalog's registry credentials were refused repointing (they may only
        # read): every later read would be refused again, so it is tried once.
        self._refused: BoundedLRU[tuple[str, int], bool] = BoundedLRU(256)

    def finalize(self, record: TableRecord, pending: PendingCommit) -> None:
        """Tidy up after the versions this operation landed. The namespace published each
        canonical manifest before registering it, so only the staging objects remain to be
        removed; a version recorded at its staging path (the writer was stopped, or committed
        before manifests were published first) is finished here. Idempotent; a failure leaves
        the version valid and the next writer or ``repair_table`` finishes it."""
        storage = self.ctx.storage(record.location)
        self.ctx.at(f"{pending.operation}:before-finalize")
        for version, _ in pending.landed:
            if self._refused.peek((record.incarnation, version)):
                continue
            try:
                staged = pending.staged.get(version)
                known = pending.versions.get(version)
                if staged is not None and known is not None and known[0].manifest_path != staged:
                    engine.remove_files(record.location, [staged], storage)
                    continue
                if known is None:
                    item = self.ctx.store.get(keys.version(record.incarnation, version))
                    if item is None:
                        continue
                    known = (decode(VersionRecord, item.value, item.key), item.revision)
                self.finish_version(record, *known, step=pending.operation)
            except PermissionDenied as exc:  # expected of a reader's read-only credentials
                self._refused.put((record.incarnation, version), True)
                log.warning(
                    "%s version %s stays registered at its staging manifest: this reader may not "
                    "write the registry (%s); the next writer or `lake table repair %s` finishes it",
                    record.name,
                    version,
                    exc.message,
                    record.name,
                )
            except Exception:  # noqa: BLE001 - the commit stands either way
                log.warning(
                    "could not finalize manifest of %s version %s", record.name, version, exc_info=True
                )
        self.ctx.at(f"{pending.operation}:after-finalize")

    def finish_version(
        self,
        record: TableRecord,
        ver: VersionRecord,
        revision: int,
        *,
        leased: bool = False,
        step: str | None = None,
        present: bool | None = None,
    ) -> bool:
        """Canonical manifest in place, registry pointed at it, staging object removed; False if
        there was nothing to do (or a concurrent helper did it).

        Safe without the write lease: the registry already chose this staging manifest, so every
        helper copies the same bytes, and the record moves only by compare-and-swap. A different
        manifest squatting on the canonical path is moved to quarantine, under the lease only.

        A version registered at its canonical path (``staged_from`` set) whose writer stopped
        before putting the file there is published from its staging manifest, with no registry
        write. ``present``: whether its canonical file is known to exist (saves a stat)."""
        storage = self.ctx.storage(record.location)
        if ver.staged_from is not None and not engine.is_staging_manifest(ver.manifest_path):
            if present is None:
                present = engine.manifest_exists(record.location, ver.manifest_path, storage)
            if present:
                return False
            # Its writer (or another helper) may be publishing it right now: it links, then
            # removes the staging manifest. Losing that race is fine; only both copies gone is
            # not, and that is the caller's typed "missing" error.
            try:
                if not engine.manifest_exists(record.location, ver.staged_from, storage):
                    return False
                engine.finalize_manifest(record.location, ver.version, ver.staged_from, storage)
            except (engine.ManifestConflict, OSError):
                if engine.manifest_exists(record.location, ver.manifest_path, storage):
                    return False  # published meanwhile
                raise
            if step is not None:
                self.ctx.at(f"{step}:finalize-copied")
            engine.remove_files(record.location, [ver.staged_from], storage)
            return True
        if not engine.is_staging_manifest(ver.manifest_path):
            return False
        try:
            final = engine.finalize_manifest(record.location, ver.version, ver.manifest_path, storage)
        except engine.ManifestConflict:
            if not leased:
                raise InvalidTableState(
                    f"version {ver.version} of {record.name} cannot be finalized: a manifest written "
                    "around the "
                    "registry sits at its canonical path; `repair_table` moves it aside"
                ) from None
            squatters = engine.canonical_manifests(record.location, storage).get(ver.version, [])
            log.warning(
                "%s: manifests squatting on version %s moved to quarantine: %s",
                record.name,
                ver.version,
                squatters,
            )
            engine.quarantine_files(record.location, squatters, f"unregistered-{new_id()}", storage)
            final = engine.finalize_manifest(record.location, ver.version, ver.manifest_path, storage)
        if step is not None:
            self.ctx.at(f"{step}:finalize-copied")
        try:
            self.ctx.store.compare_and_swap(
                keys.version(record.incarnation, ver.version),
                revision,
                ver.model_copy(update={"manifest_path": final}).encode(),
            )
        except ConcurrentModification:
            return False  # finished (or cleaned up) by someone else meanwhile
        if step is not None:
            self.ctx.at(f"{step}:finalize-swapped")
        engine.remove_files(record.location, [ver.manifest_path], storage)
        return True

    def finish_versions(self, name: str, *, by: Provenance = UNSTATED) -> list[int]:
        """A maintenance step: finish every registered version, main's and every branch's not
        being purged (a trashed one's too: undrop reads it), whose writer stopped between its
        registry commit and publishing its manifest (or that older code left at its staging
        path). Readers never do this (an open never writes); the next writer of a line does it
        for its newest versions. The orphan scan runs it first: files only a staging manifest
        names would look unreferenced. Idempotent; returns main's versions it finished."""
        who = self.ctx.who(by.principal)
        tname = TableName.parse(name)
        who.require(tname.project, "write", f"repair {tname}")
        record, _ = self.ctx.table(tname)
        finished = self._finish_all(record, leased=False)
        for _, branch in self._branches(tname, record.incarnation):
            if branch.state != "purging":
                self._finish_all(branch, leased=False)
        return finished

    def _branches(self, tname: TableName, incarnation: str) -> Iterator[tuple[Item, BranchRecord]]:
        """Every branch record of this incarnation of the table, any state."""
        for item in self.ctx.store.scan_prefix(keys.branches_of(tname)):
            branch = decode(BranchRecord, item.value, item.key)
            if branch.table_incarnation == incarnation:
                yield item, branch

    def _finish_all(self, record: TableRecord, *, leased: bool) -> list[int]:
        finished = []
        on_disk: dict[int, list[str]] | None = None  # one listing, not a stat per version
        for item in self.ctx.store.scan_prefix(keys.versions(record.incarnation)):
            ver = decode(VersionRecord, item.value, item.key)
            if ver.version > record.current_version:
                break  # above the head: not committed, or a multi-table commit's to complete first
            present = None
            if ver.staged_from is not None:
                if on_disk is None:
                    on_disk = engine.canonical_manifests(record.location, self.ctx.storage(record.location))
                present = ver.version in on_disk
            if self.finish_version(record, ver, item.revision, leased=leased, present=present):
                finished.append(ver.version)
        return finished

    def leased_head(self, tname: TableName, planned: TableRecord) -> tuple[TableRecord, int, Prefetched]:
        """Under the write lease, before ``settle``: the table's record and revision read again,
        and its current version's record (``settle``'s ``current_item``; UNREAD when the head
        moved since ``planned``), with the version key just above the head in the same registry
        request. A multi-table commit's version there (its writer stopped after the commit
        point) is completed first (``transaction_recovery``: every head of it moves; one still
        pending lost its writer this lease, so it is aborted and cleared): the write then goes
        on from the head it finds, as from any commit that landed before the lease, and its own
        checks of a moved head apply."""
        return self.leased_head_at(tname, planned.incarnation, planned.current_version)

    def leased_head_at(
        self, tname: TableName, inc: str, at: int, *, declared: bool = False
    ) -> tuple[TableRecord, int, Prefetched]:
        """``leased_head`` for a writer that holds no table record, only the incarnation and the
        version it planned on (a compaction's plan): ``at`` is its guess at the head.
        ``declared``: a table with no committed version yet is read too."""
        store, key = self.ctx.store, keys.table(tname)
        table, current, above = store.get_many([key, keys.version(inc, at), keys.version(inc, at + 1)])
        record, revision = self.ctx.table(tname, incarnation=inc, declared=declared, item=table)
        if record.current_version != at:  # moved since planned: one more read, of the key above it
            current, above = UNREAD, store.get(keys.version(inc, record.current_version + 1))
        if above is not None and settle_version(store, above, key, f"table {tname}"):
            record, revision = self.ctx.table(tname, incarnation=inc, declared=declared)
            current = UNREAD
        return record, revision, current

    def settle(
        self,
        tname: TableName,
        record: TableRecord,
        pending: PendingCommit | None = None,
        *,
        current_item: Prefetched = UNREAD,
    ) -> list[str]:
        """Under the write lease, before a write: make storage agree with the registry.

        1. Finish the newest versions if a writer was stopped between its registry commit and
           finalization (walking back while the record still names a staging manifest).
        2. Move canonical manifests above the registered version to quarantine: Lance builds
           every commit on the newest manifest it finds on storage, registered or not.
        3. Remove staging manifests a killed commit left (``remove_dead_staging``).
        4. Refuse, with a typed error, to build on a registered version whose manifest is gone.

        Costs one registry read and one listing of ``_versions/`` per write (a stray manifest
        far above the registered version, with a gap below it, must be seen too); ``current_item``,
        the current version's record read along with the table's, saves the read. Returns the
        quarantined manifests (also noted in the pending commit's log entry)."""
        storage = self.ctx.storage(record.location)
        # Looked at first: whether the current version's canonical manifest is there also says
        # whether a writer stopped before publishing it (a version registered at its
        # canonical path), without another stat.
        names = names_not_older(record.location, record.current_version, storage)
        rogue, has_current = engine.manifests_above(
            record.location, record.current_version, storage, names=names
        )
        version = record.current_version
        current: VersionRecord | None = None
        while version > 0:
            if version == record.current_version and current_item is not UNREAD:
                item = current_item
            else:
                item = self.ctx.store.get(keys.version(record.incarnation, version))
            if item is None:
                break
            ver = decode(VersionRecord, item.value, item.key)
            if version == record.current_version:
                current = ver
            present = has_current if version == record.current_version else None
            if not self.finish_version(record, ver, item.revision, leased=True, present=present):
                if pending is not None and version == record.current_version:
                    pending.base = ver  # already final: what the namespace will answer Lance
                break
            if version == record.current_version:
                has_current = True
            version -= 1
        if rogue:
            moved = engine.quarantine_files(record.location, rogue, f"unregistered-{new_id()}", storage)
            if pending is not None:
                pending.detail["quarantined_manifests"] = rogue
            actor = pending.actor if pending is not None else self.ctx.actor(None)
            branch = record.branch if isinstance(record, BranchRecord) else None
            report_bypass(
                self.ctx.store, tname, record.incarnation, record.current_version, moved, actor, branch
            )
        self.remove_dead_staging(record, staging_manifests(record.location, names), canonical_versions(names))
        if record.current_version > 0 and not has_current:
            # Published after the listing (by its writer, which commits and releases the lease
            # in one transaction and links right after)? Only this rare path pays the stat.
            if (
                current is None
                or current.staged_from is None
                or not engine.manifest_exists(record.location, current.manifest_path, storage)
            ):
                raise self.missing_manifest(tname, record.current_version)
        return rogue

    def remove_dead_staging(
        self, record: TableRecord, staging: list[tuple[int, str]], published: set[int]
    ) -> list[str]:
        """Under the write lease: remove the staging manifests (version, path) known never to be
        registered, and return them. ``published``: versions whose canonical manifest is there.

        - At or below the registered version, a staging manifest is dead unless the version's
          record names it: the registry refuses every commit not built on the registered
          version, so nothing can register it any more. One the record names as ``staged_from``
          is a copy once the canonical manifest is published (until then it is the only copy,
          which ``finish_version`` publishes).
        - Above it, no commit has registered it yet. Under the lease no catalog writer is
          mid-commit (a writer stages only while holding it), but a Lance client stages before
          it asks for the lease (``CreateTableVersion``): such a manifest is dead only once it
          is older than a lease's lifetime and safety margin, which a live commit never takes to
          arrive.
        """
        storage = self.ctx.storage(record.location)
        dead = []
        for version, path in staging:
            name = path.rpartition("/")[2]
            if version > record.current_version:
                written = manifest_mtime(record.location, path, storage)
                if written is not None and time.time() - written > self._commit_window():
                    # Unless a multi-table commit registered it above the head (its record resolves it).
                    item = self.ctx.store.get(keys.version(record.incarnation, version))
                    above = decode(VersionRecord, item.value, item.key) if item is not None else None
                    if above is None or name not in {
                        p.rpartition("/")[2] for p in (above.manifest_path, above.staged_from or "")
                    }:
                        dead.append(path)
                continue
            item = self.ctx.store.get(keys.version(record.incarnation, version))
            if item is not None:
                ver = decode(VersionRecord, item.value, item.key)
                if ver.manifest_path.rpartition("/")[2] == name:
                    continue  # registered at its staging path: finish_version publishes it
                if (ver.staged_from or "").rpartition("/")[2] == name and version not in published:
                    continue  # the only copy of a registered version: finish_version publishes it
            dead.append(path)
        if dead:
            log.info("%s: staging manifests of commits that never registered removed: %s", record.name, dead)
            engine.remove_files(record.location, dead, storage)
        return dead

    def _commit_window(self) -> float:
        """How long a staged commit may still register (as the ``no_versions_beyond_registry``
        check counts it): a lease's lifetime and its safety margin."""
        settings = self.ctx.settings
        return settings.lease_ttl_seconds + settings.lease_safety_margin_seconds

    def unreadable(
        self, tname: TableName, record: TableRecord, version: int, ver: VersionRecord | None
    ) -> InvalidTableState:
        """Why registered ``version`` (its record ``ver``) has no manifest for a reader: its
        writer stopped between the registry commit and putting the manifest at its canonical
        path (the staging copy is still there: the next write or ``repair`` finishes it), or it
        was deleted outside the catalog. One stat; only on a read's error path."""
        if (
            ver is not None
            and ver.staged_from is not None
            and engine.manifest_exists(record.location, ver.staged_from, self.ctx.storage(record.location))
        ):
            return InvalidTableState(
                f"version {version} of {tname} is committed but not finalized (its writer stopped "
                "before publishing the manifest); the next write or `repair` finishes it"
            )
        return self.missing_manifest(tname, version)

    def missing_manifest(self, tname: TableName, version: int) -> InvalidTableState:
        return InvalidTableState(
            f"version {version} of {tname} is registered but its manifest is missing from "
            "storage (deleted outside the catalog); nothing was changed"
        )

    def catch_bypasses(self, name: str, *, by: Provenance = UNSTATED) -> list[int]:
        """The bypass sensor's step: the versions committed around the registry (canonical
        manifests above the registered version), moved to quarantine and reported
        (``bypasses``) under the table's lease; [] when there are none. Costs one registry read
        and one listing of ``_versions/``' newest names; the lease only when something is
        found (a manifest published meanwhile by a commit that landed is told apart under it,
        and so is a committed multi-table commit's above a head that lags it: completed first,
        ``leased_head``)."""
        who = self.ctx.who(by.principal)
        tname = TableName.parse(name)
        who.require(tname.project, "write", f"repair {tname}")
        record, _ = self.ctx.table(tname, declared=True)
        storage = self.ctx.storage(record.location)
        rogue, _ = engine.manifests_above(record.location, record.current_version, storage)
        if not rogue:
            return []
        with self.ctx.gate.hold(record.incarnation):
            record, _, current = self.leased_head_at(
                tname, record.incarnation, record.current_version, declared=True
            )
            try:
                return bypassed_versions(self.settle(tname, record, current_item=current))
            except InvalidTableState:
                return []  # a missing registered manifest: reads and checks report that

    def repair_table(self, name: str, *, by: Provenance = UNSTATED) -> dict[str, Any]:
        """A maintenance step on the whole table, main and every live branch: complete or clear
        a multi-table commit whose version sits above main's head (``transaction_recovery``);
        then, on each line under its own lease, finish every version whose writer stopped
        before finalizing it, quarantine manifests written around the registry, and remove the
        staging manifests of commits that never registered (``remove_dead_staging``). Returns
        main's ``finalized`` and ``quarantined``, and each branch's under ``branches``.
        Idempotent; changes no data."""
        who = self.ctx.who(by.principal)
        tname = TableName.parse(name)
        who.require(tname.project, "write", f"repair {tname}")
        record, _ = self.ctx.table(tname)
        with self.ctx.gate.hold(record.incarnation) as lease:
            table, above = self.ctx.store.get_many(
                [keys.table(tname), keys.version(record.incarnation, record.current_version + 1)]
            )
            if clear_above(self.ctx.store, [(lease, table, above)]):  # a multi-table commit's
                table = self.ctx.store.get(keys.table(tname))
            record, _ = self.ctx.table(tname, incarnation=record.incarnation, item=table)
            repaired: dict[str, Any] = self._repair_line(tname, record)
        repaired["branches"] = {}
        for item, branch in self._branches(tname, record.incarnation):
            if branch.state != "active":
                continue
            with self.ctx.gate.hold(branch.incarnation):
                # Read again under its lease: one deleted or made again meanwhile is not ours.
                again = self.ctx.store.get(item.key)
                fresh = decode(BranchRecord, again.value, again.key) if again is not None else None
                if fresh is not None and fresh.incarnation == branch.incarnation and fresh.state == "active":
                    repaired["branches"][branch.branch] = self._repair_line(tname, fresh)
        return repaired

    def _repair_line(self, tname: TableName, record: TableRecord) -> dict[str, list[Any]]:
        """Under the line's lease (main's, or a branch's: its record is the head)."""
        finalized = self._finish_all(record, leased=True)
        try:
            quarantined = self.settle(tname, record)
        except InvalidTableState:
            quarantined = []  # a missing manifest is reported by reads and checks; nothing to repair
        # The whole history, not only the newest versions a writer's settle looks at.
        names = names_not_older(record.location, 0, self.ctx.storage(record.location))
        self.remove_dead_staging(record, staging_manifests(record.location, names), canonical_versions(names))
        return {"finalized": finalized, "quarantined": quarantined}
