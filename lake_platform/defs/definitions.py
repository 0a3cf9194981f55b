"""The Dagster code location (``workspace.yaml`` points here): one entry point merging the
per-concern modules under ``lake_platform/defs/``. Loading it touches no storage or network."""

from __future__ import annotations

import os

import dagster as dg

from lake_platform.defs import checks, demo_assets
from lake_platform.defs.bypasses import bypass_sensor
from lake_platform.defs.indexes import index_refresh_schedule, indexes_current, table_indexes
from lake_platform.defs.ingest import inbox_sensor, ingested
from lake_platform.defs.io_manager import IO_MANAGER_KEY, LakeIOManager
from lake_platform.defs.maintenance import (
    branch_compaction_job,
    expired_trash,
    orphan_folder_report,
    orphan_folder_scan_schedule,
    table_cleanup_job,
    table_compaction_job,
    table_orphan_scan_job,
    trash_expiry_schedule,
)
from lake_platform.defs.maintenance_intervals import cleanup_interval_sensor, orphan_scan_interval_sensor
from lake_platform.defs.resources import FlightEndpointResource, InboxResource, LakeResource
from lake_platform.defs.results import reclaimed_results, results_reclaim_schedule
from lake_platform.defs.table_assets import table_observation_sensor
from lake_platform.defs.table_checks import table_checks, table_checks_sensor
from lake_platform.defs.table_maintenance import compaction_sensor
from lake_platform.defs.tables import table_partitions_sensor
from lake_platform.defs.wap import wap_publish_sensor
from lake_platform.settings import DagsterSettings, dagster_settings, load_settings


def resources() -> dict[str, object]:
    lake = LakeResource(namespaces=demo_assets.NAMESPACES)
    return {
        "lake": lake,
        "inbox": InboxResource(lake=lake),
        "flight": FlightEndpointResource(),
        IO_MANAGER_KEY: LakeIOManager(lake=lake),
    }


def executor(settings: DagsterSettings) -> dg.ExecutorDefinition:
    """The executor every run uses, from ``LAKE_DAGSTER_EXECUTOR``. In-process by default: a step
    process pays at least a fork and its own Lance runtime, which only pays off for big fan-outs.

    Multiprocess steps are forked from a forkserver that imported this code location and what
    a step's catalog needs once per run, where Dagster's default (spawn) started each step as a
    new interpreter importing all of it again (10 to 20 s of a step on a loaded 2-core machine).
    The forkserver runs no Lance itself, so forking it is safe; its children keep the
    environment it started in, which in a run worker is the run's."""
    limit = settings.max_concurrent_steps or (os.cpu_count() or 1)
    if settings.executor == "multiprocess":
        forkserver = {"preload_modules": list(STEP_PRELOAD)}
        return dg.multiprocess_executor.configured(
            {"max_concurrent": limit, "start_method": {"forkserver": forkserver}}
        )
    if settings.executor == "k8s_job":
        from dagster_k8s import k8s_job_executor

        return k8s_job_executor.configured({"max_concurrent": limit})
    if settings.executor == "ecs":
        from dagster_aws.ecs import ecs_executor

        return ecs_executor.configured({"max_concurrent": limit})
    return dg.in_process_executor


#: What the multiprocess executor's forkserver imports once per run, for every step it forks:
#: the code location (named, or Dagster preloads nothing of it); then what every step imports on
#: first use: the catalog and lance_namespace's REST client (~2 s of CPU), lance, pandas
#: (pyarrow's first pa.table loads it), and the instance's storage classes, which each step opens
#: (``DagsterInstance.from_ref``) before it starts: SQLAlchemy, Alembic and Dagster's storage, 2 s
#: of CPU a step (5 to 9 s at load 8 on 2 cores). ``dagster_postgres`` is the one public module
#: that imports them all, SQLite's (an instance without a storage block) among them, so it is
#: preloaded whichever storage the instance uses. Imports only: no storage opened, no Lance runtime.
STEP_PRELOAD = (
    __name__,
    "lake_platform.catalog.catalog",
    "lake_platform.catalog.namespace",
    "lance",
    "pandas",
    "dagster_postgres",
)


def step_io(settings: DagsterSettings) -> dict[str, object]:
    """Where step outputs (plans, task results: small) go: S3 when steps run on other machines."""
    if not settings.step_io:
        return {}
    from dagster_aws.s3 import S3PickleIOManager, S3Resource

    bucket, _, prefix = settings.step_io.removeprefix("s3://").partition("/")
    lake = load_settings()
    s3 = S3Resource(
        endpoint_url=lake.s3_endpoint or None,
        region_name=lake.s3_region or None,
        aws_access_key_id=lake.s3_access_key_id or None,
        aws_secret_access_key=lake.s3_secret_access_key or None,
    )
    return {"io_manager": S3PickleIOManager(s3_resource=s3, s3_bucket=bucket, s3_prefix=prefix or "dagster")}


def build(
    resource_overrides: dict[str, object] | None = None, settings: DagsterSettings | None = None
) -> dg.Definitions:
    settings = settings or dagster_settings()
    return dg.Definitions(
        assets=[
            ingested,
            expired_trash,
            orphan_folder_report,
            table_indexes,
            reclaimed_results,
            *demo_assets.ASSETS,
        ],
        asset_checks=[*checks.ALL, indexes_current, table_checks([demo_assets.orders])],
        jobs=[table_compaction_job, branch_compaction_job, table_cleanup_job, table_orphan_scan_job],
        sensors=[
            table_partitions_sensor,
            inbox_sensor,
            compaction_sensor,
            table_checks_sensor,
            cleanup_interval_sensor,
            orphan_scan_interval_sensor,
            bypass_sensor,
            table_observation_sensor,
            wap_publish_sensor,
        ],
        schedules=[
            orphan_folder_scan_schedule,
            trash_expiry_schedule,
            index_refresh_schedule,
            results_reclaim_schedule,
        ],
        resources={**resources(), **step_io(settings), **(resource_overrides or {})},
        executor=executor(settings),
    )


@dg.definitions
def defs() -> dg.Definitions:
    return build()
