"""`lake up`'s one Dagster code server: the wait for it to answer ends as soon as it exits, with
its own error, and a port nothing listens on is "not yet", not an error. Its start with the
definitions, shared by the webserver and the daemon, is what test_launcher's platform runs on."""

from __future__ import annotations

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
