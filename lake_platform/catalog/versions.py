"""Versions of a table: compaction (plan, execute, commit; stale plans are skipped, never
forced), version cleanup under the retention policy, and purging an unregistered incarnation's
storage. Each is a commit under the table's lease, like any write. Tags are in ``tags``; what
a removal shares with a branch's (its log entry, the registry step, the pinned window) is in
``version_removal``.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from datetime import timedelta

from lake_platform.catalog import root_cleanup
from lake_platform.catalog.context import BATCH, CatalogContext, Log, check_commit_id, first_line
from lake_platform.catalog.engine_commits import EngineCommits
from lake_platform.catalog.lease import Lease
from lake_platform.catalog.pending import PendingCommit
from lake_platform.catalog.principals import Principal
from lake_platform.catalog.provenance import UNSTATED, Provenance
from lake_platform.catalog.reads import Reads, TableSnapshot
from lake_platform.catalog.results import MaintenanceResult, PlannedCompaction
from lake_platform.catalog.version_removal import (
    lance_cleanup,
    removal_entry,
    removed_before,
    unregister,
    young_versions,
)
from lake_platform.engine import lance_engine as engine
from lake_platform.errors import ConditionFailed, InvalidInput
from lake_platform.naming import TableName
from lake_platform.registry import keys
from lake_platform.registry.records import (
    BranchRecord,
    CommitMarker,
    TableRecord,
    VersionRecord,
    decode,
    new_id,
)
from lake_platform.registry.store import ABSENT, Delete

log = logging.getLogger(__name__)


class Versions:
    def __init__(self, ctx: CatalogContext, commits: EngineCommits, reads: Reads) -> None:
        self.ctx = ctx
        self.commits = commits
        self.reads = reads

    # == compaction and cleanup ==========================================================================

    def plan_compaction(
        self, name: str, *, target_rows_per_fragment: int = 1_048_576, by: Provenance = UNSTATED
    ) -> PlannedCompaction:
        who = self.ctx.who(by.principal)
        tname = TableName.parse(name)
        who.require(tname.project, "write", f"compact {tname}")
        snap = self.reads.open_table(str(tname), by=Provenance(principal=who))
        plan = engine.plan_compaction(snap.dataset, target_rows_per_fragment=target_rows_per_fragment)
        return PlannedCompaction(str(tname), snap.record.incarnation, plan.read_version, plan.tasks)

    def execute_compaction(self, planned: PlannedCompaction) -> list[str]:
        """Rewrite the planned fragments (no commit). Each task is independent and could run in
        another process from its JSON; here they run in order."""
        snap = self.reads.snapshot_of(planned)
        return [engine.execute_compaction_task(snap.dataset, task) for task in planned.tasks]

    def commit_compaction(
        self,
        planned: PlannedCompaction,
        results: Sequence[str],
        *,
        by: Provenance = UNSTATED,
    ) -> MaintenanceResult:
        who = self.ctx.who(by.principal)
        tname = TableName.parse(planned.table)
        who.require(tname.project, "write", f"compact {tname}")
        commit_id = check_commit_id(by.commit_id)
        if not results:
            return MaintenanceResult(str(tname), "compact", "nothing-to-do", planned.read_version)
        pending = PendingCommit(
            commit_id=commit_id,
            operation="compact",
            actor=self.ctx.actor(by.actor, who),
            run_id=by.run_id,
            detail={"planned_at_version": planned.read_version, "tasks": len(results)},
        )
        with self.ctx.gate.hold(planned.incarnation) as lease:
            # As every writer's: a multi-table commit found above the head is completed (or, still
            # pending, aborted) first; Lance then rebases the compaction on the head, or skips it.
            manifests = self.commits.manifests
            record, revision, current = manifests.leased_head_at(
                tname, planned.incarnation, planned.read_version
            )
            manifests.settle(tname, record, pending, current_item=current)
            replay = self._resume_compaction(tname, record, pending)
            if replay is not None:
                return replay
            gone = _missing_output(record, results, self.ctx.storage(record.location))
            if gone is not None:
                return self._skipped_stale(tname, record, pending, gone)
            ns = self.commits.bind(tname, record, revision, pending, lease)
            ds = engine.open_version(
                namespace=ns,
                table_id=tname.parts,
                version=planned.read_version,
                storage_options=self.ctx.storage(record.location),
            )
            try:
                self.ctx.at("compact:before-write")  # inside: an injected failure is an engine failure
                _, removed, added = engine.commit_compaction(ds, results)
            except engine.StaleCompaction as exc:
                self.commits.manifests.finalize(record, pending)
                return self._skipped_stale(tname, record, pending, exc)
            except Exception as exc:  # noqa: BLE001
                self.commits.resolve_failure(pending, ns, exc)
                removed = added = 0
            self.commits.manifests.finalize(record, pending)
            self.commits.enrich(
                tname, record, pending, {"fragments_removed": removed, "fragments_added": added}
            )
        return MaintenanceResult(
            str(tname),
            "compact",
            "committed",
            pending.landed[-1][0],
            commit_id,
            {
                "rebased": pending.landed[-1][0] > planned.read_version + 2,
                "planned_at_version": planned.read_version,
            },
        )

    def compact(
        self,
        name: str,
        *,
        target_rows_per_fragment: int = 1_048_576,
        by: Provenance = UNSTATED,
    ) -> MaintenanceResult:
        planned = self.plan_compaction(name, target_rows_per_fragment=target_rows_per_fragment, by=by)
        if not planned.tasks:
            return MaintenanceResult(planned.table, "compact", "nothing-to-do", planned.read_version)
        results = self.execute_compaction(planned)
        return self.commit_compaction(planned, results, by=by)

    def _resume_compaction(
        self, tname: TableName, record: TableRecord, pending: PendingCommit
    ) -> MaintenanceResult | None:
        """A retry of a compaction commit (same commit id), under the lease.

        Lance commits a compaction as two versions (ReserveFragments, then Rewrite), each a
        registry commit under the one commit id. If the rewrite landed, the retry is a replay.
        If only the reserve step landed (the writer died in between), the retry carries on
        under the same commit id: its marker is updated, not put again, so the commit id still
        names exactly one compaction."""
        item = self.ctx.store.get(keys.commit_marker(pending.commit_id))
        if item is None:
            return None
        marker = decode(CommitMarker, item.value, item.key)
        if (
            marker.operation != "compact"
            or marker.target != str(tname)
            or marker.incarnation != record.incarnation
        ):
            raise InvalidInput(
                f"commit id {pending.commit_id} already names {marker.operation} of {marker.target}"
            )
        landed = marker.to_version
        if landed is not None and engine.is_rewrite(
            self.reads.snapshot(tname, record, record.current_version).dataset, landed
        ):
            return MaintenanceResult(
                str(tname),
                "compact",
                "committed",
                landed,
                pending.commit_id,
                {"replayed": True, **pending.detail},
            )
        pending.marker_revision = item.revision
        return None

    def _skipped_stale(
        self, tname: TableName, record: TableRecord, pending: PendingCommit, exc: Exception
    ) -> MaintenanceResult:
        current, _ = self.ctx.table(tname, incarnation=record.incarnation)
        detail = {"status": "skipped-stale", "reason": first_line(exc), **pending.detail}
        # If Lance's reserve step landed (now or in an interrupted attempt), the commit id
        # already has its marker: log only.
        self.ctx.commit(
            [],
            log=Log(
                str(tname),
                "compact",
                pending.actor,
                commit_id=pending.commit_id,
                run_id=pending.run_id,
                incarnation=record.incarnation,
                from_version=current.current_version,
                detail=detail,
                marker=not pending.landed and pending.marker_revision == ABSENT,
            ),
        )
        return MaintenanceResult(
            str(tname), "compact", "skipped-stale", current.current_version, pending.commit_id, detail
        )

    def cleanup(
        self,
        name: str,
        *,
        retention: timedelta,
        retain_versions: int = 1,
        by: Provenance = UNSTATED,
    ) -> MaintenanceResult:
        """Remove old versions: out of the registry first, then Lance's files with the same cut,
        then their staging manifests. Never the current version, a tagged version, one of the
        newest ``retain_versions``, or one younger than the ticket lifetime."""
        who = self.ctx.who(by.principal)
        tname = TableName.parse(name)
        if retain_versions < 1:
            raise InvalidInput("retain_versions must be at least 1")
        who.require(tname.project, "write", f"clean up {tname}")
        if retention < timedelta(0):
            raise InvalidInput("retention must not be negative")
        record, _ = self.ctx.table(tname)
        commit_id = new_id()
        with self.ctx.gate.hold(record.incarnation) as lease:
            record, revision = self.ctx.table(tname, incarnation=record.incarnation)
            versions = [  # not a record above the head (an interrupted publish's, branch_publish)
                v
                for v in (
                    decode(VersionRecord, i.value, i.key)
                    for i in self.ctx.store.scan_prefix(keys.versions(record.incarnation))
                )
                if v.version <= record.current_version
            ]
            snap = self.reads.snapshot(tname, record, record.current_version)
            tagged, young = self._kept_by_governance(versions, snap, retention)
            ordered = sorted(versions, key=lambda v: v.version)
            newest = {v.version for v in ordered[-retain_versions:]}
            doomed = [
                v
                for v in ordered
                if v.version != record.current_version
                and v.version not in newest
                and v.version not in tagged
                and v.version not in young
            ]
            if not doomed:
                return MaintenanceResult(str(tname), "cleanup", "nothing-to-do", record.current_version)
            self.ctx.at("cleanup:chose-versions")
            detail: dict[str, object] = {
                "versions_removed": [v.version for v in doomed],
                "tagged_kept": sorted(tagged),
            }
            return self._remove(
                tname, record, snap, versions, doomed, lease, "cleanup", detail, by, who, commit_id
            )

    def delete_versions(
        self,
        name: str,
        wanted: Sequence[int],
        *,
        detail: dict[str, object] | None = None,
        by: Provenance = UNSTATED,
    ) -> MaintenanceResult:
        """Remove the registered versions among ``wanted`` that governance lets go (the Lance
        Namespace's BatchDeleteTableVersions): never the current version, a tagged one, or one
        a reader may still have pinned (superseded less than the ticket lifetime plus the
        readers' staleness ago); those are kept and named in the result's ``detail``. The same
        steps as ``cleanup``, logged ``delete-versions``. Admin: it destroys history.
        ``detail`` goes into the log entry (an idempotent request's key and digest); a
        ``by.commit_id`` that landed already answers that removal, nothing removed again."""
        who = self.ctx.who(by.principal)
        tname = TableName.parse(name)
        who.require(tname.project, "admin", f"delete versions of {tname}")
        if isinstance(wanted, (str, bytes)) or not isinstance(wanted, Iterable):
            raise InvalidInput(f"versions to delete must be a list of versions, not {type(wanted).__name__}")
        asked = set(wanted)
        if not all(keys.valid_version(v) for v in asked):
            raise InvalidInput(
                f"versions to delete must be positive integers below 2**63: {sorted(map(repr, asked))}"
            )
        record, _ = self.ctx.table(tname)
        commit_id = check_commit_id(by.commit_id)
        with self.ctx.gate.hold(record.incarnation) as lease:
            first = removed_before(self.ctx, tname, by)
            if first is not None:
                return first
            record, _revision = self.ctx.table(tname, incarnation=record.incarnation)
            versions = [  # not a record above the head (an interrupted publish's, branch_publish)
                v
                for v in (
                    decode(VersionRecord, i.value, i.key)
                    for i in self.ctx.store.scan_prefix(keys.versions(record.incarnation))
                )
                if v.version <= record.current_version
            ]
            snap = self.reads.snapshot(tname, record, record.current_version)
            tagged, young = self._kept_by_governance(versions, snap, timedelta(0))
            chosen = sorted((v for v in versions if v.version in asked), key=lambda v: v.version)
            kept = {
                "current": [v.version for v in chosen if v.version == record.current_version],
                "tagged": [v.version for v in chosen if v.version in tagged],
                "pinned": [
                    v.version
                    for v in chosen
                    if v.version != record.current_version and v.version not in tagged and v.version in young
                ],
            }
            held = {n for ns in kept.values() for n in ns}
            doomed = [v for v in chosen if v.version not in held]
            logged = {**(detail or {}), "versions_removed": [v.version for v in doomed], "kept": kept}
            if not doomed:
                return MaintenanceResult(
                    str(tname), "delete-versions", "nothing-to-do", record.current_version, None, logged
                )
            return self._remove(
                tname, record, snap, versions, doomed, lease, "delete-versions", logged, by, who, commit_id
            )

    def _kept_by_governance(
        self, versions: list[VersionRecord], snap: TableSnapshot, retention: timedelta
    ) -> tuple[set[int], set[int]]:
        """(tagged, young): the versions a tag names or a branch was made from, and those superseded less than
        ``retention`` (at least the ticket lifetime) plus the readers' staleness ago."""
        # Tags live in the version records; Lance's own list adds tags written before the
        # registry recorded them. Both were read under the lease every tag commit needs.
        tagged = {v.version for v in versions if v.tags}
        tagged |= set(engine.tagged_versions(snap.dataset).values())
        # A version a branch was made from is kept like a tagged one, while the branch (live or
        # in the trash) exists: Lance's cleanup reads it to see what the branch shares.
        for item in self.ctx.store.scan_prefix(keys.branches_of(snap.name)):
            line = decode(BranchRecord, item.value, item.key)
            if line.table_incarnation == snap.record.incarnation and line.parent_chain is None:
                tagged.add(line.parent_version)
        return tagged, young_versions(self.ctx, versions, retention)

    def _remove(
        self,
        tname: TableName,
        record: TableRecord,
        snap: TableSnapshot,
        versions: list[VersionRecord],
        doomed: list[VersionRecord],
        lease: Lease,
        operation: str,
        detail: dict[str, object],
        by: Provenance,
        who: Principal,
        commit_id: str | None = None,
    ) -> MaintenanceResult:
        """Under the lease: ``doomed`` out of the registry first, then Lance's files with the same
        cut, then their staging manifests; the log entry gets the bytes and files removed."""
        commit_id = commit_id or new_id()
        # A line that moved (a branch was published into main) has versions in several dataset
        # roots; Lance's cleanup works on the current one, root_cleanup on the others (what
        # the doomed versions referenced there, read before Lance's cleanup removes them).
        here = {v.version for v in versions if (v.location or record.folder_uri) == record.location}
        kept = [(v.version, v.manifest_path) for v in versions if v not in doomed and v.version in here]
        elsewhere = root_cleanup.candidates(self.ctx, record, doomed)
        # 1. Out of the registry, conditional on the lease and on the table not moving.
        entry = removal_entry(self.ctx, tname, operation, by, who, commit_id, record, detail)
        unregister(self.ctx, record.incarnation, doomed, lease, entry, "during cleanup")
        self.ctx.at(f"{operation}:after-registry")
        # 2. Lance's cleanup with the same cut, after making sure it can see every kept version.
        storage = self.ctx.storage(record.location)
        engine.repair_manifests(record.location, kept, storage)
        stats = lance_cleanup(
            self.ctx, record, snap.dataset, [v.version for v in doomed if v.version in here]
        )
        self.ctx.at(f"{operation}:after-engine")
        # 3. The staging manifests Lance does not know about.
        engine.remove_files(record.location, [v.manifest_path for v in doomed if v.version in here], storage)
        self.ctx.at(f"{operation}:after-manifests")
        # 4. Files of older roots that nothing registered references any more.
        stats.update(root_cleanup.reclaim(self.ctx, tname, record, elsewhere))
        stats["bytes_removed"] = stats.get("bytes_removed", 0) + stats["other_roots_bytes_removed"]
        detail.update(stats)
        marker = self.ctx.commit_landed(commit_id)
        log_key = marker.log_key if marker else None
        if log_key:
            self.ctx.patch_log(
                log_key,
                {
                    "bytes_removed": stats.get("bytes_removed", 0),
                    "files_removed": stats.get("data_files_removed", 0) + stats["other_roots_files_removed"],
                    "detail": detail,
                },
            )
        return MaintenanceResult(
            str(tname), operation, "committed", record.current_version, commit_id, detail
        )

    # == storage =================================================================================

    def purge_storage(self, record: TableRecord) -> None:
        """Destroy an unregistered incarnation's data (its whole folder, branches included) and
        registry leftovers, its branches' records too (idempotent)."""
        engine.remove_table(record.folder_uri, self.ctx.storage(record.folder_uri))
        leftovers = [i for i in self.ctx.store.scan_prefix(keys.versions(record.incarnation))]
        for item in self.ctx.store.scan_prefix(keys.branches_of(TableName.parse(record.name))):
            line = decode(BranchRecord, item.value, item.key)
            if line.table_incarnation == record.incarnation:
                leftovers += [*self.ctx.store.scan_prefix(keys.versions(line.incarnation)), item]
        lease = self.ctx.store.get(keys.lease(record.incarnation))
        if lease is not None:
            leftovers.append(lease)
        for start in range(0, len(leftovers), BATCH):
            try:
                self.ctx.commit([Delete(i.key, i.revision) for i in leftovers[start : start + BATCH]])
            except ConditionFailed:
                log.info(
                    "registry leftovers of %s changed during purge; left for the next sweep",
                    record.incarnation,
                )


def _missing_output(record: TableRecord, results: Sequence[str], storage: dict[str, str]) -> Exception | None:
    """Why the tasks' output cannot be committed, if a file of it is gone or changed. The tasks
    wrote it without the lease, perhaps long ago: an orphan reclaim (which holds the lease) may
    have taken it since, and Lance would register a version that no longer reads. Checked under
    the lease, so nothing takes it between this look and the commit."""
    # Imported here: engine.references loads Lance, which registry-only commands never need.
    from lake_platform.engine import references

    for rel, size in engine.compaction_outputs(results):
        seen = references.stat(record.location, rel, storage)
        if seen is None or (size and seen[0] != size):
            state = "is gone" if seen is None else f"changed size ({seen[0]} bytes, written {size})"
            return FileNotFoundError(
                f"task output {rel} {state} (an orphan reclaim takes files no version references "
                "once older than its age gate): nothing committed; plan again"
            )
    return None
