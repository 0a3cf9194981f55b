"""Scalar indexes per table: the asset that builds and refreshes them under the table's policy,
the check that reports indexes lagging the data, and the schedule that keeps them current."""

from datetime import datetime
from typing import Any

import dagster as dg

from lake_platform.defs.errors import RETRY, lake_errors
from lake_platform.defs.ingest import ingested
from lake_platform.defs.partitions import allow_per_table_checks, tables
from lake_platform.defs.resources import ACTOR, LakeResource

allow_per_table_checks()

WARN = dg.AssetCheckSeverity.WARN


@dg.asset(
    partitions_def=tables,
    deps=[ingested],
    group_name="lake",
    kinds={"lance"},
    retry_policy=RETRY,
    description="Scalar indexes the table's policy names (`indexes`, column:kind) built, and every index "
    "that lags the data refreshed: one registry commit per build, one for the refresh.",
)
def table_indexes(context: dg.AssetExecutionContext, lake: LakeResource) -> dg.MaterializeResult:
    from lake_platform.maintenance.indexes import build_indexes

    table = context.partition_key
    with lake_errors(), lake.catalog() as catalog:
        outcome = build_indexes(catalog, table, actor=ACTOR, run_id=context.run.run_id)
        indexes = [i.to_dict() for i in catalog.indexes.list_indexes(table)]
    metadata: dict[str, Any] = {
        "table": table,
        "status": "nothing to do" if outcome.status == "nothing-to-do" else outcome.status,
        "version": outcome.version,
        "built": dg.MetadataValue.json(outcome.built),
        "refreshed": dg.MetadataValue.json(outcome.refreshed),
        "skipped": dg.MetadataValue.json(outcome.skipped),
        "indexes": dg.MetadataValue.json(indexes),
        "policy_source": outcome.policy_source or "(platform defaults)",
    }
    if outcome.commit_ids:
        metadata["commit_ids"] = dg.MetadataValue.json(outcome.commit_ids)
    return dg.MaterializeResult(metadata=metadata)


@dg.asset_check(
    asset=table_indexes,
    partitions_def=tables,
    description="Every index covers every fragment, and every index the policy names is built.",
)
def indexes_current(context: dg.AssetCheckExecutionContext, lake: LakeResource) -> dg.AssetCheckResult:
    from lake_platform.maintenance.indexes import lag_report

    table = context.op_execution_context.partition_key
    with lake.catalog() as catalog:
        report = lag_report(catalog, table)
    lagging, missing = report["lagging"], report["missing"]
    problems = [
        f"{name} does not cover {lag['fragments_unindexed']} fragment(s), {lag['rows_unindexed']} row(s)"
        for name, lag in lagging.items()
    ] + [
        f"{column} has no {kind.lower()} index (policy {report['policy_source']})"
        for column, kind in missing.items()
    ]
    metadata = {
        "lagging": dg.MetadataValue.json(lagging),
        "missing": dg.MetadataValue.json(missing),
        "skipped": dg.MetadataValue.json(report["skipped"]),
        "indexes": dg.MetadataValue.json(report["indexes"]),
    }
    if problems:
        return dg.AssetCheckResult(
            passed=False,
            severity=WARN,
            description=(
                f"{table}: " + "; ".join(problems) + ". Queries stay correct but scan the uncovered rows; "
                "materialize table_indexes for this table to catch up."
            ),
            metadata=metadata,
        )
    count = len(report["indexes"])
    return dg.AssetCheckResult(
        passed=True,
        severity=WARN,
        description=f"{table}: {count} index(es), all current.",
        metadata=metadata,
    )


@dg.schedule(
    cron_schedule="40 * * * *",
    target=[table_indexes],
    execution_timezone="UTC",
    default_status=dg.DefaultScheduleStatus.RUNNING,
    description="Hourly index build and refresh of every table whose effective policy names indexes.",
)
def index_refresh_schedule(
    context: dg.ScheduleEvaluationContext, lake: LakeResource
) -> list[dg.RunRequest] | dg.SkipReason:
    from lake_platform.errors import LakeError

    when: datetime = context.scheduled_execution_time
    stamp = when.strftime("%Y-%m-%dT%H:%M") if when else "now"
    requests = []
    with lake.catalog() as catalog:  # registry reads only: the policy decides, no table is opened
        for table in context.instance.get_dynamic_partitions(tables.name):
            try:
                wanted = catalog.policies.effective_policy(table).policy.indexes
            except LakeError:
                continue
            if wanted:
                requests.append(dg.RunRequest(partition_key=table, run_key=f"indexes:{table}:{stamp}"))
    return requests or dg.SkipReason("no table's policy names indexes")
