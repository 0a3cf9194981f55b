"""A table's health checks on its own asset key, on a real Dagster instance: reported by the
sensor (as the daemon stores a sensor's events), by the maintenance runs, and run as declared
checks of a table spec."""

from pathlib import Path

import dagster as dg

from lake_platform.catalog.policies import parse_assignments
from lake_platform.defs import table_checks
from lake_platform.defs.io_manager import LakeIOManager
from lake_platform.defs.maintenance import table_cleanup_job, table_compaction_job, table_orphan_scan_job
from lake_platform.defs.partitions import TABLES
from lake_platform.defs.resources import LakeResource
from lake_platform.defs.table_assets import table_specs
from lake_platform.naming import TableName
from lake_platform.registry import keys
from lake_platform.registry.records import TableRecord, decode
from lake_platform_tests.defs.conftest import TABLE, Lake
from lake_platform_tests.maintenance.helpers import age_tree, rows

KEY = dg.AssetKey(TABLE.split("."))
WARN, ERROR = dg.AssetCheckSeverity.WARN, dg.AssetCheckSeverity.ERROR
HOUR_MS = 3_600_000


def tick(instance: dg.DagsterInstance, lake: Lake, cursor: str | None = None) -> dg.SensorResult:
    with dg.build_sensor_context(instance=instance, cursor=cursor, resources=lake.resources) as ctx:
        result = table_checks.table_checks_sensor(ctx)
    assert isinstance(result, dg.SensorResult)
    for event in result.asset_events:
        instance.report_runless_asset_event(event)  # what the daemon does with a sensor's events
    return result


def latest(instance: dg.DagsterInstance, check: str) -> tuple[dg.AssetCheckEvaluation, str]:
    """The check's newest evaluation stored on the table's asset, and the run it came from."""
    record = instance.get_latest_asset_check_evaluation_record(dg.AssetCheckKey(KEY, check))
    assert record is not None and record.event is not None
    evaluation = record.event.get_dagster_event().event_specific_data
    assert isinstance(evaluation, dg.AssetCheckEvaluation)
    return evaluation, record.run_id


def run(job: dg.JobDefinition, instance: dg.DagsterInstance, lake: Lake) -> dg.ExecuteInProcessResult:
    result = job.execute_in_process(partition_key=TABLE, instance=instance, resources=lake.resources)
    assert result.success
    return result


def test_a_table_over_its_threshold_warns_on_its_asset_and_passes_once_compacted(
    instance: dg.DagsterInstance, lake: Lake
) -> None:
    lake.catalog.policies.set_policy(TABLE, {"compact_min_fragments": 3})
    for start in (10, 20):
        lake.catalog.tables.append(TABLE, rows(start, 5).to_reader())
    first = tick(instance, lake)
    assert {(e.asset_key, e.check_name) for e in first.asset_events} == {
        (KEY, check) for check in table_checks.CHECKS
    }
    fragments, _ = latest(instance, "fragments_under_threshold")
    assert not fragments.passed and fragments.severity == WARN
    assert "main has 3 fragments: at or above the compaction threshold of 3" in fragments.description
    assert "table_compaction" in fragments.description
    for check in ("versions_within_retention", "no_orphans", "schema_registered"):
        assert latest(instance, check)[0].passed, check

    compacted = run(table_compaction_job, instance, lake)
    after, run_id = latest(instance, "fragments_under_threshold")
    assert after.passed and run_id == compacted.run_id  # the compaction run's own evaluation
    assert "1 fragments, under the compaction threshold of 3" in after.description
    moved = tick(instance, lake, first.cursor)  # the table moved: evaluated again, still passing
    assert any(e.check_name == "fragments_under_threshold" and e.passed for e in moved.asset_events)
    assert latest(instance, "fragments_under_threshold")[0].passed


def test_a_branch_over_the_threshold_fails_the_fragments_check(lake: Lake) -> None:
    lake.catalog.policies.set_policy(TABLE, {"compact_min_fragments": 3})
    lake.catalog.branches.create_branch(TABLE, "dev")
    for start in (10, 20):
        lake.catalog.branch_writes.append(TABLE, "dev", rows(start, 5).to_reader())
    verdict = table_checks.fragments_verdict(lake.catalog, TABLE)
    assert not verdict.passed and verdict.severity == WARN
    assert "branch dev has 3" in verdict.description and "main has" not in verdict.description


