"""A branch's history: restoring a branch to an earlier version of its line, and deleting a
branch's versions (REST RestoreTable and BatchDeleteTableVersions with ``branch``).

Both are main's operations (``restore``, ``Versions.delete_versions``) on the branch's own line,
under the branch's lease (its chain id): main's head and main's versions never move, whatever
the versions asked for. A restore is one new version of the branch, a compare-and-swap of the
branch's head through a namespace bound to the branch record, whose content and schema are an
earlier version's (one of the branch's: from the version it was made at to its head), logged
``restore`` with ``detail.branch``. A deletion keeps what main's keeps, on the branch's line:
the branch's head, a version tagged on the branch, a version another branch was made from (its
reads go through that version's manifest, as a branch made from main keeps main's), and a
version a reader may still have pinned; then the registry first, Lance's cleanup of the branch's
dataset with the same cut, the staging manifests last, logged ``delete-versions``. Lance's
cleanup of a branch's dataset removes files under the branch's own root only: the parent's files
a removed version read stay where they are.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta
from typing import TYPE_CHECKING

from lake_platform.catalog.branches import Branches
from lake_platform.catalog.context import CatalogContext, check_commit_id
from lake_platform.catalog.engine_commits import EngineCommits
from lake_platform.catalog.lease import Lease
from lake_platform.catalog.principals import Principal
from lake_platform.catalog.provenance import UNSTATED, Provenance
from lake_platform.catalog.restore import restore_line, restore_pending, restore_request
from lake_platform.catalog.results import CommitResult, MaintenanceResult
from lake_platform.catalog.version_removal import removal_entry, removed_before, unregister, young_versions
from lake_platform.engine import lance_engine as engine
from lake_platform.errors import TableVersionNotFound
from lake_platform.naming import TableName
from lake_platform.registry import keys
from lake_platform.registry.records import BranchRecord, VersionRecord, decode

if TYPE_CHECKING:
    from lake_platform.catalog.namespace import BoundTableNamespace


class BranchHistory:
    def __init__(self, ctx: CatalogContext, branches: Branches, commits: EngineCommits) -> None:
        self.ctx = ctx
        self.branches = branches
        self.commits = commits

    def restore(
        self,
        name: str,
        branch: str,
        version: int,
        *,
        detail: dict[str, object] | None = None,
        by: Provenance = UNSTATED,
    ) -> CommitResult:
        """A new version of ``branch`` equal to its ``version`` (data, schema, indexes): one
        commit on the branch's line, ``detail`` in its log entry. Write role, as main's restore;
        TableVersionNotFound for a version not on the branch's line (main's before the branch
        was made, or one deleted)."""
        request = restore_request(self.ctx, name, version, by, branch)
        if request.replay is not None:
            return request.replay
        tname = request.table
        rec, _ = self.branches.branch(tname, branch)
        if (
            not rec.parent_version <= version <= rec.current_version
            or self.ctx.store.get(keys.version(rec.incarnation, version)) is None
        ):
            raise TableVersionNotFound(
                f"version {version} of branch {branch} of {tname} does not exist (or was deleted)"
            )
        old = self.branches.reads.snapshot(tname, rec, version)
        logged = {**(detail or {}), "restored_version": version, "branch": branch}
        pending = restore_pending(self.ctx, request, by, old.schema, logged, release_lease=True)

        def bind(lease: Lease) -> tuple[BranchRecord, BoundTableNamespace]:
            fresh, item = self.branches.held(tname, branch, rec.incarnation, pending, at=rec.current_version)
            return fresh, self.branches.writer_namespace(
                tname, fresh, item, pending, lease, "restore", held=True
            )

        return restore_line(
            self.commits, request, pending, bind, chain=rec.incarnation, point="branch-restore:before-write"
        )

    def delete_versions(
        self,
        name: str,
        branch: str,
        wanted: Sequence[int],
        *,
        detail: dict[str, object] | None = None,
        by: Provenance = UNSTATED,
    ) -> MaintenanceResult:
        """Remove the branch's registered versions among ``wanted`` that governance lets go;
        those kept are named in the result's ``detail`` (``current``, ``tagged``, ``branched``,
        ``pinned``). Admin, as main's: it destroys history. ``detail`` and ``by.commit_id``: as
        main's (a landed id answers that removal)."""
        who = self.ctx.who(by.principal)
        tname = TableName.parse(name)
        who.require(tname.project, "admin", f"delete versions of branch {branch} of {tname}")
        asked = set(wanted)
        rec, _ = self.branches.branch(tname, branch)
        commit_id = check_commit_id(by.commit_id)
        with self.ctx.gate.hold(rec.incarnation) as lease:
            first = removed_before(self.ctx, tname, by, branch)
            if first is not None:
                return first
            fresh, _ = self.branches.held(tname, branch, rec.incarnation, at=rec.current_version)
            head = fresh.current_version
            versions = [
                v
                for v in (
                    decode(VersionRecord, i.value, i.key)
                    for i in self.ctx.store.scan_prefix(keys.versions(fresh.incarnation))
                )
                if v.version <= head
            ]
            chosen = sorted((v for v in versions if v.version in asked), key=lambda v: v.version)
            reasons = {
                "current": {head},
                "tagged": {v.version for v in versions if v.tags},
                "branched": self._branched_from(tname, fresh),
                "pinned": young_versions(self.ctx, versions, timedelta(0)),
            }
            kept: dict[str, list[int]] = {}
            held: set[int] = set()
            for reason, numbers in reasons.items():  # each version under its first reason
                kept[reason] = [v.version for v in chosen if v.version in numbers and v.version not in held]
                held |= set(kept[reason])
            doomed = [v for v in chosen if v.version not in held]
            logged: dict[str, object] = {
                **(detail or {}),
                "branch": branch,
                "versions_removed": [v.version for v in doomed],
                "kept": kept,
            }
            if not doomed:
                return MaintenanceResult(str(tname), "delete-versions", "nothing-to-do", head, None, logged)
            return self._remove(tname, fresh, versions, doomed, lease, logged, by, who, commit_id)

    def _branched_from(self, tname: TableName, line: BranchRecord) -> set[int]:
        """The versions of ``line`` another branch (live or in the trash) was made from."""
        made = (
            decode(BranchRecord, i.value, i.key) for i in self.ctx.store.scan_prefix(keys.branches_of(tname))
        )
        return {b.parent_version for b in made if b.parent_chain == line.incarnation}

    def _remove(
        self,
        tname: TableName,
        line: BranchRecord,
        versions: list[VersionRecord],
        doomed: list[VersionRecord],
        lease: Lease,
        detail: dict[str, object],
        by: Provenance,
        who: Principal,
        commit_id: str,
    ) -> MaintenanceResult:
        """Under the branch's lease: ``doomed`` out of the registry first (each still untagged),
        then Lance's cleanup of the branch's dataset with the same cut, then the staging
        manifests; the log entry gets the bytes and files removed."""
        entry = removal_entry(self.ctx, tname, "delete-versions", by, who, commit_id, line, detail)
        unregister(
            self.ctx, line.incarnation, doomed, lease, entry, f"during cleanup of branch {line.branch}"
        )
        self.ctx.at("branch-delete-versions:after-registry")
        storage = self.ctx.storage(line.location)
        kept = [(v.version, v.manifest_path) for v in versions if v not in doomed]
        engine.repair_manifests(line.location, kept, storage)
        snap = self.branches.reads.snapshot(tname, line, line.current_version)
        stats = engine.cleanup_versions(snap.dataset, [v.version for v in doomed])
        engine.remove_files(line.location, [v.manifest_path for v in doomed], storage)
        detail.update(stats)
        marker = self.ctx.commit_landed(commit_id)
        if marker is not None:
            patch = {"bytes_removed": stats["bytes_removed"], "files_removed": stats["data_files_removed"]}
            self.ctx.patch_log(marker.log_key, {**patch, "detail": detail})
        return MaintenanceResult(
            str(tname), "delete-versions", "committed", line.current_version, commit_id, detail
        )
