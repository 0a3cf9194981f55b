"""Test servers do not outlive a test process that is killed (no fixture teardown runs then)."""

from __future__ import annotations

import os
import select
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
