"""``lake up`` (its demo seed and options), ``lake serve-flight``, ``lake registry init``."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from lake_platform.cli import cli
from lake_platform.up.processes import die_with_parent
from lake_platform_tests.cli.conftest import run
from lake_platform_tests.servers import free_port


def test_demo_seed_is_idempotent(tmp_path: Path) -> None:
    """What `lake up` seeds before it starts the processes (the launcher test runs `up` whole)."""
    from lake_platform.catalog.catalog import Catalog
    from lake_platform.settings import load_settings
    from lake_platform.up.demo import ensure_demo_user, seed_demo

    with Catalog(load_settings(home=tmp_path / "home")) as catalog:
        first, second = seed_demo(catalog), seed_demo(catalog)
        assert first.created and not second.created and first.rows == second.rows == 1000
        user, password = ensure_demo_user(catalog, tmp_path / "home")
        assert ensure_demo_user(catalog, tmp_path / "home") == (user, password)  # stable across runs
        assert catalog.authenticate_password(user, password).role == "reader"
        assert (tmp_path / "home" / "demo-user.txt").stat().st_mode & 0o777 == 0o600


def test_up_has_ports_in_help(lake: CliRunner) -> None:
    result = lake.invoke(cli, ["up", "--help"])
    assert result.exit_code == 0 and "--port" in result.output and "--flight-port" in result.output


def test_registry_init_creates_the_dynamodb_table(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, moto_endpoint: str
) -> None:
    url = f"dynamodb://cli_init_test?region=us-east-1&endpoint_url={moto_endpoint}"
    monkeypatch.setenv("LAKE_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("LAKE_REGISTRY_URL", url)
    runner = CliRunner()
    assert run(runner, "registry", "init") == {"registry": url, "ready": True}
    assert run(runner, "registry", "init")["ready"]  # idempotent
    run(runner, "project", "create", "p")
    assert [e["operation"] for e in run(runner, "log", "p")] == ["create project"]


def test_serve_flight_on_a_busy_port_fails_cleanly(lake: CliRunner, monkeypatch: pytest.MonkeyPatch) -> None:
    import socket

    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        monkeypatch.setenv("LAKE_FLIGHT_PORT", str(busy.getsockname()[1]))
        result = lake.invoke(cli, ["serve-flight"])
    assert result.exit_code == 1
    assert "SERVICE_UNAVAILABLE" in result.output and "cannot listen on 127.0.0.1" in result.output
    assert "Traceback" not in result.output


def test_serve_flight_with_a_bad_or_busy_data_plane_fails_cleanly(lake: CliRunner) -> None:
    import socket

    result = lake.invoke(cli, ["serve-flight", "--port", "0", "--data-listen", "nohost"])
    assert result.exit_code == 2, result.output
    assert "LAKE_FLIGHT_DATA_LISTEN: 'nohost' is not host:port" in result.output
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        where = f"127.0.0.1:{busy.getsockname()[1]}"
        result = lake.invoke(cli, ["serve-flight", "--port", "0", "--data-listen", where])
    assert result.exit_code == 1, result.output
    assert "SERVICE_UNAVAILABLE" in result.output and "cannot start the data plane" in result.output
    assert "Traceback" not in result.output


def test_serve_rest_on_a_busy_port_or_a_public_address_fails_cleanly(
    lake: CliRunner, monkeypatch: pytest.MonkeyPatch
) -> None:
    import socket

    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        result = lake.invoke(cli, ["serve-rest", "--port", str(busy.getsockname()[1])])
    assert result.exit_code == 1, result.output
    assert "SERVICE_UNAVAILABLE" in result.output and "cannot listen on 127.0.0.1" in result.output
    result = lake.invoke(cli, ["serve-rest", "--host", "0.0.0.0"])
    assert result.exit_code == 2 and "LAKE_REST_ALLOW_INSECURE" in result.output
    assert "Traceback" not in result.output


def _event_engine_ticks(pid: int) -> int:
    """CPU clock ticks (user + system) of the process's gRPC EventEngine threads."""
    ticks = 0
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            stat = Path(f"/proc/{pid}/task/{tid}/stat").read_text()
        except FileNotFoundError:  # the thread ended meanwhile
            continue
        if stat[stat.index("(") + 1 : stat.rindex(")")] == "event_engine":
            fields = stat[stat.rindex(")") + 2 :].split()
            ticks += int(fields[11]) + int(fields[12])
    return ticks


def _listener_ticks(tmp_path: Path, experiments: str | None, calls: int) -> int:
    """EventEngine's CPU ticks in a `lake serve-flight` process over ``calls`` health checks;
    ``experiments``: GRPC_EXPERIMENTS in its environment (None: unset, as deployed)."""
    import grpc
    from grpc_health.v1 import health_pb2, health_pb2_grpc

    env = {k: v for k, v in os.environ.items() if k != "GRPC_EXPERIMENTS"}
    if experiments is not None:
        env["GRPC_EXPERIMENTS"] = experiments
    env["LAKE_HOME"] = str(tmp_path / "home")
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "lake_platform.cli", "serve-flight", "--port", str(port)],
        env=env,
        stderr=subprocess.DEVNULL,
        preexec_fn=die_with_parent,
    )
    try:
        with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
            grpc.channel_ready_future(channel).result(timeout=120)
            check = health_pb2_grpc.HealthStub(channel).Check
            check(health_pb2.HealthCheckRequest())
            before = _event_engine_ticks(proc.pid)
            for _ in range(calls):
                check(health_pb2.HealthCheckRequest())
            return _event_engine_ticks(proc.pid) - before
    finally:
        proc.terminate()
        proc.wait(30)


def test_serve_flight_serves_connections_on_grpcs_polling_listener(tmp_path: Path) -> None:
    """`lake serve-flight` turns EventEngine's listener off (docs/flight-sql.md, "gRPC's
    listener"), so no EventEngine thread reads its calls; an operator's GRPC_EXPERIMENTS, here
    empty (gRPC's defaults), wins, and then those threads do read them: the measure can tell."""
    calls = 5000
    assert _listener_ticks(tmp_path / "ours", None, calls) < 3
    assert _listener_ticks(tmp_path / "defaults", "", calls) >= 10
