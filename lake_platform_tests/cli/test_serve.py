"""``lake up`` (its demo seed and options), ``lake serve-flight``, ``lake registry init``."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from lake_platform.cli import cli
from lake_platform.up.processes import bound_to_parent
from lake_platform_tests.cli.conftest import run


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
        assert catalog.access.authenticate_password(user, password).role == "reader"
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
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        monkeypatch.setenv("LAKE_FLIGHT_PORT", str(busy.getsockname()[1]))
        result = lake.invoke(cli, ["serve-flight"])
    assert result.exit_code == 1
    assert "SERVICE_UNAVAILABLE" in result.output and "cannot listen on 127.0.0.1" in result.output
    assert "Traceback" not in result.output
    assert "endpoint on" not in result.output  # nothing printed as if it had started


def test_serve_flight_with_a_bad_or_busy_data_plane_fails_cleanly(lake: CliRunner) -> None:
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
    assert " on grpc://" not in result.output


def test_serve_rest_on_a_busy_port_or_a_public_address_fails_cleanly(
    lake: CliRunner, monkeypatch: pytest.MonkeyPatch
) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        result = lake.invoke(cli, ["serve-rest", "--port", str(busy.getsockname()[1])])
    assert result.exit_code == 1, result.output
    assert "SERVICE_UNAVAILABLE" in result.output and "cannot listen on 127.0.0.1" in result.output
    assert "Lance REST server on" not in result.output
    result = lake.invoke(cli, ["serve-rest", "--host", "0.0.0.0"])
    assert result.exit_code == 2 and "LAKE_REST_ALLOW_INSECURE" in result.output
    assert "Traceback" not in result.output and "Lance REST server on" not in result.output


def announced(proc: subprocess.Popen[str], pattern: str) -> re.Match[str]:
    """The line of ``proc``'s stderr that matches ``pattern`` (earlier lines are skipped)."""
    assert proc.stderr is not None
    skipped = []
    for line in proc.stderr:
        match = re.fullmatch(pattern, line.rstrip("\n"))
        if match:
            return match
        skipped.append(line)
    raise AssertionError(f"exited ({proc.wait()}) without printing {pattern!r}: {''.join(skipped)[-3000:]}")


def test_serve_rest_prints_its_address_once_it_listens(tmp_path: Path) -> None:
    """With --port 0 the kernel picks the port: the printed address is the bound one, and it
    accepts a connection the moment it is printed."""
    env = {**os.environ, "LAKE_HOME": str(tmp_path / "home")}
    proc = subprocess.Popen(
        bound_to_parent([sys.executable, "-m", "lake_platform.cli", "serve-rest", "--port", "0"]),
        env=env,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        match = announced(proc, r"Lance REST server on http://127\.0\.0\.1:(\d+)")
        with socket.create_connection(("127.0.0.1", int(match.group(1))), timeout=10):
            pass
    finally:
        proc.terminate()
        proc.wait(30)


def test_serve_flight_serves_the_standard_health_service(tmp_path: Path) -> None:
    """`lake serve-flight` as deployed (its own process): the port answers grpc.health.v1 with
    SERVING once the catalog snapshot is loaded, for the server and for the Flight service."""
    import grpc
    from grpc_health.v1 import health_pb2, health_pb2_grpc

    env = {**os.environ, "LAKE_HOME": str(tmp_path / "home")}
    proc = subprocess.Popen(
        bound_to_parent([sys.executable, "-m", "lake_platform.cli", "serve-flight", "--port", "0"]),
        env=env,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        # Printed once it listens, with the port --port 0 bound: it accepts a connection now.
        port = int(announced(proc, r"Flight SQL endpoint on grpc://127\.0\.0\.1:(\d+)").group(1))
        socket.create_connection(("127.0.0.1", port), timeout=10).close()
        with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
            grpc.channel_ready_future(channel).result(timeout=120)
            stub = health_pb2_grpc.HealthStub(channel)
            serving = health_pb2.HealthCheckResponse.SERVING
            # Listening comes before the snapshot's first load: watch until it says SERVING.
            watch = stub.Watch(health_pb2.HealthCheckRequest(), timeout=120)
            assert any(reply.status == serving for reply in watch)
            watch.cancel()
            for service in ("", "arrow.flight.protocol.FlightService"):
                reply = stub.Check(health_pb2.HealthCheckRequest(service=service), timeout=30)
                assert reply.status == serving
    finally:
        proc.terminate()
        proc.wait(30)


@pytest.mark.parametrize(
    ("command", "prefix"),
    [("serve-rest", "LAKE_REST_TLS_"), ("serve-flight", "LAKE_FLIGHT_TLS_")],
)
def test_a_tls_file_that_is_not_there_is_named_by_its_setting(
    lake: CliRunner, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, command: str, prefix: str
) -> None:
    """serve-rest once said only "[Errno 2] No such file or directory" (ssl names no file)."""
    key = tmp_path / "key.pem"
    key.write_text("")
    monkeypatch.setenv(f"{prefix}CERT_FILE", str(tmp_path / "absent.pem"))
    monkeypatch.setenv(f"{prefix}KEY_FILE", str(key))
    result = lake.invoke(cli, [command, "--port", "0"])
    assert result.exit_code == 2
    assert result.output == (
        f"error [13 INVALID_INPUT]: bad setting: {prefix}CERT_FILE: {tmp_path / 'absent.pem'} is not a file\n"
    )


def test_ctrl_c_stops_serve_rest_and_says_so(tmp_path: Path) -> None:
    """Ctrl-C once ended serve-rest with click's bare "Aborted!" and exit 1 (uvicorn shuts down
    gracefully, then raises the interrupt again)."""
    env = {**os.environ, "LAKE_HOME": str(tmp_path / "home")}
    proc = subprocess.Popen(
        bound_to_parent([sys.executable, "-m", "lake_platform.cli", "serve-rest", "--port", "0"]),
        env=env,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        announced(proc, r"Lance REST server on http://127\.0\.0\.1:\d+")
        proc.send_signal(signal.SIGINT)
        rest = proc.communicate(timeout=30)[1]
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(30)
    assert proc.returncode == 0, rest
    assert rest.strip().splitlines()[-1:] == ["Lance REST server stopped"], rest
