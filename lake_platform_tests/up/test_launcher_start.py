"""`lake up` starting and stopping as a user runs it (the installed script, a fresh process):
what it prints, a port already taken, a server that fails during start-up, a killed launcher
taking its servers with it, and the metrics port each server gets."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from lake_platform_tests.servers import free_ports, killed_parent


def test_lake_up_gives_rest_its_own_metrics_port(tmp_path: Path) -> None:
    """Flight and REST run as two processes under `lake up`: one metrics port each (in one
    process they would share one); a port with no next one is refused up front."""
    from lake_platform.errors import SettingsError
    from lake_platform.settings import load_settings
    from lake_platform.up.launcher import rest_metrics_port

    assert rest_metrics_port(load_settings(home=tmp_path)) is None
    assert rest_metrics_port(load_settings(home=tmp_path, metrics_port=0)) == 0
    assert rest_metrics_port(load_settings(home=tmp_path, metrics_port=9464)) == 9465
    with pytest.raises(SettingsError, match="LAKE_METRICS_PORT"):
        rest_metrics_port(load_settings(home=tmp_path, metrics_port=65535))


#: `lake up` as a parent that is then killed: prints its five servers' pids.
KILLED_LAUNCHER = """
import sys
from lake_platform.up.launcher import start_platform
from lake_platform.settings import load_settings
from lake_platform_tests.servers import free_port

platform = start_platform(
    load_settings(home=sys.argv[1]), "127.0.0.1", free_port(), seed=False,
    flight_port=free_port(), rest_port=free_port(),
)
print(*(proc.pid for proc in platform.processes), flush=True)
sys.stdin.read()  # until killed
"""


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_killed_launcher_takes_its_servers_with_it(tmp_path: Path) -> None:
    """SIGKILL runs no stop(): Dagster's code server, webserver and daemon, Flight SQL and REST
    each get SIGTERM from the kernel and exit, rather than holding their ports and the lake."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("LAKE_") and k != "DAGSTER_HOME"}
    code = KILLED_LAUNCHER.replace("sys.argv[1]", repr(str(tmp_path / "home")))
    killed_parent(code, within=60, servers=5, env=env)


def lake_up(
    tmp_path: Path,
    ui: int,
    flight: int,
    rest: int,
    settings: dict[str, str] | None = None,
    *,
    as_json: bool = False,
) -> subprocess.Popen[str]:
    """``lake up`` as `make run` starts it (the installed script), on its own LAKE_HOME and
    ports (and ``settings``, LAKE_* variables), stdout and stderr together as a terminal shows
    them; ``as_json``: ``lake --json up`` with stderr apart, as a script piping it reads it."""
    script = Path(sys.executable).parent / "lake"
    lake = [str(script)] if script.exists() else [sys.executable, "-m", "lake_platform.cli"]
    env = {k: v for k, v in os.environ.items() if not k.startswith("LAKE_") and k != "DAGSTER_HOME"}
    args = ["up", "--port", str(ui), "--flight-port", str(flight), "--rest-port", str(rest)]
    return subprocess.Popen(
        [*lake, *(["--json"] if as_json else []), *args],
        env={**env, **(settings or {}), "LAKE_HOME": str(tmp_path / "home")},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE if as_json else subprocess.STDOUT,
        text=True,
    )


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_lake_up_prints_its_addresses_and_next_steps_and_no_library_chatter(tmp_path: Path) -> None:
    """What `make run` shows: where everything is and what to do next. Neither Lance's "not
    fork-safe" warning (the launcher forked after the demo seed loaded Lance, through a
    ``preexec_fn``) nor Dagster's storage-migration INFO lines (alembic, two dozen of them)."""
    ui, flight, rest = free_ports(3)
    proc = lake_up(tmp_path, ui, flight, rest)
    assert proc.stdout is not None
    lines = []
    try:
        for line in proc.stdout:
            lines.append(line.rstrip("\n"))
            if "Ctrl-C stops everything" in line:
                break
        proc.send_signal(signal.SIGINT)
        lines += proc.communicate(timeout=120)[0].splitlines()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(30)
    assert proc.returncode == 0, "\n".join(lines)
    home = (tmp_path / "home").resolve()
    assert lines[:5] == [
        f"lake home      {home}",
        "starting Dagster (webserver + daemon), Flight SQL and the Lance REST server ...",
        f"Dagster UI     http://127.0.0.1:{ui}",
        f"Flight SQL     grpc://127.0.0.1:{flight}",
        f"Lance REST     http://127.0.0.1:{rest} (Lance Namespace spec; see docs/rest.md)",
    ], "\n".join(lines)
    assert "Next steps:" in lines and lines[-2:] == ["stopping ...", "stopped"]
    for line in lines:
        assert "fork" not in line and "Warning" not in line and "Traceback" not in line, line
        assert not re.match(r"(DEBUG|INFO) ", line), line


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_lake_json_up_prints_one_json_document_on_stdout_and_its_progress_on_stderr(tmp_path: Path) -> None:
    """`lake --json up | jq .rest_url`: stdout is the started platform as one JSON object, once
    every server answers, and nothing else; the progress lines and the stop go to stderr. Before,
    "lake home ...", "starting ..." and the banner's text were on stdout around no JSON at all."""
    ui, flight, rest = free_ports(3)
    proc = lake_up(tmp_path, ui, flight, rest, as_json=True)
    assert proc.stdout is not None
    head = []
    try:
        for line in proc.stdout:
            head.append(line)
            # The object's last line (indented: its own line); the text banner's, were it printed.
            if line.rstrip("\n") == "}" or "Ctrl-C stops everything" in line:
                break
        # The started platform also stands as the first `lake up` on its home (test_home_lock).
        a_second_lake_up_on_the_home_is_refused(tmp_path, proc)
        proc.send_signal(signal.SIGINT)
        rest_of_stdout, stderr = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(30)
    assert proc.returncode == 0, (head, stderr)
    started = json.loads("".join(head) + rest_of_stdout)  # the whole of stdout: one document
    assert started["ui_url"] == f"http://127.0.0.1:{ui}"
    assert started["flight_url"] == f"grpc://127.0.0.1:{flight}"
    assert started["rest_url"] == f"http://127.0.0.1:{rest}"
    assert started["home"] == str((tmp_path / "home").resolve())
    assert started["demo_table"] == "demo.main.sales.orders" and len(started["seeded_files"]) == 3
    assert started["demo_user"]["name"] and started["demo_user"]["password"]
    lines = stderr.splitlines()
    assert lines[:2] == [
        f"lake home      {(tmp_path / 'home').resolve()}",
        "starting Dagster (webserver + daemon), Flight SQL and the Lance REST server ...",
    ] and lines[-2:] == ["stopping ...", "stopped"], stderr


