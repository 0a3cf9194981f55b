"""Maintenance jobs over a table's asset, platform assets, and sensors, in process on a real
Dagster instance."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import dagster as dg
import pytest

from lake_platform.defs.maintenance import (
    expired_trash,
    table_cleanup_job,
    table_compaction_job,
    table_orphan_scan_job,
)
from lake_platform.defs.partitions import TABLES
from lake_platform.defs.table_maintenance import compaction_sensor
from lake_platform.defs.tables import table_partitions_sensor
from lake_platform.errors import LakeError
from lake_platform.maintenance import orphans
from lake_platform.registry import keys
from lake_platform.registry.records import TrashRecord, decode
from lake_platform_tests.catalog.test_transaction import make_tables
from lake_platform_tests.catalog.test_transaction_chunks import SOME, transaction_records
from lake_platform_tests.catalog.test_transaction_recovery import stopped_commit
from lake_platform_tests.dagster_storage import sqlite_instance
from lake_platform_tests.defs.conftest import TABLE, Lake
from lake_platform_tests.maintenance.helpers import rows
from lake_platform_tests.maintenance.test_orphans_adopted import adopt

KEY = dg.AssetKey(TABLE.split("."))


def meta(result: dg.ExecuteInProcessResult, node: str) -> dict[str, object]:
    return {k: v.value for k, v in result.asset_materializations_for_node(node)[0].metadata.items()}


def run(
    job: dg.JobDefinition, instance: dg.DagsterInstance, lake: Lake, **kwargs: object
) -> dg.ExecuteInProcessResult:
    return job.execute_in_process(
        partition_key=TABLE,
        instance=instance,
        resources=lake.resources,
        **kwargs,  # type: ignore[arg-type]
    )


def observed(result: dg.ExecuteInProcessResult) -> dict[str, object]:
    """What the run recorded on the table's asset: its one observation's metadata."""
    (event,) = [e for e in result.get_asset_observation_events() if e.asset_key == KEY]
    return {k: v.value for k, v in event.asset_observation_data.asset_observation.metadata.items()}


def checked(result: dg.ExecuteInProcessResult) -> dict[str, bool]:
    return {e.check_name: e.passed for e in result.get_asset_check_evaluations() if e.asset_key == KEY}


def sensor_tick(
    sensor: dg.SensorDefinition, instance: dg.DagsterInstance, lake: Lake, cursor: str | None = None
) -> dg.SensorResult:
    with dg.build_sensor_context(instance=instance, cursor=cursor, resources=lake.resources) as ctx:
        result = sensor(ctx)
    assert isinstance(result, dg.SensorResult)
    return result


def test_partitions_follow_the_registry(lake: Lake) -> None:
    with sqlite_instance() as instance:
        lake.catalog.tables.create_table("p.w.ns.t2", rows(0, 1).to_reader())
        result = sensor_tick(table_partitions_sensor, instance, lake)
        assert [r.partition_keys for r in result.dynamic_partitions_requests] == [[TABLE, "p.w.ns.t2"]]
        instance.add_dynamic_partitions(TABLES, [TABLE, "p.w.ns.t2"])
        run = table_orphan_scan_job.execute_in_process(
            partition_key="p.w.ns.t2", instance=instance, resources=lake.resources
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
    assert request.job_name == "table_compaction"
    result = run(table_compaction_job, instance, lake, tags=request.tags)
    m = observed(result)
    assert m["status"] == "committed" and m["fragments_before"] == 4 and m["fragments_after"] == 1
    assert m["lake/version"] == lake.catalog.reads.open_table(TABLE).version
    assert m["lake/operation"] == "compact" and m["dagster/row_count"] == 25
    compactions = [e for e in lake.catalog.reads.history(TABLE) if e.operation == "compact"]
    assert [e.commit_id for e in compactions] == [m["lake/commit_id"]]
    assert checked(result) == {"fragments_under_threshold": True}
    assert lake.catalog.reads.open_table(TABLE).count_rows() == 25
    third = sensor_tick(compaction_sensor, instance, lake, second.cursor)
    assert not third.run_requests
    # A manual run below the threshold reports "nothing to do", and commits nothing.
    again = run(table_compaction_job, instance, lake)
    assert observed(again)["status"] == "nothing to do"
    assert [e.operation for e in lake.catalog.reads.history(TABLE)].count("compact") == 1


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
    first = run(table_cleanup_job, instance, lake)
    assert observed(first)["status"] == "nothing to do"
    assert checked(first) == {"versions_within_retention": True}  # just cleaned
    monkeypatch.setenv("LAKE_TICKET_LIFETIME_SECONDS", "0.001")
    monkeypatch.setenv("LAKE_READER_MAX_STALE_SECONDS", "0")
    second = run(table_cleanup_job, instance, lake)
    m = observed(second)
    assert m["status"] == "committed" and m["removed"] == [1, 3, 4] and m["tagged_kept"] == [2]
    assert m["lake/operation"] == "cleanup" and m["lake/version"] == 5
    assert [e.commit_id for e in lake.catalog.reads.history(TABLE) if e.operation == "cleanup"] == [
        m["lake/commit_id"]
    ]
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


def test_trash_expiry_resolves_a_dead_writers_transaction_record_past_its_deadline(
    instance, lake: Lake
) -> None:
    catalog = lake.catalog
    names = make_tables(catalog, SOME)
    stopped_commit(catalog, names, "transaction:recorded")  # the record put, nothing registered
    (record,) = transaction_records(catalog)
    item = catalog.store.get(keys.transaction(record.txn_id))
    assert item is not None
    catalog.store.compare_and_swap(
        item.key, item.revision, record.model_copy(update={"deadline_ms": 0}).encode()
    )
    result = dg.materialize([expired_trash], instance=instance, resources=lake.resources)
    assert meta(result, "expired_trash")["transactions_resolved"] == 1
    assert transaction_records(catalog) == []


def test_a_refused_trash_record_fails_the_run_after_the_rest_of_the_maintenance(instance, lake: Lake) -> None:
    # The purge refused (folder_claims) raised out of expire_trash before sweep_transactions
    # ran: one refused record stopped every run's transaction sweep.
    catalog = lake.catalog
    names = make_tables(catalog, SOME)
    stopped_commit(catalog, names, "transaction:recorded")
    (record,) = transaction_records(catalog)
    item = catalog.store.get(keys.transaction(record.txn_id))
    assert item is not None
    catalog.store.compare_and_swap(
        item.key, item.revision, record.model_copy(update={"deadline_ms": 0}).encode()
    )
    adopt(catalog, "p.w.ns.adopted", "ns2")
    catalog.containers.create_namespace("p.w.ns2")
    catalog.tables.create_table("p.w.ns2.inside", rows(0, 2).to_reader())
    catalog.trash.drop_table("p.w.ns.adopted")
    (trashed,) = catalog.store.scan_prefix(keys.trash_prefix("p.w.ns.adopted/"))
    due = decode(TrashRecord, trashed.value, trashed.key).model_copy(update={"expires_at_ms": 0})
    catalog.store.compare_and_swap(trashed.key, trashed.revision, due.encode())
    result = dg.materialize(
        [expired_trash], instance=instance, resources=lake.resources, raise_on_error=False
    )
    assert not result.success
    (failure,) = [e for e in result.all_events if e.is_step_failure]
    assert "p.w.ns2.inside" in str(failure.step_failure_data.error)
    assert transaction_records(catalog) == []  # swept all the same
    assert [r.target for r in catalog.trash.list_trash()] == ["p.w.ns.adopted"]


def test_the_orphan_scan_job_commits_a_report(instance, lake: Lake) -> None:
    result = run(table_orphan_scan_job, instance, lake)
    m = observed(result)
    assert (
        m["orphans"] == 0
        and m["files_scanned"] > 0
        and str(m["report_key"]).startswith("rpt/orphans/p.w.ns.t/")
    )
    assert m["lake/operation"] == "orphan-scan" and m["unknown_branches"] == []
    assert checked(result) == {"no_orphans": True}
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


def test_a_forced_compaction_ignores_the_threshold(instance, lake: Lake) -> None:
    lake.catalog.policies.set_policy(TABLE, {"compact_min_fragments": 10})
    lake.catalog.tables.append(TABLE, rows(100, 5).to_reader())
    lake.catalog.tables.append(TABLE, rows(200, 5).to_reader())
    force = {"ops": {"compaction_plan": {"config": {"force": True}}}}
    result = run(table_compaction_job, instance, lake, run_config=force)
    m = observed(result)
    assert m["status"] == "committed" and m["fragments_before"] == 3 and m["fragments_after"] == 1
    assert lake.catalog.reads.open_table(TABLE).count_rows() == 20
