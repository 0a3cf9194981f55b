"""A child started through ``bound_to_parent`` (or with ``die_with_parent``) does not outlive a
parent that is killed (which runs no cleanup), and starting one forks nothing in Python."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from lake_platform.up.processes import bound_to_parent
from lake_platform_tests.servers import killed_parent

PARENT = """
import subprocess, sys
from lake_platform.up.processes import bound_to_parent
child = subprocess.Popen(bound_to_parent(["sleep", "600"]))
print(child.pid, flush=True)
sys.stdin.read()  # until killed
"""

#: The parent as Dagster can leave a process: SIGTERM mapped to SIGINT's handler, which is
#: SIG_IGN when a CI runner starts the job in the background.
IGNORING_PARENT = "import signal\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\n" + PARENT


def test_a_child_started_bound_to_its_parent_stops_when_the_parent_is_killed() -> None:
    killed_parent(PARENT, within=30)


def test_a_child_stops_with_its_parent_though_the_parent_ignores_sigterm() -> None:
    killed_parent(IGNORING_PARENT, within=30)


#: A parent started as a CI runner starts a job in the background: SIGINT ignored. Its child
#: maps SIGTERM to SIGINT's handler, as Dagster's code server and daemon do, and says whether
#: SIGTERM would then stop it.
BACKGROUND_PARENT = """
import signal, subprocess, sys
from lake_platform.up.processes import bound_to_parent
signal.signal(signal.SIGINT, signal.SIG_IGN)
child = (
    "import signal; signal.signal(signal.SIGTERM, signal.getsignal(signal.SIGINT)); "
    "print(signal.getsignal(signal.SIGTERM) is signal.default_int_handler)"
)
subprocess.run(bound_to_parent([sys.executable, "-c", child]), check=True)
"""


def test_a_child_of_a_background_job_still_stops_on_sigterm() -> None:
    """An ignored SIGINT is inherited across exec, and Python installs no handler for a signal
    ignored at start-up: a Dagster process started by ``lake up`` in the background mapped
    SIGTERM to that ignored handler, and ``lake up``'s stop waited out its timeout."""
    out = subprocess.run(
        [sys.executable, "-c", BACKGROUND_PARENT], capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["True"]


FORK_WATCH = """
import os, subprocess, sys
from lake_platform.up.processes import bound_to_parent, die_with_parent
os.register_at_fork(before=lambda: print("forked", flush=True))
subprocess.run(bound_to_parent(["true"]), check=True)
print("bound_to_parent done", flush=True)
subprocess.run(["true"], preexec_fn=die_with_parent, check=True)
"""


def test_starting_a_bound_child_runs_no_fork_handlers() -> None:
    """Lance warns from a fork handler ("lance is not fork-safe"): a child started through
    ``bound_to_parent`` runs none (no Python code between fork and exec), where a
    ``preexec_fn`` makes Python fork and run them."""
    out = subprocess.run([sys.executable, "-c", FORK_WATCH], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == ["bound_to_parent done", "forked"]


def test_the_command_does_not_start_when_the_parent_is_already_gone(tmp_path: Path) -> None:
    """A parent that died before the wrapper set the signal would send none: the wrapper then
    finds another parent than the one it was given, and does not exec the command."""
    marker = tmp_path / "started"
    command = bound_to_parent(["touch", str(marker)])
    not_the_parent = [*command[:3], str(os.getpid() + 1), *command[4:]]  # as if reparented
    out = subprocess.run(not_the_parent, capture_output=True, text=True, timeout=60)
    assert out.returncode != 0 and "has exited" in out.stderr
    assert not marker.exists()
    subprocess.run(command, check=True, timeout=60)
    assert marker.exists()
