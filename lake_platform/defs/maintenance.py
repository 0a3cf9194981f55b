"""Maintenance under Dagster. Per table, jobs over the table's own asset: compaction of main
(``table_compaction``) or of a branch (``branch_compaction``), version cleanup
(``table_cleanup``) and the orphan scan (``table_orphan_scan``), each run partitioned by the
table (so the run queue serializes one table's runs), each action one registry commit, and each
recording an observation on the table's asset (the version, what was rewritten or removed) and
the evaluation of the health check its work answers (``table_checks``). Requested by the
compaction sensor (``table_maintenance.py``) and the interval sensors
(``maintenance_intervals.py``). Lake-wide, platform assets: trash expiry and the orphan-folder
scan (per warehouse), scheduled."""

import hashlib
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, replace
from datetime import timedelta

import dagster as dg

from lake_platform.catalog.provenance import Provenance
from lake_platform.defs import table_checks
from lake_platform.defs.asset_tables import key_for_table
from lake_platform.defs.errors import RETRY, lake_errors
from lake_platform.defs.partitions import tables
from lake_platform.defs.resources import ACTOR, LakeResource
from lake_platform.defs.table_assets import table_observation
from lake_platform.maintenance.compaction import CompactionPlan
from lake_platform.maintenance.orphans import Chunk, Live


class CompactConfig(dg.Config):
    force: bool = False  # compact even below the policy's fragment threshold


class BranchConfig(dg.Config):
    branch: str  # the branch of the run's table (its partition) to compact


def _status(status: str) -> str:
    return "nothing to do" if status == "nothing-to-do" else status


def _record(
    context: dg.OpExecutionContext,
    lake: LakeResource,
    table: str,
    operation: str,
    figures: Mapping[str, object],
    checks: tuple[str, ...],
    *,
    cleaned: bool = False,
) -> dg.Output[None]:
    """What one maintenance run leaves on the table's asset: an observation of main's version
    with ``figures`` (``lake/operation``, what changed), and the checks its work answers, evaluated
    afresh. The same figures are the step's output metadata."""
    extra = {"lake/operation": operation, **figures}
    with lake_errors(), lake.catalog() as catalog:
        context.log_event(table_observation(catalog.reads.open_table(table), lake.namespaces, extra))
        now_ms = int(time.time() * 1000)
        found = table_checks.verdicts(catalog, context.instance, table, now_ms, checks, cleaned=cleaned)
    key = key_for_table(table, lake.namespaces)
    for verdict in found:
        context.log_event(verdict.evaluation(key))
    return dg.Output(None, metadata={"table": table, **figures})


@dg.op(
    out={"plan": dg.Out(CompactionPlan), "tasks": dg.DynamicOut(CompactionPlan)},
    retry_policy=RETRY,
    description="Decide (policy, fragment count) and plan against the registered version; one "
    "dynamic output per task.",
)
def compaction_plan(
    context: dg.OpExecutionContext, config: CompactConfig, lake: LakeResource
) -> Iterator[dg.Output[CompactionPlan] | dg.DynamicOutput[CompactionPlan]]:
    from lake_platform.maintenance import compaction

    with lake_errors(), lake.catalog() as catalog:
        planned = compaction.plan(catalog, context.partition_key, force=config.force)
    context.log.info(f"{planned.table}: {planned.status} ({planned.reason}), {len(planned.tasks)} tasks")
    yield dg.Output(planned, "plan")
    for i, task in enumerate(planned.tasks):
        yield dg.DynamicOutput(replace(planned, tasks=(task,)), mapping_key=f"task_{i}", output_name="tasks")


@dg.op(retry_policy=RETRY, description="Rewrite one task's fragments at the planned version (no commit).")
def compaction_task(context: dg.OpExecutionContext, task: CompactionPlan, lake: LakeResource) -> str:
    from lake_platform.maintenance import compaction

    with lake_errors(), lake.catalog() as catalog:
        return compaction.run_task(catalog, task, task.tasks[0])


@dg.op(
    retry_policy=RETRY,
    description="Commit every task's result as one compaction, under the table's lease (a retry "
    "replays under the plan's commit id); observe the table's new version.",
)
def compaction_commit(
    context: dg.OpExecutionContext, plan: CompactionPlan, results: list[str], lake: LakeResource
) -> dg.Output[None]:
    from lake_platform.maintenance import compaction

    with lake_errors(), lake.catalog() as catalog:
        outcome = compaction.commit(catalog, plan, results, actor=ACTOR, run_id=context.run.run_id)
    figures: dict[str, object] = {
        "status": _status(outcome.status),
        "reason": outcome.reason,
        "fragments_before": outcome.fragments_before or 0,
        "fragments_after": outcome.fragments_after or 0,
        "threshold": outcome.threshold or 0,
        "tasks": outcome.tasks,
    }
    if outcome.commit_id:
        figures["lake/commit_id"] = outcome.commit_id
    return _record(context, lake, outcome.table, "compact", figures, (table_checks.FRAGMENTS,))


