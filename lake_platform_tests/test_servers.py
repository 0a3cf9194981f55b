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


def test_a_server_started_with_die_with_parent_stops_when_its_parent_is_killed() -> None:
    parent = subprocess.Popen(
        [sys.executable, "-c", PARENT], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    assert parent.stdout is not None
    child = int(parent.stdout.readline())
    watch = os.pidfd_open(child)  # readable once the child has exited
    try:
        assert select.select([watch], [], [], 0)[0] == []  # alive while its parent is
        parent.send_signal(signal.SIGKILL)
        parent.wait(timeout=30)
        assert select.select([watch], [], [], 30)[0] == [watch], "the child outlived its killed parent"
    finally:
        os.close(watch)
        if parent.stdin is not None:
            parent.stdin.close()


POSTGRES_PARENT = """
import sys
from lake_platform_tests.postgres import start_postgres
pg = start_postgres()
print(pg.process.pid, pg.root, flush=True)
sys.stdin.read()  # until killed
"""


def test_the_postgres_cluster_stops_when_the_test_process_is_killed() -> None:
    """The cluster's postmaster is a child of the test process (not daemonized by pg_ctl), so a
    killed run does not leave it holding its port, its folder and its shared memory."""
    parent = subprocess.Popen(
        [sys.executable, "-c", POSTGRES_PARENT], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    assert parent.stdout is not None
    pid, root = parent.stdout.readline().split()
    watch = os.pidfd_open(int(pid))
    try:
        assert select.select([watch], [], [], 0)[0] == []
        parent.send_signal(signal.SIGKILL)
        parent.wait(timeout=30)
        assert select.select([watch], [], [], 60)[0] == [watch], "postgres outlived its killed test process"
    finally:
        os.close(watch)
        if parent.stdin is not None:
            parent.stdin.close()
        shutil.rmtree(root, ignore_errors=True)  # no fixture teardown ran: remove what it left
