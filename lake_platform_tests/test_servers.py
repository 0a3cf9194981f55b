"""Test servers do not outlive a test process that is killed (no fixture teardown runs then)."""

from __future__ import annotations

import os
import select
import shutil
import signal
import subprocess
import sys

PARENT = """
import subprocess, sys
from lake_platform_tests.servers import die_with_parent
child = subprocess.Popen(["sleep", "600"], preexec_fn=die_with_parent)
print(child.pid, flush=True)
sys.stdin.read()  # until killed
"""

#: The test process as Dagster can leave it: SIGTERM mapped to SIGINT's handler, which is
#: SIG_IGN when a CI runner starts the job in the background.
IGNORING_PARENT = "import signal\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\n" + PARENT

POSTGRES_PARENT = """
import sys
from lake_platform_tests.postgres import start_postgres
pg = start_postgres()
print(pg.process.pid, pg.root, flush=True)
sys.stdin.read()  # until killed
"""


def killed_parent(code: str, within: float) -> list[str]:
    """Run ``code`` (which prints its server's pid, then anything else, on one line) as a parent
    process, kill it with SIGKILL, and assert the server exits within ``within`` seconds.
    Returns the rest of the printed line."""
    parent = subprocess.Popen(
        [sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    assert parent.stdout is not None
    pid, *rest = parent.stdout.readline().split()
    watch = os.pidfd_open(int(pid))  # readable once the server has exited
    try:
        assert select.select([watch], [], [], 0)[0] == []  # alive while its parent is
        parent.send_signal(signal.SIGKILL)
        parent.wait(timeout=30)
        assert select.select([watch], [], [], within)[0] == [watch], "the server outlived its killed parent"
    finally:
        os.close(watch)
        if parent.stdin is not None:
            parent.stdin.close()
    return rest


def test_a_server_started_with_die_with_parent_stops_when_its_parent_is_killed() -> None:
    killed_parent(PARENT, within=30)


def test_a_server_stops_with_its_parent_though_the_parent_ignores_sigterm() -> None:
    killed_parent(IGNORING_PARENT, within=30)


def test_the_postgres_cluster_stops_when_the_test_process_is_killed() -> None:
    """The cluster's postmaster is a child of the test process (not daemonized by pg_ctl), so a
    killed run does not leave it holding its port, its folder and its shared memory."""
    [root] = killed_parent(POSTGRES_PARENT, within=60)
    shutil.rmtree(root, ignore_errors=True)  # no fixture teardown ran: remove what it left
