"""Maintenance assets, sensors, schedules and checks, in process on a real Dagster instance."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import dagster as dg
import pytest

from lake_platform.defs import checks
from lake_platform.defs.maintenance import (
    cleaned_versions,
    compacted,
    compaction_sensor,
    expired_trash,
    orphan_report,
)
from lake_platform.defs.partitions import TABLES
from lake_platform.defs.tables import table_partitions_sensor
from lake_platform.errors import LakeError
from lake_platform.maintenance import orphans
from lake_platform_tests.defs.conftest import TABLE, Lake
from lake_platform_tests.maintenance.helpers import rows


def meta(result: dg.ExecuteInProcessResult, node: str) -> dict[str, object]:
    return {k: v.value for k, v in result.asset_materializations_for_node(node)[0].metadata.items()}


def sensor_tick(
    sensor: dg.SensorDefinition, instance: dg.DagsterInstance, lake: Lake, cursor: str | None = None
) -> dg.SensorResult:
    with dg.build_sensor_context(instance=instance, cursor=cursor, resources=lake.resources) as ctx:
        result = sensor(ctx)
    assert isinstance(result, dg.SensorResult)
    return result


def test_partitions_follow_the_registry(lake: Lake) -> None:
    with dg.instance_for_test() as instance:
        lake.catalog.tables.create_table("p.w.ns.t2", rows(0, 1).to_reader())
        result = sensor_tick(table_partitions_sensor, instance, lake)
        assert [r.partition_keys for r in result.dynamic_partitions_requests] == [[TABLE, "p.w.ns.t2"]]
        instance.add_dynamic_partitions(TABLES, [TABLE, "p.w.ns.t2"])
        run = dg.materialize(
            [orphan_report], partition_key="p.w.ns.t2", instance=instance, resources=lake.resources
        )
        assert sensor_tick(table_partitions_sensor, instance, lake).skip_reason is not None
        lake.catalog.trash.drop_table("p.w.ns.t2", purge=True)
        result = sensor_tick(table_partitions_sensor, instance, lake)
        assert [(type(r).__name__, r.partition_keys) for r in result.dynamic_partitions_requests] == [
            ("DeleteDynamicPartitionsRequest", ["p.w.ns.t2"])
        ]
        instance.delete_dynamic_partition(TABLES, "p.w.ns.t2")
        assert instance.get_run_record_by_id(run.run_id) is not None  # history stays


def test_compaction_is_triggered_by_the_fragment_count(instance, lake: Lake) -> None:
    lake.catalog.policies.set_policy(TABLE, {"compact_min_fragments": 4})
    lake.catalog.tables.append(TABLE, rows(100, 5).to_reader())
    lake.catalog.tables.append(TABLE, rows(200, 5).to_reader())  # 3 fragments: below the threshold
    first = sensor_tick(compaction_sensor, instance, lake)
    assert not first.run_requests and "below the threshold of 4" in str(first.skip_reason)
    lake.catalog.tables.append(TABLE, rows(300, 5).to_reader())  # 4: due
    second = sensor_tick(compaction_sensor, instance, lake, first.cursor)
    assert [r.partition_key for r in second.run_requests] == [TABLE]
    request = second.run_requests[0]
    result = dg.materialize(
        [compacted, checks.fragments_under_threshold],
        partition_key=TABLE,
        instance=instance,
        resources=lake.resources,
        tags=request.tags,
    )
    m = meta(result, "compacted")
    assert m["status"] == "committed" and m["fragments_before"] == 4 and m["fragments_after"] == 1
    assert m["version"] == lake.catalog.reads.open_table(TABLE).version
    assert [e.passed for e in result.get_asset_check_evaluations()] == [True]
    assert lake.catalog.reads.open_table(TABLE).count_rows() == 25
    third = sensor_tick(compaction_sensor, instance, lake, second.cursor)
    assert not third.run_requests
    # A manual run below the threshold reports "nothing to do".
    again = dg.materialize([compacted], partition_key=TABLE, instance=instance, resources=lake.resources)
    assert meta(again, "compacted")["status"] == "nothing to do"


def test_compaction_disabled_by_policy(instance, lake: Lake) -> None:
    lake.catalog.policies.set_policy(TABLE, {"compact_min_fragments": 2, "compact_enabled": False})
    lake.catalog.tables.append(TABLE, rows(100, 5).to_reader())
    result = sensor_tick(compaction_sensor, instance, lake)
    assert not result.run_requests and "disabled by policy" in str(result.skip_reason)


def test_cleanup_applies_retention_and_never_removes_a_tag(
    instance, lake: Lake, monkeypatch: pytest.MonkeyPatch
) -> None:
    for i in range(4):
        lake.catalog.tables.append(TABLE, rows(100 * (i + 1), 5).to_reader())  # versions 2..5
    lake.catalog.tags.create_tag(TABLE, "keep", 2)
    lake.catalog.policies.set_policy(TABLE, {"retain_versions": 1, "retention_seconds": 0})
    # Inside the ticket lifetime (1h by default) nothing goes, whatever the policy says.
    first = dg.materialize(
        [cleaned_versions], partition_key=TABLE, instance=instance, resources=lake.resources
    )
    assert meta(first, "cleaned_versions")["status"] == "nothing to do"
    monkeypatch.setenv("LAKE_TICKET_LIFETIME_SECONDS", "0.001")
    monkeypatch.setenv("LAKE_READER_MAX_STALE_SECONDS", "0")
    second = dg.materialize(
        [cleaned_versions], partition_key=TABLE, instance=instance, resources=lake.resources
    )
    m = meta(second, "cleaned_versions")
    assert m["status"] == "committed" and m["removed"] == [1, 3, 4] and m["tagged_kept"] == [2]
    assert lake.catalog.reads.open_table(TABLE, 2).count_rows() == 15
    assert lake.catalog.reads.open_table(TABLE).count_rows() == 30


def test_trash_expiry_purges_expired_records_and_races_undrop(instance, lake: Lake) -> None:
    catalog = lake.catalog
    catalog.policies.set_policy("p.w.ns", {"trash_grace_seconds": 1})
    for name in ("p.w.ns.gone", "p.w.ns.raced"):
        catalog.tables.create_table(name, rows(0, 3).to_reader())
        catalog.trash.drop_table(name)
    time.sleep(1.2)
    outcome: dict[str, object] = {}
    start = threading.Barrier(2)

    def undrop() -> None:
        start.wait()
        try:
            outcome["undrop"] = catalog.trash.undrop_table("p.w.ns.raced")
        except LakeError as exc:
            outcome["undrop"] = exc

    racer = threading.Thread(target=undrop)
    racer.start()
    start.wait()
    result = dg.materialize([expired_trash], instance=instance, resources=lake.resources)
    racer.join()
    m = meta(result, "expired_trash")
    purged = {t["table"] for t in m["tables"]}  # type: ignore[union-attr]
    assert "p.w.ns.gone" in purged
    if isinstance(outcome["undrop"], LakeError):  # expiry won: the data is gone for good
        assert "p.w.ns.raced" in purged
        assert not any(t.name == "p.w.ns.raced" for t in catalog.reads.list_tables())
    else:  # undrop won: the table is back and was not purged
        assert "p.w.ns.raced" not in purged
        assert catalog.reads.open_table("p.w.ns.raced").count_rows() == 3
    assert all(
        e.operation in ("drop", "purge", "undrop")
        for e in catalog.reads.history("p.w.ns.gone")
        if e.operation not in ("create",)
    )


def test_orphan_report_asset_commits_a_report(instance, lake: Lake) -> None:
    result = dg.materialize(
        [orphan_report, checks.last_orphan_report_empty],
        partition_key=TABLE,
        instance=instance,
        resources=lake.resources,
    )
    m = meta(result, "orphan_report")
    assert (
        m["orphans"] == 0
        and m["files_scanned"] > 0
        and str(m["report_key"]).startswith("rpt/orphans/p.w.ns.t/")
    )
    assert [e.passed for e in result.get_asset_check_evaluations()] == [True]
    assert any(e.operation == "orphan-scan" for e in lake.catalog.reads.history(TABLE))
    # The listing was split: one step per top-level folder of the table, plus its root files.
    location = lake.catalog.reads.open_table(TABLE).record.location.removeprefix("file://")
    folders = sorted(p.name for p in Path(location).iterdir() if p.is_dir())
    done = {
        e.step_key
        for e in result.all_events
        if e.event_type == dg.DagsterEventType.STEP_SUCCESS and "orphan_scan_chunk" in (e.step_key or "")
    }
    assert len(done) == len(folders) + 1 == m["chunks"] and len(folders) >= 3
    # The same figures as a scan in one process.
    whole = orphans.scan(lake.catalog, TABLE)
    assert (m["files_scanned"], m["files_live"], m["files_unknown"]) == (
        whole.files_scanned,
        whole.files_live,
        whole.files_unknown,
    )


def test_a_chunked_scan_finds_the_orphans_a_whole_scan_finds(lake: Lake) -> None:
    lake.catalog.tables.append(TABLE, rows(100, 5).to_reader())
    location = Path(lake.catalog.reads.open_table(TABLE).record.location.removeprefix("file://"))
    old = time.time() - 7 * 24 * 3600
    for rel in ("data/stray.lance", "_versions/leftover.bin", "_transactions/x.txn", "stray-at-root.txt"):
        (location / rel).write_bytes(b"x" * 10)
        os.utime(location / rel, (old, old))
    gate = orphans.age_gate(lake.catalog, TABLE)
    live = orphans.live_set(lake.catalog, TABLE)
    now = time.time()
    parts = [
        orphans.classify_chunk(lake.catalog, live, c, gate, now) for c in orphans.chunks(lake.catalog, live)
    ]
    chunked = orphans.merge(live, parts, gate, now).report
    whole = orphans.scan(lake.catalog, TABLE, now=now)
    assert (
        [o.path for o in chunked.orphans]
        == [o.path for o in whole.orphans]
        == [
            "_transactions/x.txn",
            "_versions/leftover.bin",
            "data/stray.lance",
        ]
    )
    assert chunked.files_unknown == whole.files_unknown == 1  # the root file: counted, never reported
    assert chunked.files_scanned == whole.files_scanned


def test_compaction_follows_ingest_materializations(
    instance, lake: Lake, monkeypatch: pytest.MonkeyPatch
) -> None:
    from lake_platform.defs import maintenance
    from lake_platform.defs.ingest import ingested

    monkeypatch.setattr(maintenance, "SWEEP_PER_TICK", 0)  # only what ingests touched
    lake.catalog.policies.set_policy(TABLE, {"compact_min_fragments": 2})
    first = sensor_tick(compaction_sensor, instance, lake)
    assert not first.run_requests
    landed = lake.inbox.put("p/w/ns/t/a.csv", b"id,name\n500,x\n")
    config = {
        "ops": {
            "ingested": {
                "config": {"files": [{"key": landed.key, "size": landed.size, "mtime_ns": landed.mtime_ns}]}
            }
        }
    }
    dg.materialize(
        [ingested], partition_key=TABLE, instance=instance, resources=lake.resources, run_config=config
    )
    second = sensor_tick(compaction_sensor, instance, lake, first.cursor)
    assert [r.partition_key for r in second.run_requests] == [TABLE]
    assert (
        second.run_requests[0].run_key == f"compact:{TABLE}:v{lake.catalog.reads.open_table(TABLE).version}"
    )
    third = sensor_tick(compaction_sensor, instance, lake, second.cursor)  # the event was consumed
    assert not third.run_requests


def test_a_forced_compaction_ignores_the_threshold(instance, lake: Lake) -> None:
    lake.catalog.policies.set_policy(TABLE, {"compact_min_fragments": 10})
    lake.catalog.tables.append(TABLE, rows(100, 5).to_reader())
    lake.catalog.tables.append(TABLE, rows(200, 5).to_reader())
    force = {"ops": {"compacted": {"ops": {"compaction_plan": {"config": {"force": True}}}}}}
    result = dg.materialize(
        [compacted], partition_key=TABLE, instance=instance, resources=lake.resources, run_config=force
    )
    m = meta(result, "compacted")
    assert m["status"] == "committed" and m["fragments_before"] == 3 and m["fragments_after"] == 1
    assert lake.catalog.reads.open_table(TABLE).count_rows() == 20
