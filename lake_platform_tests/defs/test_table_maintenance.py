"""Compaction requested for the tables whose version moved, under their own scope's policy."""

import dagster as dg

from lake_platform.defs.maintenance import compacted
from lake_platform.defs.partitions import TABLES
from lake_platform.defs.table_maintenance import moved_tables_compaction_sensor
from lake_platform_tests.defs.conftest import TABLE, Lake
from lake_platform_tests.maintenance.helpers import rows

COLD = "p.w.cold.t"


def tick(instance: dg.DagsterInstance, lake: Lake, cursor: str | None) -> dg.SensorResult:
    with dg.build_sensor_context(instance=instance, cursor=cursor, resources=lake.resources) as ctx:
        result = moved_tables_compaction_sensor(ctx)
    assert isinstance(result, dg.SensorResult)
    return result


def test_a_table_crossing_its_scopes_threshold_is_compacted_and_a_quiet_one_left_alone(lake: Lake) -> None:
    lake.catalog.containers.create_namespace("p.w.cold")
    lake.catalog.tables.create_table(COLD, rows(0, 3).to_reader())
    # The hot namespace's policy: 3 fragments; the cold one keeps the default (16).
    lake.catalog.policies.set_policy("p.w.ns", {"compact_min_fragments": 3})
    with dg.instance_for_test() as instance:
        first = tick(instance, lake, None)
        assert first.run_requests == []  # one fragment each: nothing due
        quiet = tick(instance, lake, first.cursor)
        assert quiet.skip_reason is not None and "no table moved" in str(quiet.skip_reason.skip_message)

        for start in (10, 20):
            lake.catalog.tables.append(TABLE, rows(start, 5).to_reader())
            lake.catalog.tables.append(COLD, rows(start, 5).to_reader())
        hot = tick(instance, lake, quiet.cursor)
        (request,) = hot.run_requests
        assert request.partition_key == TABLE
        assert request.run_key == f"compact:{TABLE}:v3"
        assert hot.dynamic_partitions_requests[0].partition_keys == [TABLE]

        instance.add_dynamic_partitions(TABLES, [TABLE])
        result = dg.materialize(
            [compacted], partition_key=TABLE, instance=instance, resources=lake.resources, tags=request.tags
        )
        assert result.success
        assert lake.catalog.reads.describe_table(TABLE).fragments == 1
        # The compaction moved the table: evaluated once more, below its threshold now.
        after = tick(instance, lake, hot.cursor)
        assert after.run_requests == [] and TABLE in str(after.skip_reason.skip_message)
