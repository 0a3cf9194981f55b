"""Registered tables as assets: the observation sensor on a real instance, and an IO-manager
input from an observed table reading the version observed."""

import dagster as dg
import pyarrow as pa

from lake_platform.defs.io_manager import LakeIOManager
from lake_platform.defs.resources import LakeResource
from lake_platform.defs.table_assets import table_observation_sensor, table_specs
from lake_platform_tests.dagster_storage import sqlite_instance
from lake_platform_tests.defs.conftest import TABLE, Lake
from lake_platform_tests.maintenance.helpers import rows


def tick(instance: dg.DagsterInstance, lake: LakeResource, cursor: str | None) -> dg.SensorResult:
    with dg.build_sensor_context(instance=instance, cursor=cursor, resources={"lake": lake}) as ctx:
        result = table_observation_sensor(ctx)
    assert isinstance(result, dg.SensorResult)
    return result


def observed(result: dg.SensorResult) -> dict[str, dict[str, object]]:
    return {
        e.asset_key.to_user_string(): {k: v.value for k, v in e.metadata.items()}
        for e in result.asset_events
        if isinstance(e, dg.AssetObservation)
    }


def test_each_table_is_observed_once_per_version(lake: Lake) -> None:
    resource = LakeResource(home=str(lake.home), namespaces={"shop": "p.w.ns"})
    with sqlite_instance() as instance:
        first = tick(instance, resource, None)
        (meta,) = observed(first).values()
        assert list(observed(first)) == ["shop/t"]
        assert meta["dagster/table_name"] == TABLE and meta["lake/version"] == 1
        assert meta["dagster/row_count"] == 10
        assert [c.name for c in meta["dagster/column_schema"].columns] == ["id", "name"]

        again = tick(instance, resource, first.cursor)
        assert again.asset_events == [] and again.skip_reason is not None

        lake.catalog.tables.append(TABLE, rows(10, 5).to_reader())
        moved = tick(instance, resource, again.cursor)
        assert observed(moved)["shop/t"]["lake/version"] == 2
        assert observed(moved)["shop/t"]["dagster/row_count"] == 15


def test_an_input_from_an_observed_table_reads_the_observed_version(lake: Lake) -> None:
    resource = LakeResource(home=str(lake.home))
    (spec,) = table_specs([TABLE])
    assert spec.key == dg.AssetKey(["p", "w", "ns", "t"]) and spec.kinds == {"lance"}

    @dg.asset(key=["p", "w", "ns", "t_count"], io_manager_key="lake_io", ins={"t": dg.AssetIn(key=spec.key)})
    def t_count(t: pa.Table) -> pa.Table:
        return pa.table({"rows": [t.num_rows]})

    with sqlite_instance() as instance:
        for event in tick(instance, resource, None).asset_events:
            instance.report_runless_asset_event(event)  # what the daemon does with a sensor's events
        lake.catalog.tables.append(TABLE, rows(10, 5).to_reader())  # not observed yet
        result = dg.materialize(
            [spec, t_count],
            selection=[t_count],
            instance=instance,
            resources={"lake": resource, "lake_io": LakeIOManager(lake=resource)},
        )
    assert result.success
    counted = lake.catalog.reads.open_table("p.w.ns.t_count").dataset.to_table()
    assert counted.column("rows").to_pylist() == [10]