@dg.graph(
    description="Small fragments of main merged when the table's policy allows it and its fragment count "
    "reached the threshold: Lance's distributed compaction with one run step per task (the run's "
    "executor places them), then one commit under the table's lease."
)
def compaction() -> None:
    plan, tasks = compaction_plan()
    compaction_commit(plan, tasks.map(compaction_task).collect())


table_compaction_job = compaction.to_job(name=table_checks.COMPACTION_JOB, partitions_def=tables)


@dg.op(
    retry_policy=RETRY,
    description="Compact the branch's head under the branch's lease (catalog.branch_compaction), one "
    "commit on the branch's line; main never moves.",
)
def compact_branch(
    context: dg.OpExecutionContext, config: BranchConfig, lake: LakeResource
) -> dg.Output[None]:
    table = context.partition_key
    # Derived from the run, so a retried step replays its commit instead of compacting again.
    commit_id = "dg-" + hashlib.sha256(f"{context.run.run_id}\0{config.branch}".encode()).hexdigest()[:48]
    by = Provenance(actor=ACTOR, run_id=context.run.run_id, commit_id=commit_id)
    with lake_errors(), lake.catalog() as catalog:
        before = len(catalog.branches.open_branch(table, config.branch).dataset.get_fragments())
        result = catalog.branch_compaction.compact_branch(table, config.branch, by=by)
        after = len(catalog.branches.open_branch(table, config.branch).dataset.get_fragments())
    figures: dict[str, object] = {
        "status": _status(result.status),
        "lake/compacted_branch": config.branch,
        "branch_version": result.version,
        "fragments_before": before,
        "fragments_after": after,
    }
    if result.commit_id:
        figures["lake/commit_id"] = result.commit_id
    return _record(context, lake, table, "compact-branch", figures, (table_checks.FRAGMENTS,))


@dg.job(
    name=table_checks.BRANCH_COMPACTION_JOB,
    partitions_def=tables,
    description="A branch's small fragments merged (its table is the run's partition); main never moves.",
)
def branch_compaction_job() -> None:
    compact_branch()


@dg.op(
    retry_policy=RETRY,
    description="Old versions removed under the table's retention policy (never a tagged version, never "
    "one inside the ticket lifetime), one registry commit; observe the table.",
)
def clean_versions(context: dg.OpExecutionContext, lake: LakeResource) -> dg.Output[None]:
    table = context.partition_key
    with lake_errors(), lake.catalog() as catalog:
        policy = catalog.policies.effective_policy(table).policy
        result = catalog.versions.cleanup(
            table,
            retention=policy.retention,
            retain_versions=policy.retain_versions,
            by=Provenance(actor=ACTOR, run_id=context.run.run_id),
        )
        ticket = catalog.settings.ticket_lifetime_seconds
    removed = list(result.detail.get("versions_removed", []))
    figures: dict[str, object] = {
        "status": _status(result.status),
        "versions_removed": len(removed),
        "removed": dg.MetadataValue.json(removed),
        "tagged_kept": dg.MetadataValue.json(list(result.detail.get("tagged_kept", []))),
        "bytes_removed": int(result.detail.get("bytes_removed", 0) or 0),
        "data_files_removed": int(result.detail.get("data_files_removed", 0) or 0),
        "retention_seconds": policy.retention.total_seconds(),
        "retain_versions": policy.retain_versions,
        "ticket_lifetime_seconds": ticket,
    }
    if result.commit_id:
        figures["lake/commit_id"] = result.commit_id
    # This run's success is not recorded yet (a cleanup with nothing to remove commits nothing):
    # the versions check is told the table was just cleaned.
    return _record(context, lake, table, "cleanup", figures, (table_checks.VERSIONS,), cleaned=True)


@dg.job(
    name=table_checks.CLEANUP_JOB,
    partitions_def=tables,
    description="Version cleanup of one table (its partition) under its retention policy.",
)
def table_cleanup_job() -> None:
    clean_versions()


@dataclass(frozen=True)
class OrphanScanPlan:
    """What the chunk steps of one orphan scan share: the live set, the age gate, the clock."""

    live: Live
    min_age: timedelta
    now: float


@dg.op(
    out={"plan": dg.Out(OrphanScanPlan), "chunks": dg.DynamicOut(str)},
    retry_policy=RETRY,
    description="Read what the registry, the manifests and the branches keep alive; one dynamic output "
    "per chunk of the table's listing (a top-level folder).",
)
def orphan_scan_plan(
    context: dg.OpExecutionContext, lake: LakeResource
) -> Iterator[dg.Output[OrphanScanPlan] | dg.DynamicOutput[str]]:
    from lake_platform.maintenance import orphans

    with lake_errors(), lake.catalog() as catalog:
        gate = orphans.age_gate(catalog, context.partition_key)
        live = orphans.live_set(catalog, context.partition_key)
        parts = orphans.chunks(catalog, live)
    # The clock is read after the live set: files that appear later are younger than the gate.
    yield dg.Output(OrphanScanPlan(live, gate, time.time()), "plan")
    context.log.info(f"{live.table}: {len(parts)} chunks: {', '.join(parts)}")
    for i, chunk in enumerate(parts):
        yield dg.DynamicOutput(chunk, mapping_key=f"chunk_{i}", output_name="chunks")


