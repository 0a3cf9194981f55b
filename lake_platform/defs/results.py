"""Spooled query results (Flight SQL and REST QueryTable share one results area): the asset that
reclaims expired ones, and its schedule. The servers sweep on their own too and ``lake results
expire`` does it by hand; all three call ``maintenance.results.reclaim_expired``."""

import time

import dagster as dg

from lake_platform.defs.errors import lake_errors
from lake_platform.defs.resources import LakeResource


@dg.asset(
    group_name="lake",
    description="Deletes spooled query results (LAKE_RESULTS_ROOT) whose expiry has passed, and job "
    "folders abandoned before they recorded one; never a live result.",
)
def reclaimed_results(context: dg.AssetExecutionContext, lake: LakeResource) -> dg.MaterializeResult:
    from lake_platform.engine.results import ResultsArea
    from lake_platform.maintenance.results import reclaim_expired

    with lake_errors():
        settings = lake.settings()
        area = ResultsArea.of(settings)
        outcome = reclaim_expired(area, time.time(), lifetime=settings.results_ttl_seconds)
    context.log.info("reclaimed %d spooled results, kept %d", len(outcome.deleted), outcome.kept)
    return dg.MaterializeResult(
        metadata={
            "root": outcome.root,
            "deleted": len(outcome.deleted),
            "kept": outcome.kept,
            "jobs": dg.MetadataValue.json(outcome.deleted[:100]),
        }
    )


results_reclaim_schedule = dg.ScheduleDefinition(
    name="results_reclaim_schedule",
    cron_schedule="*/15 * * * *",
    target=[reclaimed_results],
    execution_timezone="UTC",
    default_status=dg.DefaultScheduleStatus.RUNNING,
    description="Every 15 minutes: delete expired spooled query results.",
)