def test_the_orphan_check_fails_on_an_unknown_lance_branch(instance: dg.DagsterInstance, lake: Lake) -> None:
    from lake_platform.engine import branches as engine_branches

    record = lake.catalog.reads.open_table(TABLE).record
    root = Path(record.location.removeprefix("file://"))
    engine_branches.create_branch(str(root), "crash-0123456789ab", record.current_version)
    age_tree(root, 30 * 86400)  # older than the default 7-day gate: a killed create's leftovers
    result = run(table_orphan_scan_job, instance, lake)
    orphans, run_id = latest(instance, "no_orphans")
    assert run_id == result.run_id
    assert not orphans.passed and orphans.severity == WARN
    assert "1 Lance branch(es) no registry record names" in orphans.description
    assert "crash-0123456789ab" in orphans.description and "lake orphans reclaim" in orphans.description
    assert orphans.metadata["unknown_branches"].value == ["crash-0123456789ab"]
    assert (root / "tree" / "crash-0123456789ab").exists()  # reports only
    # The sensor reads the same committed report.
    tick(instance, lake)
    assert not latest(instance, "no_orphans")[0].passed


def test_versions_beyond_retain_versions_warn_once_cleanup_is_overdue(
    instance: dg.DagsterInstance, lake: Lake
) -> None:
    lake.catalog.policies.set_policy(TABLE, parse_assignments(["retain_versions=1", "cleanup_interval=1h"]))
    for start in (10, 20):
        lake.catalog.tables.append(TABLE, rows(start, 5).to_reader())
    created = lake.catalog.reads.describe_table(TABLE, with_stats=False).created_at_ms
    fresh = table_checks.versions_verdict(lake.catalog, instance, TABLE, created + HOUR_MS - 1)
    assert fresh.passed and "2 version(s) beyond retain_versions=1 wait" in fresh.description
    overdue = table_checks.versions_verdict(lake.catalog, instance, TABLE, created + 2 * HOUR_MS)
    assert not overdue.passed and overdue.severity == WARN
    assert "due for cleanup" in overdue.description and "table_cleanup" in overdue.description

    # A cleanup run inside the ticket lifetime removes nothing, and still counts as a cleanup.
    cleaned = run(table_cleanup_job, instance, lake)
    after, run_id = latest(instance, "versions_within_retention")
    assert after.passed and run_id == cleaned.run_id
    ended = int(instance.get_run_record_by_id(cleaned.run_id).end_time * 1000)
    assert table_checks.versions_verdict(lake.catalog, instance, TABLE, ended + HOUR_MS - 1).passed
    assert not table_checks.versions_verdict(lake.catalog, instance, TABLE, ended + HOUR_MS + 1).passed


def test_a_table_whose_schema_the_registry_lost_fails_with_error(lake: Lake) -> None:
    key = keys.table(TableName.parse(TABLE))
    item = lake.catalog.store.get(key)
    assert item is not None
    record = decode(TableRecord, item.value, key).model_copy(update={"schema_ipc_b64": ""})
    lake.catalog.store.compare_and_swap(key, item.revision, record.encode())
    with LakeResource(home=str(lake.home)).catalog() as catalog:
        verdict = table_checks.schema_verdict(catalog, TABLE)
    assert not verdict.passed and verdict.severity == ERROR
    assert "the registry holds no schema for p.w.ns.t" in verdict.description


def test_a_declared_tables_checks_are_listed_on_its_asset_and_run_from_the_registry(
    instance: dg.DagsterInstance, lake: Lake
) -> None:
    (spec,) = table_specs([TABLE])
    declared = table_checks.table_checks([spec])
    assert set(declared.check_keys) == {dg.AssetCheckKey(KEY, check) for check in table_checks.CHECKS}
    job = dg.define_asset_job("health", selection=dg.AssetSelection.checks(declared))
    resources = {**lake.resources, "lake_io": LakeIOManager(lake=lake.resources["lake"])}
    defs = dg.Definitions(assets=[spec], asset_checks=[declared], jobs=[job], resources=resources)
    instance.add_dynamic_partitions(TABLES, [TABLE])
    result = defs.resolve_job_def("health").execute_in_process(instance=instance)
    assert result.success
    found = {e.check_name: e.passed for e in result.get_asset_check_evaluations()}
    assert found == dict.fromkeys(table_checks.CHECKS, True)
