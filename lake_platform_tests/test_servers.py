"""Test servers do not outlive a test process that is killed (no fixture teardown runs then);
``bound_to_parent`` itself: up/test_processes.py."""

from __future__ import annotations

import shutil

from lake_platform_tests.servers import killed_parent

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
    [root] = killed_parent(POSTGRES_PARENT, within=60)
    shutil.rmtree(root, ignore_errors=True)  # no fixture teardown ran: remove what it left