def a_second_lake_up_on_the_home_is_refused(tmp_path: Path, first: subprocess.Popen[str]) -> None:
    """One `lake up` per LAKE_HOME: a second one on the started ``first``'s home, on other ports,
    is refused before it starts anything and the first runs on. Both started: two Dagster daemons
    ran the same sensors and schedules over one Dagster storage and one lake (each ran every
    tick), and two demo seeds raced."""
    ui, flight, rest = free_ports(3)
    second = lake_up(tmp_path, ui, flight, rest)
    try:
        out = second.communicate(timeout=120)[0]
    finally:
        if second.poll() is None:
            second.kill()
            second.wait(30)
    assert second.returncode == 1, out
    home = (tmp_path / "home").resolve()
    assert out.splitlines()[-1] == (
        f"error [17 SERVICE_UNAVAILABLE]: another `lake up` (pid {first.pid}) runs on LAKE_HOME "
        f"{home}: stop it first, or give this one its own LAKE_HOME"
    ), out
    assert "Dagster UI" not in out and "Traceback" not in out
    for port in (ui, flight, rest):  # the second started no server
        with socket.socket() as sock:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind(("127.0.0.1", port))
    assert first.poll() is None


def test_lake_json_up_on_a_taken_port_is_a_json_error_and_nothing_else_on_stdout(tmp_path: Path) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        ui, rest = free_ports(2)
        proc = lake_up(tmp_path, ui, busy.getsockname()[1], rest, as_json=True)
        out, err = proc.communicate(timeout=120)
    assert proc.returncode == 1, (out, err)
    assert json.loads(out)["error"]["error"] == "ServiceUnavailable", out
    assert "starting Dagster" in err


def test_lake_up_on_a_taken_port_fails_before_it_starts_anything(tmp_path: Path) -> None:
    """A port another program holds is a typed error naming it and the option that sets it,
    before any server starts, the demo is seeded or Dagster's storage is created."""
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        taken = busy.getsockname()[1]
        ui, rest = free_ports(2)
        proc = lake_up(tmp_path, ui, taken, rest)
        out = proc.communicate(timeout=120)[0]
    assert proc.returncode == 1, out
    assert re.search(
        rf"error \[\d+ SERVICE_UNAVAILABLE\]: cannot listen on 127\.0\.0\.1:{taken}: .+ "
        r"\(for Flight SQL \(--flight-port, LAKE_FLIGHT_PORT\)\)",
        out,
    ), out
    assert "Dagster UI" not in out and "Next steps" not in out and "Traceback" not in out
    assert not (tmp_path / "home" / "dagster").exists()


