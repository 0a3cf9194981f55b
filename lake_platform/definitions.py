"""The Dagster code location (``workspace.yaml`` points here): one entry point merging the
per-concern modules under ``lake_platform/defs/``. Loading it touches no storage or network."""

from __future__ import annotations

import dagster as dg

from lake_platform.defs import checks
from lake_platform.defs.indexes import index_refresh_schedule, indexes_current, table_indexes
from lake_platform.defs.ingest import inbox_sensor, ingested
from lake_platform.defs.maintenance import (
    cleaned_versions,
    compacted,
    compaction_sensor,
    expired_trash,
    orphan_folder_report,
    orphan_folder_scan_schedule,
    orphan_report,
    orphan_scan_schedule,
    trash_expiry_schedule,
    version_cleanup_schedule,
)
from lake_platform.defs.resources import FlightEndpointResource, InboxResource, LakeResource
from lake_platform.defs.results import reclaimed_results, results_reclaim_schedule
from lake_platform.defs.tables import table_partitions_sensor


def resources() -> dict[str, object]:
    lake = LakeResource()
    return {"lake": lake, "inbox": InboxResource(lake=lake), "flight": FlightEndpointResource()}


def build(resource_overrides: dict[str, object] | None = None) -> dg.Definitions:
    return dg.Definitions(
        assets=[
            ingested,
            compacted,
            cleaned_versions,
            expired_trash,
            orphan_report,
            orphan_folder_report,
            table_indexes,
            reclaimed_results,
        ],
        asset_checks=[*checks.ALL, indexes_current],
        sensors=[table_partitions_sensor, inbox_sensor, compaction_sensor],
        schedules=[
            version_cleanup_schedule,
            orphan_scan_schedule,
            orphan_folder_scan_schedule,
            trash_expiry_schedule,
            index_refresh_schedule,
            results_reclaim_schedule,
        ],
        resources={**resources(), **(resource_overrides or {})},
        # One process per run, steps in it: each step process would re-import Lance (~5 s).
        executor=dg.in_process_executor,
    )


@dg.definitions
def defs() -> dg.Definitions:
    return build()
