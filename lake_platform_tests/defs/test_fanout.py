"""Compaction fans out through Dagster: one step per Lance compaction task, placed by the run's
executor (here the multiprocess one: one process per step), and one commit step. Killing a
task's process fails the run with nothing committed; re-executing it commits exactly once.

The runs execute in a run worker of their own (``fanout_runner``), whose executor starts the
forkserver it forks steps from with the platform's preloads (the pytest process's may have been
started by another test, preloading other modules). The forkserver keeps the environment it
started in: the lake's home and the killer's marker reach the steps in the run's config, not in
variables. On SQLite storage only: these runs start a dozen step processes, and what Postgres
storage adds (runs and events written by processes other than the test's) is what
test_run_queue's Postgres case runs, with a daemon, a code server and run workers."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import dagster as dg
import pytest

from lake_platform.up.processes import bound_to_parent
from lake_platform_tests.defs.conftest import TABLE, Lake
from lake_platform_tests.maintenance.helpers import rows

TASK_STEP = "compaction_task"
SQLITE_ONLY = pytest.mark.parametrize("instance", ["sqlite"], indirect=True)


def fragment(lake: Lake) -> None:
    for i in range(1, 4):  # 4 fragments of 10 rows: two tasks of two fragments each
        lake.catalog.tables.append(TABLE, rows(100 * i, 10).to_reader())
    lake.catalog.policies.set_policy(TABLE, {"compact_min_fragments": 4, "target_rows_per_fragment": 20})


def steps(instance: dg.DagsterInstance, run_id: str, event: dg.DagsterEventType) -> dict[str, int]:
    """step key → pid of the process that reported ``event`` for it."""
    return {
        r.event_log_entry.step_key: r.event_log_entry.dagster_event.pid
        for r in instance.get_records_for_run(run_id, of_type=event).records
        if r.event_log_entry.step_key
    }


def lake_config(lake: Lake, marker: Path) -> dict[str, object]:
    """The run's config: the test's lake, one task's process killed as ``marker`` says."""
    return {"resources": {"lake": {"config": {"home": str(lake.home), "marker": str(marker)}}}}


@pytest.fixture(scope="module")
def runner(tmp_path_factory: pytest.TempPathFactory) -> Iterator[subprocess.Popen[str]]:
    """The run worker (``fanout_runner``) the module's runs execute in, its log kept."""
    log = (tmp_path_factory.mktemp("fanout_runner") / "runner.log").open("w")
    root = Path(__file__).resolve().parents[2]
    proc = subprocess.Popen(
        bound_to_parent([sys.executable, "-m", "lake_platform_tests.defs.fanout_runner"]),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=log,
        text=True,
        cwd=root,
        env={**os.environ, "PYTHONPATH": str(root)},
    )
    try:
        yield proc
    finally:
        assert proc.stdin is not None
        proc.stdin.close()  # the runner's loop ends
        try:
            proc.wait(timeout=60)
        finally:
            proc.kill()
            log.close()


@dataclass
class Ran:
    success: bool
    run_id: str


def run(
    runner: subprocess.Popen[str],
    instance: dg.DagsterInstance,
    run_config: dict[str, object] | None = None,
    from_failure: str | None = None,
) -> Ran:
    """A run of the job in the runner; a re-execution (``from_failure``) takes its parent's config."""
    assert runner.stdin is not None and runner.stdout is not None
    request = {
        "instance": dg.serialize_value(instance.get_ref()),
        "run_config": run_config,
        "tags": {"dagster/partition": TABLE},
        "from_failure": from_failure,
    }
    runner.stdin.write(json.dumps(request) + "\n")
    runner.stdin.flush()
    answer = runner.stdout.readline()
    assert answer, f"the runner exited ({runner.poll()}): see its runner.log"
    return Ran(**json.loads(answer))


