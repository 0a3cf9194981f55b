"""One run per table at a time, enforced by the run queue the platform's dagster.yaml configures:
runs are submitted through the real CLI (QueuedRunCoordinator), a real dagster-daemon dequeues
them and the default launcher starts them, on SQLite and on Postgres storage."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import dagster as dg
import pytest
import yaml

from lake_platform.defs.instance import instance_config
from lake_platform.defs.partitions import TABLES
from lake_platform.settings import DagsterSettings
from lake_platform.up.processes import bound_to_parent
from lake_platform_tests.postgres import Postgres

BIN = Path(sys.executable).parent
T1, T2 = "p.w.ns.t1", "p.w.ns.t2"


@pytest.fixture(params=["sqlite", "postgres"])
def home(request: pytest.FixtureRequest, tmp_path: Path) -> Path:
    config = instance_config(DagsterSettings(_env_file=None))  # type: ignore[call-arg]
    if request.param == "postgres":
        postgres: Postgres = request.getfixturevalue("postgres")
        config["storage"] = {"postgres": {"postgres_url": postgres.new_database()}}
    home = tmp_path / "dagster"
    home.mkdir()
    (home / "dagster.yaml").write_text(yaml.safe_dump(config))
    (home / "workspace.yaml").write_text(
        yaml.safe_dump(
            {"load_from": [{"python_module": {"module_name": "lake_platform_tests.defs.held_workload"}}]}
        )
    )
    return home


@pytest.fixture
def env(home: Path, tmp_path: Path) -> dict[str, str]:
    gate = tmp_path / "gate"
    gate.mkdir()
    return {
        **os.environ,
        "DAGSTER_HOME": str(home),
        "DAGSTER_DISABLE_TELEMETRY": "1",
        "LAKE_TEST_GATE": str(gate),
        "PYTHONPATH": str(Path(__file__).resolve().parents[2]),
    }


@pytest.fixture
def daemon(env: dict[str, str], home: Path) -> Iterator[subprocess.Popen[bytes]]:
    log = (home / "daemon.log").open("wb")
    proc = subprocess.Popen(
        bound_to_parent([str(BIN / "dagster-daemon"), "run", "-w", str(home / "workspace.yaml")]),
        env=env,
        cwd=home,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        yield proc
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)
        log.close()


def launch(env: dict[str, str], home: Path, table: str) -> str:
    run_id = str(uuid.uuid4())
    out = subprocess.run(
        [
            str(BIN / "dagster"),
            "job",
            "launch",
            "-w",
            str(home / "workspace.yaml"),
            "-j",
            "held_job",
            "--tags",
            json.dumps({"dagster/partition": table}),
            "--run-id",
            run_id,
        ],
        env=env,
        cwd=home,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    return run_id


def wait_for(predicate, what: str, timeout: float = 240.0) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.2)


@pytest.mark.slow
def test_runs_on_one_table_queue_behind_each_other_other_tables_run_alongside(
    home: Path, env: dict[str, str], daemon: subprocess.Popen[bytes]
) -> None:
    gate = Path(env["LAKE_TEST_GATE"])
    with dg.DagsterInstance.from_config(str(home)) as instance:
        instance.add_dynamic_partitions(TABLES, [T1, T2])
        first, second, other = (launch(env, home, t) for t in (T1, T1, T2))
        assert instance.get_run_by_id(second).status == dg.DagsterRunStatus.QUEUED

        def started(run_id: str) -> bool:
            return (gate / f"started-{run_id}").exists()

        wait_for(lambda: started(first) and started(other), "the first run of each table to start")
        # Both are running now; the second run on t1 stays queued, however often the daemon looks.
        assert instance.get_run_by_id(second).status == dg.DagsterRunStatus.QUEUED
        assert not started(second)
        (gate / "release").touch()
        wait_for(
            lambda: all(
                instance.get_run_by_id(r).status == dg.DagsterRunStatus.SUCCESS
                for r in (first, second, other)
            ),
            "every run to succeed",
        )
        records = {r.dagster_run.run_id: r for r in instance.get_run_records()}
        assert records[second].start_time >= records[first].end_time  # serialized on t1
        assert records[other].start_time < records[first].end_time  # t2 ran alongside
        assert instance.get_run_by_id(second).tags["dagster/partition"] == T1
