"""One run per table at a time, enforced by the run queue the platform's dagster.yaml configures:
runs are submitted through the real CLI (QueuedRunCoordinator), a real dagster-daemon dequeues
them and the default launcher starts them, on SQLite and on Postgres storage.

The code location is one ``dagster api grpc`` code server, as in the deployment (docs/deploy.md),
which the CLI and the daemon connect to: with a ``python_module`` workspace every ``dagster job
launch`` would start (and import) a code server of its own, about 15 s a launch on 2 cores."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path

import dagster as dg
import grpc
import pytest
import yaml
from grpc_health.v1 import health_pb2, health_pb2_grpc

from lake_platform.defs.instance import instance_config
from lake_platform.defs.partitions import TABLES
from lake_platform.settings import DagsterSettings
from lake_platform.up.processes import bound_to_parent
from lake_platform_tests.dagster_storage import FAST_DIR, postgres_database
from lake_platform_tests.defs.held_workload import GATE_TAG
from lake_platform_tests.postgres import Postgres
from lake_platform_tests.servers import free_port

BIN = Path(sys.executable).parent
T1, T2 = "p.w.ns.t1", "p.w.ns.t2"


@pytest.fixture(params=["sqlite", "postgres"])
def home(request: pytest.FixtureRequest) -> Iterator[Path]:
    config = instance_config(DagsterSettings(_env_file=None))  # type: ignore[call-arg]
    # The daemon looks at the queue every second instead of every 5 (Dagster's default): each
    # run waits for one dequeue, the second run on t1 for another.
    config["run_coordinator"].setdefault("config", {})["dequeue_interval_seconds"] = 1
    if request.param == "postgres":
        postgres: Postgres = request.getfixturevalue("postgres")
        config["storage"] = {"postgres": {"postgres_url": postgres_database(postgres)}}
    # In memory where the machine has it, as dagster_storage's instances: SQLite storage
    # commits every event, each an fsync on a disk.
    with tempfile.TemporaryDirectory(prefix="dagster-queue-", dir=FAST_DIR) as tmp:
        home = Path(tmp)
        (home / "dagster.yaml").write_text(yaml.safe_dump(config))
        yield home


def process_env(home: Path) -> dict[str, str]:
    return {
        **os.environ,
        "DAGSTER_HOME": str(home),
        "DAGSTER_DISABLE_TELEMETRY": "1",
        "PYTHONPATH": str(Path(__file__).resolve().parents[2]),
    }


@pytest.fixture
def env(home: Path) -> dict[str, str]:
    return process_env(home)


@pytest.fixture
def gate(tmp_path: Path) -> Path:
    """Where this test's runs say they started and wait for ``release`` (``held_workload``)."""
    gate = tmp_path / "gate"
    gate.mkdir()
    return gate


@contextmanager
def running_process(
    command: list[str], env: dict[str, str], home: Path, logs: Path, name: str
) -> Iterator[subprocess.Popen[bytes]]:
    """``command`` in ``home``, its output in ``logs/<name>.log`` (kept with the test's files)."""
    log = (logs / f"{name}.log").open("wb")
    proc = subprocess.Popen(
        bound_to_parent(command),
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


def wait_serving(proc: subprocess.Popen[bytes], port: int, log: Path) -> None:
    """Until the code server answers the gRPC health check (it serves once its code is loaded)."""
    with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
        health = health_pb2_grpc.HealthStub(channel)
        deadline = time.monotonic() + 240
        while True:
            assert proc.poll() is None, log.read_text()
            assert time.monotonic() < deadline, "the code server did not start"
            try:
                answer = health.Check(
                    health_pb2.HealthCheckRequest(service="DagsterApi"), wait_for_ready=True, timeout=1
                )
            except grpc.RpcError as err:
                if err.code() != grpc.StatusCode.DEADLINE_EXCEEDED:
                    raise
                continue
            assert answer.status == health_pb2.HealthCheckResponse.SERVING
            return


@pytest.fixture(scope="module")
def code_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[int]:
    """The workload's code server (its port), one for both storages: a run it starts opens the
    instance whose ref the launching daemon sends with the request, not the server's own (here
    the platform's instance settings on SQLite, in a home of its own)."""
    logs = tmp_path_factory.mktemp("code_server")
    config = instance_config(DagsterSettings(_env_file=None))  # type: ignore[call-arg]
    with tempfile.TemporaryDirectory(prefix="dagster-code-", dir=FAST_DIR) as tmp:
        home = Path(tmp)
        (home / "dagster.yaml").write_text(yaml.safe_dump(config))
        port = free_port()
        command = [str(BIN / "dagster"), "api", "grpc", "-m", "lake_platform_tests.defs.held_workload"]
        command += ["-h", "127.0.0.1", "-p", str(port)]
        with running_process(command, process_env(home), home, logs, "code_server") as proc:
            wait_serving(proc, port, logs / "code_server.log")
            yield port


@pytest.fixture
def daemon(
    env: dict[str, str], home: Path, tmp_path: Path, code_server: int
) -> Iterator[subprocess.Popen[bytes]]:
    """The daemon of this test's instance; ``workspace.yaml`` points it and the CLI at the code server."""
    location = {"host": "127.0.0.1", "port": code_server, "location_name": "held_workload"}
    (home / "workspace.yaml").write_text(yaml.safe_dump({"load_from": [{"grpc_server": location}]}))
    command = [str(BIN / "dagster-daemon"), "run", "-w", str(home / "workspace.yaml")]
    with running_process(command, env, home, tmp_path, "daemon") as proc:
        yield proc


def launch(env: dict[str, str], home: Path, table: str, gate: Path) -> str:
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
            json.dumps({"dagster/partition": table, GATE_TAG: str(gate)}),
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
    home: Path, env: dict[str, str], gate: Path, daemon: subprocess.Popen[bytes]
) -> None:
    with dg.DagsterInstance.from_config(str(home)) as instance:
        instance.add_dynamic_partitions(TABLES, [T1, T2])
        # Submitted at once (each launch is a process importing Dagster): the queue decides
        # which of the two runs on t1 goes first.
        with ThreadPoolExecutor(3) as pool:
            on_t1_a, on_t1_b, other = pool.map(lambda table: launch(env, home, table, gate), (T1, T1, T2))

        def started(run_id: str) -> bool:
            return (gate / f"started-{run_id}").exists()

        wait_for(
            lambda: (started(on_t1_a) or started(on_t1_b)) and started(other),
            "the first run of each table to start",
        )
        first, second = (on_t1_a, on_t1_b) if started(on_t1_a) else (on_t1_b, on_t1_a)
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
