"""Compaction requested for the tables whose version moved, and for their branches, under their
own scope's policy; the runs it requests land on the table's asset."""

import dagster as dg

from lake_platform.defs.maintenance import branch_compaction_job, table_compaction_job
from lake_platform.defs.partitions import TABLES
from lake_platform.defs.table_maintenance import compaction_sensor
from lake_platform_tests.dagster_storage import sqlite_instance
from lake_platform_tests.defs.conftest import TABLE, Lake
from lake_platform_tests.maintenance.helpers import rows

COLD = "p.w.cold.t"
KEY = dg.AssetKey(TABLE.split("."))


def tick(instance: dg.DagsterInstance, lake: Lake, cursor: str | None) -> dg.SensorResult:
    with dg.build_sensor_context(instance=instance, cursor=cursor, resources=lake.resources) as ctx:
        result = compaction_sensor(ctx)
    assert isinstance(result, dg.SensorResult)
    return result


def launch(
    job: dg.JobDefinition, request: dg.RunRequest, instance: dg.DagsterInstance, lake: Lake
) -> dg.ExecuteInProcessResult:
    """What the daemon does with a request: a run of its job, its partition, config and tags."""
    assert request.job_name == job.name
    return job.execute_in_process(
        partition_key=request.partition_key,
        run_config=request.run_config,
        tags=request.tags,
        instance=instance,
        resources=lake.resources,
    )


def fragments(lake: Lake, branch: str) -> int:
    return len(lake.catalog.branches.open_branch(TABLE, branch).dataset.get_fragments())


def test_a_table_crossing_its_scopes_threshold_is_compacted_and_a_quiet_one_left_alone(lake: Lake) -> None:
    lake.catalog.containers.create_namespace("p.w.cold")
    lake.catalog.tables.create_table(COLD, rows(0, 3).to_reader())
    # The hot namespace's policy: 3 fragments; the cold one keeps the default (16).
    lake.catalog.policies.set_policy("p.w.ns", {"compact_min_fragments": 3})
    with sqlite_instance() as instance:
        first = tick(instance, lake, None)
        assert first.run_requests == []  # one fragment each: nothing due

        for start in (10, 20):
            lake.catalog.tables.append(TABLE, rows(start, 5).to_reader())
            lake.catalog.tables.append(COLD, rows(start, 5).to_reader())
        hot = tick(instance, lake, first.cursor)
        (request,) = hot.run_requests
        assert request.partition_key == TABLE and request.job_name == "table_compaction"
        assert request.run_key == f"compact:{TABLE}:v3"
        assert request.tags["lake/trigger"] == "table-moved"
        assert hot.dynamic_partitions_requests[0].partition_keys == [TABLE]

        instance.add_dynamic_partitions(TABLES, [TABLE])
        before = [e.commit_id for e in lake.catalog.reads.history(TABLE)]
        result = launch(table_compaction_job, request, instance, lake)
        assert result.success
        assert lake.catalog.reads.describe_table(TABLE).fragments == 1
        # One registry commit (Lance's compaction is two versions, logged compact and compact#1
        # under one commit id), and the run's observation on the table's asset names it.
        landed = [e for e in lake.catalog.reads.history(TABLE) if e.commit_id not in before]
        assert {e.commit_id for e in landed} == {landed[0].commit_id}
        assert [e.operation for e in landed] == ["compact", "compact#1"]
        assert {e.run_id for e in landed} == {result.run_id}
        (record,) = instance.fetch_observations(KEY, limit=1).records
        metadata = {k: v.value for k, v in record.asset_observation.metadata.items()}
        assert record.run_id == result.run_id
        assert metadata["lake/commit_id"] == landed[0].commit_id
        assert (
            metadata["lake/version"] == landed[-1].to_version == lake.catalog.reads.open_table(TABLE).version
        )
        assert (metadata["fragments_before"], metadata["fragments_after"]) == (3, 1)
        # The compaction moved the table: evaluated once more, below its threshold now.
        after = tick(instance, lake, hot.cursor)
        assert after.run_requests == [] and f"{TABLE}: 1 fragments" in str(after.skip_reason.skip_message)


def test_a_branch_crossing_the_threshold_is_compacted_on_its_own_line(lake: Lake) -> None:
    lake.catalog.policies.set_policy(TABLE, {"compact_min_fragments": 3})
    lake.catalog.branches.create_branch(TABLE, "dev")
    with sqlite_instance() as instance:
        first = tick(instance, lake, None)
        assert first.run_requests == []
        for start in (10, 20):
            lake.catalog.branch_writes.append(TABLE, "dev", rows(start, 5).to_reader())
        assert fragments(lake, "dev") == 3
        # Main did not move: the branch is found by the sweep, which passes every table.
        (request,) = tick(instance, lake, first.cursor).run_requests
        assert request.job_name == "branch_compaction" and request.partition_key == TABLE
        head = lake.catalog.branches.describe_branch(TABLE, "dev")["version"]
        assert request.run_key == f"compact:{TABLE}@dev:v{head}"

        main = lake.catalog.reads.open_table(TABLE).version
        instance.add_dynamic_partitions(TABLES, [TABLE])
        result = launch(branch_compaction_job, request, instance, lake)
        assert result.success
        assert fragments(lake, "dev") == 1
        assert lake.catalog.branches.open_branch(TABLE, "dev").count_rows() == 20
        assert lake.catalog.reads.open_table(TABLE).version == main  # main never moves
        landed = [e for e in lake.catalog.reads.history(TABLE) if e.operation.startswith("compact")]
        commit = landed[0]
        assert {e.commit_id for e in landed} == {commit.commit_id}  # one registry commit
        assert commit.detail["branch"] == "dev" and commit.run_id == result.run_id
        (record,) = instance.fetch_observations(KEY, limit=1).records
        metadata = {k: v.value for k, v in record.asset_observation.metadata.items()}
        assert metadata["lake/compacted_branch"] == "dev" and metadata["lake/commit_id"] == commit.commit_id
        assert metadata["lake/version"] == main  # what readers of the table asset pin stays main's
        assert tick(instance, lake, None).run_requests == []  # compacted: nothing due anywhere
