"""The index asset, its check and its schedule, in process on a real Dagster instance."""

from __future__ import annotations

from datetime import UTC, datetime

import dagster as dg

from lake_platform.defs.indexes import index_refresh_schedule, indexes_current, table_indexes
from lake_platform.defs.partitions import TABLES
from lake_platform.defs.resources import ACTOR
from lake_platform_tests.defs.conftest import TABLE, Lake
from lake_platform_tests.maintenance.helpers import rows


def meta(result: dg.ExecuteInProcessResult) -> dict[str, object]:
    return {
        k: v.value for k, v in result.asset_materializations_for_node("table_indexes")[0].metadata.items()
    }


def check(instance: dg.DagsterInstance, lake: Lake) -> dg.AssetCheckEvaluation:
    job = dg.define_asset_job("index_check", selection=dg.AssetSelection.checks(indexes_current))
    defs = dg.Definitions(
        assets=[table_indexes], asset_checks=[indexes_current], jobs=[job], resources=lake.resources
    )
    result = defs.resolve_job_def("index_check").execute_in_process(
        instance=instance, tags={"dagster/partition": TABLE}
    )
    (evaluation,) = result.get_asset_check_evaluations()
    return evaluation


def test_the_asset_builds_what_the_policy_names_and_the_check_sees_lag(instance, lake: Lake) -> None:
    lake.catalog.policies.set_policy("p.w.ns", {"indexes": "id:btree,name:bitmap,region:zonemap"})
    before = check(instance, lake)
    assert not before.passed and before.severity == dg.AssetCheckSeverity.WARN
    assert "id has no btree index" in str(before.description)

    first = dg.materialize([table_indexes], partition_key=TABLE, instance=instance, resources=lake.resources)
    m = meta(first)
    assert m["status"] == "committed" and m["built"] == ["id_idx", "name_idx"]
    assert m["skipped"] == {"region": "no such column"} and m["policy_source"] == "p.w.ns"
    builds = [e for e in lake.catalog.reads.history(TABLE) if e.operation == "index create"]
    assert [(e.actor, e.run_id) for e in builds] == [(ACTOR, first.run_id)] * 2
    assert check(instance, lake).passed

    # New rows are not in the indexes until the next refresh: the check says so.
    lake.catalog.tables.append(TABLE, rows(100, 5).to_reader())
    lagging = check(instance, lake)
    assert not lagging.passed
    assert lagging.metadata["lagging"].value == {
        "id_idx": {"fragments_unindexed": 1, "rows_unindexed": 5},
        "name_idx": {"fragments_unindexed": 1, "rows_unindexed": 5},
    }
    second = dg.materialize([table_indexes], partition_key=TABLE, instance=instance, resources=lake.resources)
    assert meta(second)["refreshed"] == ["id_idx", "name_idx"] and meta(second)["built"] == []
    assert lake.catalog.reads.history(TABLE)[-1].operation == "index refresh"
    assert check(instance, lake).passed

    third = dg.materialize([table_indexes], partition_key=TABLE, instance=instance, resources=lake.resources)
    assert meta(third)["status"] == "nothing to do"


def test_the_schedule_asks_only_for_tables_whose_policy_names_indexes(instance, lake: Lake) -> None:
    lake.catalog.tables.create_table("p.w.ns.t2", rows(0, 3).to_reader())
    instance.add_dynamic_partitions(TABLES, ["p.w.ns.t2"])
    when = datetime(2026, 1, 4, 3, 40, tzinfo=UTC)
    with dg.build_schedule_context(
        instance=instance, scheduled_execution_time=when, resources=lake.resources
    ) as ctx:
        assert isinstance(index_refresh_schedule(ctx), dg.SkipReason)
    lake.catalog.policies.set_policy("p.w.ns.t2", {"indexes": "id:btree"})
    with dg.build_schedule_context(
        instance=instance, scheduled_execution_time=when, resources=lake.resources
    ) as ctx:
        requests = index_refresh_schedule(ctx)
    assert [r.partition_key for r in requests] == ["p.w.ns.t2"]
    assert requests[0].run_key == "indexes:p.w.ns.t2:2026-01-04T03:40"
