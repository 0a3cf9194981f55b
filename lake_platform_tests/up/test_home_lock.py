"""One `lake up` per LAKE_HOME: a second one on the same home, on other ports, is refused before
it starts anything; the lock a killed or stopped run held is not in the way of the next."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
from pathlib import Path

import pytest

from lake_platform_tests.servers import free_ports
from lake_platform_tests.up.test_launcher_start import lake_up


def _stop(proc: subprocess.Popen[str]) -> None:
    if proc.poll() is None:
        proc.kill()
        proc.wait(30)


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_a_second_lake_up_on_one_home_is_refused_and_the_first_runs_on(tmp_path: Path) -> None:
    """Both started: two Dagster daemons ran the same sensors and schedules over one Dagster
    storage and one lake (each ran every tick), and two demo seeds raced."""
    first = lake_up(tmp_path, *free_ports(3), as_json=True)
    second: subprocess.Popen[str] | None = None
    assert first.stdout is not None
    try:
        for line in first.stdout:
            if line.rstrip("\n") == "}":  # started: every server answers
                break
        ui, flight, rest = free_ports(3)
        second = lake_up(tmp_path, ui, flight, rest)
        out = second.communicate(timeout=120)[0]
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
        first.send_signal(signal.SIGINT)
        first.communicate(timeout=120)
        assert first.returncode == 0
    finally:
        _stop(first)
        if second is not None:
            _stop(second)


def test_the_lock_of_a_run_that_ended_is_not_in_the_way(tmp_path: Path) -> None:
    """The kernel drops the lock with its holder (a kill -9 included): the file that stays
    behind, naming a pid that is gone, locks nothing."""
    from lake_platform.errors import ServiceUnavailable
    from lake_platform.up.home_lock import lock_home

    held = lock_home(tmp_path)
    with pytest.raises(ServiceUnavailable, match=f"another `lake up` \\(pid {os.getpid()}\\)"):
        lock_home(tmp_path)
    held.release()
    (tmp_path / "up.lock").write_text("999999999\n")  # a dead run's
    lock_home(tmp_path).release()
    assert oct((tmp_path / "up.lock").stat().st_mode & 0o777) == "0o600"
