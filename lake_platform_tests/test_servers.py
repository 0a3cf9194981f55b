"""Test servers do not outlive a test process that is killed (no fixture teardown runs then)."""

from __future__ import annotations

import shutil

from lake_platform_tests.servers import killed_parent

PARENT = """
import subprocess, sys
from lake_platform.processes import die_with_parent
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


def test_a_server_started_with_die_with_parent_stops_when_its_parent_is_killed() -> None:
    killed_parent(PARENT, within=30)


def test_a_server_stops_with_its_parent_though_the_parent_ignores_sigterm() -> None:
    killed_parent(IGNORING_PARENT, within=30)


def test_the_postgres_cluster_stops_when_the_test_process_is_killed() -> None:
    """The cluster's postmaster is a child of the test process (not daemonized by pg_ctl), so a
    killed run does not leave it holding its port, its folder and its shared memory."""
    [root] = killed_parent(POSTGRES_PARENT, within=60)
    shutil.rmtree(root, ignore_errors=True)  # no fixture teardown ran: remove what it left
