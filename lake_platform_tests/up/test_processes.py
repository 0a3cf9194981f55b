"""A child started with ``die_with_parent`` does not outlive a parent that is killed (which runs
no cleanup)."""

from __future__ import annotations

from lake_platform_tests.servers import killed_parent

PARENT = """
import subprocess, sys
from lake_platform.up.processes import die_with_parent
child = subprocess.Popen(["sleep", "600"], preexec_fn=die_with_parent)
print(child.pid, flush=True)
sys.stdin.read()  # until killed
"""

#: The parent as Dagster can leave a process: SIGTERM mapped to SIGINT's handler, which is
#: SIG_IGN when a CI runner starts the job in the background.
IGNORING_PARENT = "import signal\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\n" + PARENT


def test_a_child_started_with_die_with_parent_stops_when_its_parent_is_killed() -> None:
    killed_parent(PARENT, within=30)


def test_a_child_stops_with_its_parent_though_the_parent_ignores_sigterm() -> None:
    killed_parent(IGNORING_PARENT, within=30)
