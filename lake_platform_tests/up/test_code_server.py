"""`lake up`'s one Dagster code server: the wait for it to answer ends as soon as it exits, with
its own error, and a port nothing listens on is "not yet", not an error. Its start with the
definitions, shared by the webserver and the daemon, is what test_launcher's platform runs on."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from lake_platform.errors import ServiceUnavailable
from lake_platform.up.code_server import free_port, serving
from lake_platform.up.launcher import Platform
from lake_platform.up.readiness import wait_code_server


def test_a_port_nothing_listens_on_is_not_serving_yet() -> None:
    assert serving("127.0.0.1", free_port("127.0.0.1"), wait=0.2) is False


def test_a_code_server_that_exits_during_start_up_fails_the_wait_with_its_error(tmp_path: Path) -> None:
    """A definitions module that fails to import ends ``dagster api grpc`` with the error as the
    last line of its log: the wait names the process and quotes it, rather than waiting out its
    timeout."""
    log = open(tmp_path / "code-server.log", "ab")  # noqa: SIM115 - closed by Platform.stop
    proc = subprocess.Popen(
        [sys.executable, "-c", "raise SystemExit('ImportError: cannot import name lake_defs')"],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    platform = Platform("", tmp_path, "", "", [], processes=[proc], logs=[log], names=["code-server"])
    try:
        with pytest.raises(ServiceUnavailable) as raised:
            wait_code_server(platform, "127.0.0.1", free_port("127.0.0.1"), timeout=120)
    finally:
        platform.stop()
    assert raised.value.message == (
        "the code-server process exited during start-up (exit 1): ImportError: cannot import name "
        f"lake_defs; its log: {tmp_path / 'code-server.log'}"
    )


def test_the_code_server_creates_dagster_s_storages_before_its_program_runs(tmp_path: Path) -> None:
    """``lake up`` starts the code server first and the webserver and the daemon once it answers:
    the storages it made before loading anything are there, made once, when they open them (and
    the launcher itself no longer imports Dagster to make them)."""
    from lake_platform.settings import load_settings
    from lake_platform.up.code_server import command
    from lake_platform.up.launcher import write_dagster_home

    home = write_dagster_home(load_settings(home=tmp_path / "lake"), ("127.0.0.1", 4000))
    assert not list(home.glob("**/*.db"))
    started = command("127.0.0.1", 4000, home)
    assert started[:6] == [sys.executable, "-m", "lake_platform.up.code_server", str(home), "--", "dagster"]
    proc = subprocess.run(
        [*started[:6], "--version"],
        env={**os.environ, "DAGSTER_HOME": str(home)},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0 and ", version 1." in proc.stdout, proc.stderr
    assert {p.name for p in home.glob("**/*.db")} >= {"runs.db", "schedules.db", "index.db"}


def test_the_code_server_s_command_line_is_checked() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "lake_platform.up.code_server", "/nowhere", "dagster"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 1 and "usage: python -m lake_platform.up.code_server" in proc.stderr
