"""Asset checks: the registry and the engine agree, compaction keeps up, no orphans."""


import warnings

import dagster as dg

from lake_platform.defs.ingest import ingested
from lake_platform.defs.maintenance import compacted, orphan_report
from lake_platform.defs.partitions import tables
from lake_platform.defs.resources import FlightEndpointResource, LakeResource

# Partitioned asset checks are marked "preview" in 1.13; they are what shows a check per table.
warnings.filterwarnings("ignore", category=dg.PreviewWarning, module="dagster._core.definitions.decorators.asset_check_decorator")


def _table(context: dg.AssetCheckExecutionContext) -> str:
    return context.op_execution_context.partition_key


@dg.asset_check(asset=ingested, partitions_def=tables, description=(
    "The registry's current version is a real engine version, and the table opens there."))
def registry_version_is_real(context: dg.AssetCheckExecutionContext, lake: LakeResource) -> dg.AssetCheckResult:
    from lake_platform.engine.lance_engine import versions_on_disk

    table = _table(context)
    with lake.catalog() as catalog:
        snap = catalog.open_table(table)
        record = snap.record
        on_disk = versions_on_disk(record.location, catalog.settings.storage_options(record.location))
        opened_at = int(snap.dataset.version)
        rows = snap.count_rows()
    ok = opened_at == record.current_version and record.current_version in on_disk
    return dg.AssetCheckResult(passed=ok, metadata={
        "registered_version": record.current_version, "opened_version": opened_at, "rows": rows,
        "newest_on_disk": max(on_disk) if on_disk else 0})


@dg.asset_check(asset=ingested, partitions_def=tables, description=(
    "The registry holds the schema (Arrow IPC) and it equals the engine's schema at the current version."))
def schema_matches_engine(context: dg.AssetCheckExecutionContext, lake: LakeResource) -> dg.AssetCheckResult:
    from lake_platform.catalog.arrow_io import schema_from_ipc

    table = _table(context)
    with lake.catalog() as catalog:
        snap = catalog.open_table(table)
        ipc = snap.record.schema_ipc
        engine_schema = snap.schema
    if not ipc:
        return dg.AssetCheckResult(passed=False, metadata={"problem": "no schema in the registry"})
    registered = schema_from_ipc(ipc)
    ok = registered.remove_metadata().equals(engine_schema.remove_metadata())
    return dg.AssetCheckResult(passed=ok, metadata={"registry": str(registered), "engine": str(engine_schema)})


@dg.asset_check(asset=compacted, partitions_def=tables, description=(
    "The fragment count is under the policy's compaction threshold."))
def fragments_under_threshold(context: dg.AssetCheckExecutionContext, lake: LakeResource) -> dg.AssetCheckResult:
    table = _table(context)
    with lake.catalog() as catalog:
        policy = catalog.effective_policy(table)
        fragments = catalog.describe_table(table).fragments or 0
    threshold = policy.policy.compact_min_fragments
    ok = fragments < threshold or not policy.policy.compact_enabled
    return dg.AssetCheckResult(passed=ok, severity=dg.AssetCheckSeverity.WARN, metadata={
        "fragments": fragments, "threshold": threshold, "compact_enabled": policy.policy.compact_enabled,
        "policy_source": policy.source or "(platform defaults)"})


@dg.asset_check(asset=orphan_report, partitions_def=tables, description="The table's last orphan report is empty.")
def last_orphan_report_empty(context: dg.AssetCheckExecutionContext, lake: LakeResource) -> dg.AssetCheckResult:
    from lake_platform.maintenance.orphans import latest_report

    table = _table(context)
    with lake.catalog() as catalog:
        report = latest_report(catalog, table)
    if report is None:
        return dg.AssetCheckResult(passed=True, metadata={"report": "none yet"})
    return dg.AssetCheckResult(passed=report.empty, severity=dg.AssetCheckSeverity.WARN, metadata={
        "orphans": report.orphan_count, "orphan_bytes": report.orphan_bytes, "at_ms": report.at_ms})


@dg.asset_check(asset=ingested, partitions_def=tables, description=(
    "The Flight SQL endpoint analysts query answers its health action (address and snapshot age shown)."))
def flight_endpoint_healthy(context: dg.AssetCheckExecutionContext, flight: FlightEndpointResource) -> dg.AssetCheckResult:
    report = flight.health()
    snapshot = report.get("snapshot") or {}
    return dg.AssetCheckResult(
        passed=report.get("status") == "ok", severity=dg.AssetCheckSeverity.WARN,
        metadata={"address": report.get("address", ""), "status": report.get("status", ""),
                  "snapshot_age_seconds": float(snapshot.get("age_seconds") or -1) if isinstance(snapshot, dict) else -1.0,
                  "error": report.get("error", "")})


ALL = [registry_version_is_real, schema_matches_engine, fragments_under_threshold, last_orphan_report_empty,
       flight_endpoint_healthy]
