"""Policy-driven compaction with Lance's distributed plan → tasks → commit, tasks fanned out
across processes on this machine.

The plan is made against the registered version; each task is shipped as JSON to a worker
process that opens the table *at the planned version* through the registry and rewrites its
fragments (no commit); the results come back as JSON and the catalog commits them under the
table's lease. A plan overtaken by a conflicting commit ends as ``skipped-stale``.
"""

from __future__ import annotations

import multiprocessing
import os
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from lake_platform.catalog.catalog import Catalog
    from lake_platform.catalog.results import PlannedCompaction
    from lake_platform.settings import LakeSettings


def compaction_workers() -> int:
    """``LAKE_COMPACTION_WORKERS`` (default: the CPU count, at most 4); 1 runs tasks in-process."""
    raw = os.environ.get("LAKE_COMPACTION_WORKERS", "")
    if raw.strip():
        return max(1, int(raw))
    return max(1, min(4, os.cpu_count() or 1))


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
    workers: int = 0
    commit_id: str | None = None
    detail: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def due(catalog: Catalog, name: str) -> tuple[bool, str, int, int]:
    """(compaction due?, why, fragments, threshold) under the table's effective policy."""
    policy = catalog.effective_policy(name).policy
    fragments = catalog.describe_table(name).fragments or 0
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


def compact_table(
    catalog: Catalog,
    name: str,
    *,
    force: bool = False,
    workers: int | None = None,
    actor: str | None = None,
    run_id: str | None = None,
) -> CompactionOutcome:
    policy = catalog.effective_policy(name).policy
    is_due, why, fragments, threshold = due(catalog, name)
    current = catalog.open_table(name).version
    if not is_due and not force:
        return CompactionOutcome(name, "nothing-to-do", current, why, fragments, fragments, threshold)
    planned = catalog.plan_compaction(name, target_rows_per_fragment=policy.target_rows_per_fragment)
    if not planned.tasks:
        return CompactionOutcome(
            name,
            "nothing-to-do",
            planned.read_version,
            "no fragments to merge",
            fragments,
            fragments,
            threshold,
        )
    workers = compaction_workers() if workers is None else max(1, workers)
    results = execute(catalog, planned, workers)
    result = catalog.commit_compaction(planned, results, actor=actor, run_id=run_id)
    after = catalog.describe_table(name).fragments
    return CompactionOutcome(
        name,
        result.status,
        result.version,
        why,
        fragments,
        after,
        threshold,
        len(planned.tasks),
        min(workers, len(planned.tasks)),
        result.commit_id,
        dict(result.detail),
    )


def execute(catalog: Catalog, planned: PlannedCompaction, workers: int) -> list[str]:
    """Run the plan's tasks: in-process for one worker or one task, else in a process pool."""
    if workers <= 1 or len(planned.tasks) <= 1:
        return catalog.execute_compaction(planned)
    settings = _settings_payload(catalog.settings)
    # spawn: forking a process that already runs Lance's thread pools is unsafe.
    ctx = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(max_workers=min(workers, len(planned.tasks)), mp_context=ctx) as pool:
        futures = [
            pool.submit(run_task, settings, planned.table, planned.incarnation, planned.read_version, task)
            for task in planned.tasks
        ]
        return [f.result() for f in futures]


def _settings_payload(settings: LakeSettings) -> dict[str, Any]:
    return settings.model_dump(mode="json")


def run_task(settings: dict[str, Any], table: str, incarnation: str, read_version: int, task: str) -> str:
    """Worker entry point (top level, so it pickles): rewrite one task's fragments, no commit."""
    from lake_platform.catalog.catalog import Catalog
    from lake_platform.catalog.results import PlannedCompaction
    from lake_platform.settings import LakeSettings

    catalog = Catalog(LakeSettings(_env_file=None, **settings), heartbeat=False)  # type: ignore[call-arg]
    try:
        return catalog.execute_compaction(PlannedCompaction(table, incarnation, read_version, (task,)))[0]
    finally:
        catalog.close()
