"""Policy-driven compaction with Lance's distributed plan → tasks → commit, in three pieces a
scheduler can place apart.

``plan`` decides (policy, fragment count) and plans against the registered version; each of
its tasks is a JSON string that ``run_task`` executes anywhere with a catalog (it opens the
table *at the planned version* through the registry and rewrites that task's fragments, no
commit); ``commit`` lands all results as one compaction under the table's lease. The plan
carries its commit id, so a repeated ``commit`` (a retried step, a re-executed run) replays
instead of compacting twice. A plan overtaken by a conflicting commit ends as
``skipped-stale``. Dagster makes each task a step of the run (``defs/maintenance.py``), so its
executor places them: in the run's process, in subprocesses, or one pod per step.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

from lake_platform.catalog.provenance import Provenance
from lake_platform.errors import InvalidInput

if TYPE_CHECKING:
    from lake_platform.catalog.catalog import Catalog


@dataclass(frozen=True)
class CompactionPlan:
    """What ``plan`` decided; plain data (it travels between processes and machines)."""

    table: str
    status: str  # planned | nothing-to-do
    reason: str
    fragments_before: int
    threshold: int
    read_version: int
    incarnation: str = ""
    tasks: tuple[str, ...] = ()
    commit_id: str = ""


@dataclass
class CompactionOutcome:
    table: str
    status: str  # committed | skipped-stale | nothing-to-do
    version: int
    reason: str = ""
    fragments_before: int | None = None
    fragments_after: int | None = None
    threshold: int | None = None
    tasks: int = 0
    commit_id: str | None = None
    detail: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def due(catalog: Catalog, name: str) -> tuple[bool, str, int, int]:
    """(compaction due?, why, fragments, threshold) under the table's effective policy."""
    policy = catalog.policies.effective_policy(name).policy
    fragments = catalog.reads.describe_table(name).fragments or 0
    if not policy.compact_enabled:
        return False, "compaction disabled by policy", fragments, policy.compact_min_fragments
    if fragments < policy.compact_min_fragments:
        return (
            False,
            f"{fragments} fragments, below the threshold of {policy.compact_min_fragments}",
            fragments,
            policy.compact_min_fragments,
        )
    return (
        True,
        f"{fragments} fragments, threshold {policy.compact_min_fragments}",
        fragments,
        policy.compact_min_fragments,
    )


def plan(catalog: Catalog, name: str, *, force: bool = False) -> CompactionPlan:
    """Plan a compaction of ``name`` if its policy says it is due (or ``force``)."""
    from lake_platform.catalog.provenance import new_commit_id

    policy = catalog.policies.effective_policy(name).policy
    is_due, why, fragments, threshold = due(catalog, name)
    if not is_due and not force:
        current = catalog.reads.open_table(name).version
        return CompactionPlan(name, "nothing-to-do", why, fragments, threshold, current)
    planned = catalog.versions.plan_compaction(name, target_rows_per_fragment=policy.target_rows_per_fragment)
    if not planned.tasks:
        return CompactionPlan(
            name, "nothing-to-do", "no fragments to merge", fragments, threshold, planned.read_version
        )
    return CompactionPlan(
        planned.table,
        "planned",
        why,
        fragments,
        threshold,
        planned.read_version,
        planned.incarnation,
        planned.tasks,
        new_commit_id(),
    )


def run_task(catalog: Catalog, planned: CompactionPlan, task: str) -> str:
    """Rewrite one task's fragments (no commit); returns Lance's RewriteResult as JSON."""
    from lake_platform.catalog.results import PlannedCompaction

    if planned.status != "planned" or task not in planned.tasks:
        raise InvalidInput(f"task is not part of the compaction plan of {planned.table}")
    one = PlannedCompaction(planned.table, planned.incarnation, planned.read_version, (task,))
    return catalog.versions.execute_compaction(one)[0]


def commit(
    catalog: Catalog,
    planned: CompactionPlan,
    results: list[str],
    *,
    actor: str | None = None,
    run_id: str | None = None,
) -> CompactionOutcome:
    """Land every task's result as one compaction, under the table's lease (replays when the
    plan's commit id already landed)."""
    from lake_platform.catalog.results import PlannedCompaction

    if planned.status != "planned":
        return CompactionOutcome(
            planned.table,
            "nothing-to-do",
            planned.read_version,
            planned.reason,
            planned.fragments_before,
            planned.fragments_before,
            planned.threshold,
        )
    if len(results) != len(planned.tasks):
        raise InvalidInput(
            f"compaction of {planned.table}: {len(results)} task results for {len(planned.tasks)} tasks"
        )
    whole = PlannedCompaction(planned.table, planned.incarnation, planned.read_version, planned.tasks)
    result = catalog.versions.commit_compaction(
        whole, results, by=Provenance(actor=actor, run_id=run_id, commit_id=planned.commit_id)
    )
    after = catalog.reads.describe_table(planned.table).fragments
    return CompactionOutcome(
        planned.table,
        result.status,
        result.version,
        planned.reason,
        planned.fragments_before,
        after,
        planned.threshold,
        len(planned.tasks),
        result.commit_id,
        dict(result.detail),
    )


def compact_table(
    catalog: Catalog,
    name: str,
    *,
    force: bool = False,
    actor: str | None = None,
    run_id: str | None = None,
) -> CompactionOutcome:
    """Plan, run every task here, commit: the whole compaction in this process."""
    planned = plan(catalog, name, force=force)
    results = [run_task(catalog, planned, task) for task in planned.tasks]
    return commit(catalog, planned, results, actor=actor, run_id=run_id)
