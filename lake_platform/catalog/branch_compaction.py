"""Compacting a branch: main's compaction (plan, rewrite, commit) on the branch's own line.

It runs whole under the branch's lease (plan, rewrite and commit), so no other writer of the
branch can move its head meanwhile and a plan is never stale; main is never touched. Lance
commits a compaction as two versions (reserve fragments, then rewrite), each a compare-and-swap of
the branch's head through a namespace bound to the branch record, as branch writes are. The new
files land under the branch's dataset root; the branch's older versions, which still read the
old files, live as long as the branch (branches have no version cleanup): compaction makes the
branch's reads cheaper and its storage larger until it is published (then main's cleanup
applies) or purged.
"""

from __future__ import annotations

from lake_platform.catalog.branches import Branches
from lake_platform.catalog.context import CatalogContext, check_commit_id
from lake_platform.catalog.engine_commits import EngineCommits
from lake_platform.catalog.pending import PendingCommit
from lake_platform.catalog.provenance import UNSTATED, Provenance
from lake_platform.catalog.results import MaintenanceResult
from lake_platform.engine import lance_engine as engine
from lake_platform.naming import TableName


class BranchCompaction:
    def __init__(self, ctx: CatalogContext, branches: Branches, commits: EngineCommits) -> None:
        self.ctx = ctx
        self.branches = branches
        self.commits = commits

    def compact_branch(
        self,
        name: str,
        branch: str,
        *,
        target_rows_per_fragment: int = 1_048_576,
        by: Provenance = UNSTATED,
    ) -> MaintenanceResult:
        """Rewrite the branch head's small fragments into fewer, under the branch's lease; logged
        ``compact`` with ``detail.branch``. ``nothing-to-do`` when no fragment needs it."""

        who = self.ctx.who(by.principal)
        tname = TableName.parse(name)
        who.require(tname.project, "write", f"compact {tname}")
        commit_id = check_commit_id(by.commit_id)
        replay = None
        if by.commit_id is not None:
            replay = self.ctx.replayed(commit_id, table=str(tname), operation="compact", branch=branch)
        if replay is not None:
            return MaintenanceResult(
                str(tname),
                "compact",
                "committed",
                replay.to_version or 0,
                commit_id,
                {"branch": branch, "replayed": True},
            )
        rec, _ = self.branches.branch(tname, branch)
        with self.ctx.gate.hold(rec.incarnation) as lease:
            fresh, item = self.branches.held(tname, branch, rec.incarnation, at=rec.current_version)
            snap = self.branches.reads.snapshot(tname, fresh, fresh.current_version)
            plan = engine.plan_compaction(snap.dataset, target_rows_per_fragment=target_rows_per_fragment)
            if not plan.tasks:
                return MaintenanceResult(str(tname), "compact", "nothing-to-do", fresh.current_version)
            results = [engine.execute_compaction_task(snap.dataset, task) for task in plan.tasks]
            pending = PendingCommit(
                commit_id=commit_id,
                operation="compact",
                actor=self.ctx.actor(by.actor, who),
                run_id=by.run_id,
                detail={"branch": branch, "planned_at_version": plan.read_version, "tasks": len(results)},
            )
            storage = self.ctx.storage(fresh.location)
            ns = self.branches.writer_namespace(tname, fresh, item, pending, lease, "compact", held=True)
            ds = engine.open_version(
                namespace=ns, table_id=tname.parts, version=plan.read_version, storage_options=storage
            )
            lease.check()
            try:
                self.ctx.at("branch-compact:before-write")
                _, removed, added = engine.commit_compaction(ds, results)
            except Exception as exc:  # noqa: BLE001 - every failure is resolved, never guessed
                self.commits.resolve_failure(pending, ns, exc)
                removed = added = 0
            self.commits.manifests.finalize(fresh, pending)
        return MaintenanceResult(
            str(tname),
            "compact",
            "committed",
            pending.landed[-1][0],
            commit_id,
            {**pending.detail, "fragments_removed": removed, "fragments_added": added},
        )
