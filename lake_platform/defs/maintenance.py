"""Table maintenance: compaction (sensor-triggered by the fragment count), version cleanup and
the orphan scan (per table, when its policy's interval elapsed: maintenance_intervals.py), trash
expiry (scheduled, lake-wide)."""

import json
import time
from collections.abc import Iterator
from dataclasses import dataclass, replace
from datetime import timedelta

import dagster as dg

from lake_platform.catalog.provenance import Provenance
from lake_platform.defs.errors import RETRY, lake_errors
from lake_platform.defs.ingest import ingested
from lake_platform.defs.partitions import tables
from lake_platform.defs.resources import ACTOR, LakeResource
from lake_platform.maintenance.compaction import CompactionPlan
from lake_platform.maintenance.orphans import Chunk, Live

#: Tables the compaction sensor sweeps per tick (besides those an ingest just touched), so
#: tables written outside Dagster (CLI, other writers) get compacted too.
SWEEP_PER_TICK = 10
#: Ingest materializations read per compaction-sensor tick.
EVENTS_PER_TICK = 500


class CompactConfig(dg.Config):
    force: bool = False  # compact even below the policy's fragment threshold


def _table_result(table: str, status: str, commit_id: str | None, **figures: object) -> dg.MaterializeResult:
    """One table maintenance run's metadata: the status in words, and the commit id only when a
    commit landed."""
    metadata = {"table": table, "status": "nothing to do" if status == "nothing-to-do" else status, **figures}
    if commit_id:
        metadata["commit_id"] = commit_id
    return dg.MaterializeResult(metadata=metadata)


@dg.op(
    out={"plan": dg.Out(CompactionPlan), "tasks": dg.DynamicOut(CompactionPlan)},
    ins={"after": dg.In(dg.Nothing)},
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
    "replays under the plan's commit id).",
)
def compaction_commit(
    context: dg.OpExecutionContext, plan: CompactionPlan, results: list[str], lake: LakeResource
) -> dg.Output[None]:
    from lake_platform.maintenance import compaction

    with lake_errors(), lake.catalog() as catalog:
        outcome = compaction.commit(catalog, plan, results, actor=ACTOR, run_id=context.run.run_id)
    result = _table_result(
        outcome.table,
        outcome.status,
        outcome.commit_id,
        version=outcome.version,
        reason=outcome.reason,
        fragments_before=outcome.fragments_before or 0,
        fragments_after=outcome.fragments_after or 0,
        threshold=outcome.threshold or 0,
        tasks=outcome.tasks,
    )
    return dg.Output(None, metadata=result.metadata)


@dg.graph_asset(
    partitions_def=tables,
    ins={"ingested": dg.AssetIn(key=ingested.key, dagster_type=dg.Nothing)},
    group_name="lake",
    kinds={"lance"},
    description="Small fragments merged when the table's policy allows it and its fragment count reached "
    "the threshold: Lance's distributed compaction with one run step per task (the run's executor "
    "places them), then one commit under the table's lease.",
)
def compacted(ingested: None) -> None:
    plan, tasks = compaction_plan(ingested)
    return compaction_commit(plan, tasks.map(compaction_task).collect())


@dg.asset(
    partitions_def=tables,
    deps=[compacted],
    group_name="lake",
    kinds={"lance"},
    retry_policy=RETRY,
    description="Old versions removed under the table's retention policy (never a tagged version, never "
    "one inside the ticket lifetime).",
)
def cleaned_versions(context: dg.AssetExecutionContext, lake: LakeResource) -> dg.MaterializeResult:
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
    return _table_result(
        table,
        result.status,
        result.commit_id,
        version=result.version,
        versions_removed=len(removed),
        removed=dg.MetadataValue.json(removed),
        tagged_kept=dg.MetadataValue.json(list(result.detail.get("tagged_kept", []))),
        bytes_removed=int(result.detail.get("bytes_removed", 0) or 0),
        data_files_removed=int(result.detail.get("data_files_removed", 0) or 0),
        retention_seconds=policy.retention.total_seconds(),
        retain_versions=policy.retain_versions,
        ticket_lifetime_seconds=ticket,
    )


@dg.asset(
    group_name="lake",
    kinds={"lance"},
    retry_policy=RETRY,
    description="Dropped tables whose trash grace period ran out, purged (one registry commit each).",
)
def expired_trash(context: dg.AssetExecutionContext, lake: LakeResource) -> dg.MaterializeResult:
    with lake_errors(), lake.catalog() as catalog:
        purged = catalog.trash.expire_trash(by=Provenance(actor=ACTOR, run_id=context.run.run_id))
    return dg.MaterializeResult(
        metadata={
            "purged": len(purged),
            "tables": dg.MetadataValue.json(
                [{"table": r.table, "commit_id": r.commit_id, "version": r.from_version} for r in purged]
            ),
        }
    )


