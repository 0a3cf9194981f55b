"""Version cleanup and orphan scans requested when the interval of the table's own scope's policy
has elapsed since its last run, wherever that run came from."""

from __future__ import annotations

from datetime import timedelta

import dagster as dg
import pytest

from lake_platform.catalog.policies import parse_assignments
from lake_platform.defs.definitions import defs
from lake_platform.defs.maintenance import table_cleanup_job
from lake_platform.defs.maintenance_intervals import (
    CLEANUP,
    ORPHAN_SCAN,
    cleanup_interval_sensor,
    due_runs,
)
from lake_platform.defs.partitions import TABLES
from lake_platform.defs.resources import LakeResource
from lake_platform.maintenance import orphans
from lake_platform_tests.dagster_storage import sqlite_instance
from lake_platform_tests.defs.conftest import TABLE, Lake
from lake_platform_tests.maintenance.helpers import rows

COLD = "p.w.cold.t"
HOUR_MS = 3_600_000
DAY_MS = 24 * HOUR_MS


def requested(result: dg.SensorResult) -> list[str]:
    return sorted(r.partition_key for r in result.run_requests or [])


def created_ms(lake: Lake, table: str) -> int:
    return next(r.created_at_ms for r in lake.catalog.reads.list_tables() if r.name == table)


def test_each_table_is_maintained_at_its_own_scopes_interval(lake: Lake) -> None:
    lake.catalog.containers.create_namespace("p.w.cold")
    lake.catalog.tables.create_table(COLD, rows(0, 3).to_reader())
    lake.catalog.policies.set_policy(
        "p.w.ns", parse_assignments(["cleanup_interval=1h", "orphan_scan_interval=2h"])
    )
    start = max(created_ms(lake, TABLE), created_ms(lake, COLD))
    with sqlite_instance() as instance:
        fresh = due_runs(CLEANUP, lake.catalog, instance, None, start)
        assert fresh.run_requests == [] and "next in" in str(fresh.skip_reason.skip_message)

        hot = due_runs(CLEANUP, lake.catalog, instance, None, start + HOUR_MS)
        assert requested(hot) == [TABLE]  # the cold table keeps the default day
        (request,) = hot.run_requests
        assert request.job_name == "table_cleanup"
        assert request.run_key.startswith(f"cleanup:{TABLE}:")
        assert hot.dynamic_partitions_requests[0].partition_keys == [TABLE]
        assert requested(due_runs(CLEANUP, lake.catalog, instance, None, start + DAY_MS)) == [COLD, TABLE]

        # The orphan scan follows its own interval: the namespace's 2h, the defaults' 7 days.
        assert requested(due_runs(ORPHAN_SCAN, lake.catalog, instance, None, start + HOUR_MS)) == []
        scan = due_runs(ORPHAN_SCAN, lake.catalog, instance, None, start + 2 * HOUR_MS)
        assert requested(scan) == [TABLE] and scan.run_requests[0].job_name == "table_orphan_scan"

        # The request runs on the instance; its successful run restarts the table's clock (a
        # cleanup with nothing to remove commits nothing to the registry).
        instance.add_dynamic_partitions(TABLES, [TABLE])
        result = table_cleanup_job.execute_in_process(
            partition_key=TABLE, instance=instance, resources=lake.resources, tags=request.tags
        )
        assert result.success
        assert not any(e.operation == "cleanup" for e in lake.catalog.reads.history(TABLE))
        ended = instance.get_run_record_by_id(result.run_id).end_time
        ran = int(ended * 1000)
        assert ran > created_ms(lake, TABLE)
        assert requested(due_runs(CLEANUP, lake.catalog, instance, None, int(ran) + HOUR_MS - 1)) == []
        assert requested(due_runs(CLEANUP, lake.catalog, instance, None, int(ran) + HOUR_MS + 1)) == [TABLE]


def test_a_run_outside_dagster_counts_through_the_registrys_commit_log(
    lake: Lake, monkeypatch: pytest.MonkeyPatch
) -> None:
    lake.catalog.policies.set_policy(TABLE, parse_assignments(["cleanup_interval=1h"]))
    for start in (10, 20):
        lake.catalog.tables.append(TABLE, rows(start, 5).to_reader())
    # lake cleanup / lake orphans scan, say: no Dagster run, only the registry knows. Versions
    # go only once out of the ticket lifetime.
    monkeypatch.setenv("LAKE_TICKET_LIFETIME_SECONDS", "0.001")
    monkeypatch.setenv("LAKE_READER_MAX_STALE_SECONDS", "0")
    with LakeResource(home=str(lake.home)).catalog() as catalog:
        cleaned = catalog.versions.cleanup(TABLE, retention=timedelta(0), retain_versions=1)
    assert cleaned.status != "nothing-to-do"
    key = orphans.commit_report(lake.catalog, orphans.scan(lake.catalog, TABLE))
    scanned = orphans.latest_report(lake.catalog, TABLE)
    assert key and scanned is not None
    cleaned_at = next(
        e.at_ms for e in reversed(lake.catalog.reads.history(TABLE)) if e.operation == "cleanup"
    )
    created = created_ms(lake, TABLE)
    assert cleaned_at > created and scanned.at_ms > created
    with sqlite_instance() as instance:
        assert requested(due_runs(CLEANUP, lake.catalog, instance, None, cleaned_at + HOUR_MS - 1)) == []
        assert requested(due_runs(CLEANUP, lake.catalog, instance, None, cleaned_at + HOUR_MS)) == [TABLE]
        week = 7 * DAY_MS
        assert requested(due_runs(ORPHAN_SCAN, lake.catalog, instance, None, scanned.at_ms + week - 1)) == []
        assert requested(due_runs(ORPHAN_SCAN, lake.catalog, instance, None, scanned.at_ms + week)) == [TABLE]


def test_the_cursor_skips_tables_not_due_and_follows_a_shorter_interval_within_a_recheck(lake: Lake) -> None:
    start = created_ms(lake, TABLE)
    with sqlite_instance() as instance:
        first = due_runs(CLEANUP, lake.catalog, instance, None, start)
        assert requested(first) == []
        # The default day: the next look is within the recheck, not at every tick.
        quiet = due_runs(CLEANUP, lake.catalog, instance, first.cursor, start + 60_000)
        assert quiet.skip_reason is not None and "no table due" in str(quiet.skip_reason.skip_message)
        lake.catalog.policies.set_policy(TABLE, parse_assignments(["cleanup_interval=10m"]))
        later = due_runs(CLEANUP, lake.catalog, instance, quiet.cursor, start + 15 * 60_000)
        assert requested(later) == [TABLE]


def test_the_sensors_tick_on_the_instance_in_place_of_the_schedules(lake: Lake) -> None:
    loaded = defs()
    assert {"cleanup_interval_sensor", "orphan_scan_interval_sensor"} <= {
        s.name for s in loaded.sensors or []
    }
    assert not {"version_cleanup_schedule", "orphan_scan_schedule"} & {s.name for s in loaded.schedules or []}
    with sqlite_instance() as instance:
        with dg.build_sensor_context(instance=instance, resources=lake.resources) as ctx:
            result = cleanup_interval_sensor(ctx)
    assert isinstance(result, dg.SensorResult)
    assert result.run_requests == [] and TABLE in str(result.skip_reason.skip_message)
    assert TABLE in (result.cursor or "")