@pytest.mark.slow
@SQLITE_ONLY
def test_each_task_is_a_step_in_its_own_process_and_a_killed_one_is_retried(
    runner: subprocess.Popen[str], instance: dg.DagsterInstance, lake: Lake, tmp_path: Path
) -> None:
    fragment(lake)
    config = lake_config(lake, tmp_path / "killed")  # one task's process dies once
    tasks = len(lake.catalog.versions.plan_compaction(TABLE, target_rows_per_fragment=20).tasks)
    assert tasks >= 2
    before = lake.catalog.reads.open_table(TABLE).version
    result = run(runner, instance, run_config=config)
    assert result.success
    run_id = result.run_id
    done = steps(instance, run_id, dg.DagsterEventType.STEP_SUCCESS)
    task_steps = {k: pid for k, pid in done.items() if k.startswith(TASK_STEP)}
    assert sorted(task_steps) == [f"{TASK_STEP}[task_{i}]" for i in range(tasks)]
    assert {"compaction_plan", "compaction_commit"} <= set(done)
    assert len(set(task_steps.values())) == tasks  # one process per step
    assert not {os.getpid(), runner.pid} & set(task_steps.values())  # none in the run's process
    retried = steps(instance, run_id, dg.DagsterEventType.STEP_UP_FOR_RETRY)
    assert len(retried) == 1 and next(iter(retried)).startswith(TASK_STEP)  # its RetryPolicy
    (observed,) = instance.fetch_observations(dg.AssetKey(TABLE.split(".")), limit=1).records
    m = {k: v.value for k, v in observed.asset_observation.metadata.items()}
    assert observed.run_id == run_id  # the run's event on the table's own asset
    assert m["status"] == "committed" and m["tasks"] == tasks and m["fragments_after"] == 2
    assert lake.catalog.reads.open_table(TABLE).version > before
    assert lake.catalog.reads.open_table(TABLE).count_rows() == 40
    assert [e.operation for e in lake.catalog.reads.history(TABLE)].count("compact") == 1


@pytest.mark.slow
@SQLITE_ONLY
def test_a_task_killed_on_every_attempt_fails_the_run_and_its_reexecution_commits_once(
    runner: subprocess.Popen[str], instance: dg.DagsterInstance, lake: Lake, tmp_path: Path
) -> None:
    fragment(lake)
    before = lake.catalog.reads.open_table(TABLE)
    (tmp_path / "killed.armed").touch()  # the task dies on every attempt: retries run out
    failed = run(runner, instance, run_config=lake_config(lake, tmp_path / "killed"))
    assert not failed.success
    failed_id = failed.run_id
    assert (tmp_path / "killed").exists()
    assert instance.get_run_by_id(failed_id).status == dg.DagsterRunStatus.FAILURE
    failures = steps(instance, failed_id, dg.DagsterEventType.STEP_FAILURE)
    assert [k for k in failures if k.startswith(TASK_STEP)], failures
    assert "compaction_commit" not in steps(instance, failed_id, dg.DagsterEventType.STEP_START)
    # Nothing half-committed: same version, same rows, no compaction in the commit log.
    after_failure = lake.catalog.reads.open_table(TABLE)
    assert after_failure.version == before.version and after_failure.count_rows() == 40
    assert "compact" not in [e.operation for e in lake.catalog.reads.history(TABLE)]

    (tmp_path / "killed.armed").unlink()
    retried = run(runner, instance, from_failure=failed_id)  # ReexecutionOptions.from_failure
    assert retried.success
    retry_id = retried.run_id
    rerun = steps(instance, retry_id, dg.DagsterEventType.STEP_SUCCESS)
    assert "compaction_plan" not in rerun  # the plan (and its commit id) is reused
    assert "compaction_commit" in rerun
    operations = [e.operation for e in lake.catalog.reads.history(TABLE)]
    assert operations.count("compact") == 1
    table = lake.catalog.reads.open_table(TABLE)
    assert table.count_rows() == 40 and table.version > before.version
    assert sorted(table.to_reader().read_all().column("id").to_pylist()) == sorted(
        before.to_reader().read_all().column("id").to_pylist()
    )
    assert lake.catalog.reads.describe_table(TABLE).fragments == 2