@dg.op(retry_policy=RETRY, description="List one chunk of the table's files and classify them.")
def orphan_scan_chunk(
    context: dg.OpExecutionContext, plan: OrphanScanPlan, chunk: str, lake: LakeResource
) -> Chunk:
    from lake_platform.maintenance import orphans

    with lake_errors(), lake.catalog() as catalog:
        return orphans.classify_chunk(catalog, plan.live, chunk, plan.min_age, plan.now)


@dg.op(
    retry_policy=RETRY,
    description="Merge the chunks into one report, commit it to the registry, observe the table.",
)
def orphan_scan_report(
    context: dg.OpExecutionContext, plan: OrphanScanPlan, parts: list[Chunk], lake: LakeResource
) -> dg.Output[None]:
    from lake_platform.maintenance import orphans

    report = orphans.merge(plan.live, parts, plan.min_age, plan.now).report
    with lake_errors(), lake.catalog() as catalog:
        key = orphans.commit_report(catalog, report, actor=ACTOR, run_id=context.run.run_id)
    metadata = orphans.as_metadata(report)
    for listed in ("paths", "tagged_versions", "branches", "unknown_branches"):
        metadata[listed] = dg.MetadataValue.json(metadata[listed])
    figures = {"report_key": key, "truncated": report.truncated, "chunks": len(parts), **metadata}
    return _record(context, lake, report.table, "orphan-scan", figures, (table_checks.ORPHANS,))


@dg.graph(
    description="Files under the table's location that nothing live references, and Lance branches no "
    "registry record names (report only; deletes nothing), listed and classified in chunks (one step "
    "per top-level folder, placed by the run's executor). The report is committed to the registry."
)
def orphan_scan() -> None:
    plan, parts = orphan_scan_plan()
    orphan_scan_report(plan, parts.map(lambda chunk: orphan_scan_chunk(plan, chunk)).collect())


table_orphan_scan_job = orphan_scan.to_job(name=table_checks.ORPHAN_SCAN_JOB, partitions_def=tables)


# -- platform-wide ---------------------------------------------------------------------------


@dg.asset(
    group_name="lake",
    kinds={"lance"},
    retry_policy=RETRY,
    description="Dropped tables whose trash grace period ran out, purged (one registry commit each);"
    " multi-table commit records past their deadline, resolved.",
)
def expired_trash(context: dg.AssetExecutionContext, lake: LakeResource) -> dg.MaterializeResult:
    with lake_errors(), lake.catalog() as catalog:
        try:  # expiry purges every other record before it raises for one it refused
            purged = catalog.trash.expire_trash(by=Provenance(actor=ACTOR, run_id=context.run.run_id))
        finally:  # so a refused record fails the run without stopping the sweep, run after it
            resolved = catalog.trash.sweep_transactions()
    return dg.MaterializeResult(
        metadata={
            "purged": len(purged),
            "transactions_resolved": resolved,
            "tables": dg.MetadataValue.json(
                [{"table": r.table, "commit_id": r.commit_id, "version": r.from_version} for r in purged]
            ),
        }
    )


@dg.asset(
    group_name="lake",
    kinds={"lance"},
    retry_policy=RETRY,
    description="Whole table folders in each warehouse that neither the registry nor the trash names "
    "(a writer killed before its registry commit), older than the orphan age gate: report only, one "
    "committed report per warehouse. Deleting them is an explicit reclaim (orphan_folders.reclaim_folders).",
)
def orphan_folder_report(context: dg.AssetExecutionContext, lake: LakeResource) -> dg.MaterializeResult:
    from lake_platform.maintenance import orphan_folders

    found: list[dict[str, object]] = []
    folders = size = 0
    with lake_errors(), lake.catalog() as catalog:
        for warehouse in orphan_folders.warehouses(catalog):
            report = orphan_folders.scan_folders(catalog, warehouse)
            key = orphan_folders.commit_folder_report(catalog, report, actor=ACTOR, run_id=context.run.run_id)
            found.append(
                {"warehouse": warehouse, "report_key": key, **orphan_folders.as_metadata(report, listed=20)}
            )
            folders += report.orphan_count
            size += report.orphan_bytes
    return dg.MaterializeResult(
        metadata={
            "warehouses": len(found),
            "orphan_folders": folders,
            "orphan_bytes": size,
            "reports": dg.MetadataValue.json(found),
        }
    )


orphan_folder_scan_schedule = dg.ScheduleDefinition(
    name="orphan_folder_scan_schedule",
    cron_schedule="30 4 * * 0",
    target=[orphan_folder_report],
    execution_timezone="UTC",
    default_status=dg.DefaultScheduleStatus.RUNNING,
    description="Weekly scan of every warehouse for table folders nobody knows (report only).",
)

trash_expiry_schedule = dg.ScheduleDefinition(
    name="trash_expiry_schedule",
    cron_schedule="15 * * * *",
    target=[expired_trash],
    execution_timezone="UTC",
    default_status=dg.DefaultScheduleStatus.RUNNING,
    description="Hourly purge of expired trash records.",
)