def listening_before_a_free_port() -> socket.socket:
    """A listening socket whose port's next one is free: REST's metrics port is the next one
    after Flight's, and must bind for Flight's to be the failure (another test worker's
    connection once held it)."""
    while True:
        busy = socket.socket()
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        with socket.socket() as probe:
            try:
                probe.bind(("127.0.0.1", busy.getsockname()[1] + 1))
            except OSError:
                busy.close()
                continue
        return busy


@pytest.mark.slow
def test_a_server_that_exits_during_start_up_fails_lake_up_with_its_error(tmp_path: Path) -> None:
    """Flight's metrics port is taken (only the Flight process binds it): `lake up` stops what
    it started and fails with a typed error that names the process and ends with its own
    error line, instead of an untyped RuntimeError pointing at a folder of logs."""
    with listening_before_a_free_port() as busy:
        taken = busy.getsockname()[1]
        ui, flight, rest = free_ports(3)
        proc = lake_up(tmp_path, ui, flight, rest, {"LAKE_METRICS_PORT": str(taken)})
        out = proc.communicate(timeout=300)[0]
    assert proc.returncode == 1, out
    assert re.search(
        r"error \[\d+ SERVICE_UNAVAILABLE\]: the flight process exited during start-up \(exit 1\): "
        rf"error \[\d+ SERVICE_UNAVAILABLE\]: .*{taken}.*; its log: \S+flight\.log",
        out,
    ), out
    assert "Dagster UI" not in out and "Traceback" not in out


def test_ctrl_c_during_start_up_stops_what_started_and_says_so(tmp_path: Path) -> None:
    """Ctrl-C before the platform answers: once click's bare "Aborted!" (exit 1); now it says
    what it did and exits 130, as a shell reports an interrupted command, and every port is
    free again."""
    ui, flight, rest = free_ports(3)
    proc = lake_up(tmp_path, ui, flight, rest)
    assert proc.stdout is not None
    lines = [proc.stdout.readline().rstrip("\n") for _ in range(2)]
    assert lines[1].startswith("starting Dagster"), lines  # the handler is in place by now
    proc.send_signal(signal.SIGINT)
    lines += proc.communicate(timeout=120)[0].splitlines()
    assert proc.returncode == 130, "\n".join(lines)
    assert lines[2:] == ["", "interrupted during start-up; everything started was stopped"], lines
    for port in (ui, flight, rest):  # nothing listens (a closed connection may linger: reuse)
        with socket.socket() as sock:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind(("127.0.0.1", port))
            sock.listen()


def test_lake_up_on_a_home_it_cannot_create_names_it(tmp_path: Path) -> None:
    """LAKE_HOME under a file (or on a read-only disk): a typed error naming the folder, not
    INTERNAL 'unexpected error (NotADirectoryError)', and nothing started."""
    (tmp_path / "afile").write_text("")
    proc = lake_up(tmp_path / "afile", *free_ports(3))
    out = proc.communicate(timeout=120)[0]
    assert proc.returncode == 2, out
    home = tmp_path / "afile" / "home"
    assert out.splitlines()[-1] == (
        f"error [13 INVALID_INPUT]: cannot use {home}: Not a directory (LAKE_HOME is {home})"
    ), out


def test_lake_up_with_two_servers_on_one_port_fails_before_it_starts_anything(tmp_path: Path) -> None:
    """--flight-port equal to --port: both were free when checked one at a time, then the UI's
    readiness check met Flight's gRPC answer (INTERNAL 'unexpected error (BadStatusLine)')."""
    ui, rest = free_ports(2)
    proc = lake_up(tmp_path, ui, ui, rest)
    out = proc.communicate(timeout=120)[0]
    assert proc.returncode == 2, out
    assert out.splitlines()[-1] == (
        f"error [13 INVALID_INPUT]: the Dagster UI (--port, LAKE_UI_PORT) and Flight SQL (--flight-port, "
        f"LAKE_FLIGHT_PORT) are both given port {ui}"
    ), out
    assert not (tmp_path / "home" / "dagster").exists()