@dataclass(frozen=True)
class OrphanScanPlan:
    """What the chunk steps of one orphan scan share: the live set, the age gate, the clock."""

    live: Live
    min_age: timedelta
    now: float


@dg.op(
    out={"plan": dg.Out(OrphanScanPlan), "chunks": dg.DynamicOut(str)},
    ins={"after": dg.In(dg.Nothing)},
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


@dg.op(retry_policy=RETRY, description="Merge the chunks into one report and commit it to the registry.")
def orphan_scan_report(
    context: dg.OpExecutionContext, plan: OrphanScanPlan, parts: list[Chunk], lake: LakeResource
) -> dg.Output[None]:
    from lake_platform.maintenance import orphans

    report = orphans.merge(plan.live, parts, plan.min_age, plan.now).report
    with lake_errors(), lake.catalog() as catalog:
        key = orphans.commit_report(catalog, report, actor=ACTOR, run_id=context.run.run_id)
    metadata = orphans.as_metadata(report)
    metadata["paths"] = dg.MetadataValue.json(metadata["paths"])
    metadata["tagged_versions"] = dg.MetadataValue.json(metadata["tagged_versions"])
    metadata["branches"] = dg.MetadataValue.json(metadata["branches"])
    return dg.Output(
        None,
        metadata={
            "table": report.table,
            "report_key": key,
            "truncated": report.truncated,
            "chunks": len(parts),
            **metadata,
        },
    )


@dg.graph_asset(
    partitions_def=tables,
    ins={"cleaned_versions": dg.AssetIn(key=cleaned_versions.key, dagster_type=dg.Nothing)},
    group_name="lake",
    kinds={"lance"},
    description="Files under the table's location that nothing live references (report only; deletes "
    "nothing), listed and classified in chunks (one step per top-level folder, placed by the run's "
    "executor). The report is committed to the registry.",
)
def orphan_report(cleaned_versions: None) -> None:
    plan, parts = orphan_scan_plan(cleaned_versions)
    return orphan_scan_report(plan, parts.map(lambda chunk: orphan_scan_chunk(plan, chunk)).collect())


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


# -- triggers --------------------------------------------------------------------------------


@dg.sensor(
    target=[compacted],
    minimum_interval_seconds=60,
    default_status=dg.DefaultSensorStatus.RUNNING,
    description="Requests compaction of a table when its policy allows it and its fragment count reached "
    "the threshold: tables new ingests touched, plus a few others per tick (round-robin).",
)
def compaction_sensor(
    context: dg.SensorEvaluationContext, lake: LakeResource
) -> dg.SensorResult | dg.SkipReason:
    from lake_platform.errors import TableNotFound
    from lake_platform.maintenance.compaction import due

    state = json.loads(context.cursor) if context.cursor else {}
    after = state.get("after")
    found = context.instance.fetch_materializations(
        dg.AssetRecordsFilter(asset_key=ingested.key, after_storage_id=after),
        limit=EVENTS_PER_TICK,
        ascending=True,
    )
    touched: list[str] = []
    for rec in found.records:
        after = rec.storage_id
        key = rec.partition_key
        if key and key not in touched:
            touched.append(key)
    known = sorted(context.instance.get_dynamic_partitions(tables.name))
    sweep_from = state.get("sweep", "")
    ring = [t for t in known if t > sweep_from] + [t for t in known if t <= sweep_from]
    sweep = [t for t in ring[:SWEEP_PER_TICK] if t not in touched]
    requests: list[dg.RunRequest] = []
    reasons: list[str] = []
    with lake.catalog() as catalog:
        for table in touched + sweep:
            try:
                is_due, why, _, _ = due(catalog, table)
                version = catalog.reads.open_table(table).version
            except TableNotFound:
                continue
            reasons.append(f"{table}: {why}")
            if is_due:
                requests.append(
                    dg.RunRequest(
                        partition_key=table,
                        run_key=f"compact:{table}:v{version}",
                        tags={"lake/trigger": "fragment-count"},
                    )
                )
    new_state = {"after": after, "sweep": sweep[-1] if sweep else sweep_from}
    if not requests:
        return dg.SensorResult(
            skip_reason=dg.SkipReason("; ".join(reasons) or "no tables"), cursor=json.dumps(new_state)
        )
    return dg.SensorResult(run_requests=requests, cursor=json.dumps(new_state))


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
