"""`lake up`'s Dagster servers run through ``dagster_program``: the program's own console
script, in a process whose heap is frozen when the program returns, so that its exit skips the
interpreter's final walk of Dagster's objects (a second or more of each server's stop)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from lake_platform.up import dagster_program

#: The program's exit, caught to report how much of the heap was frozen on the way out.
RUN = """
import gc, sys
from lake_platform.up.dagster_program import main
try:
    main(sys.argv[1:])
except SystemExit as exit:
    print("exit", exit.code, "frozen", gc.get_freeze_count(), flush=True)
"""


def test_a_program_runs_its_console_script_and_returns_with_its_heap_frozen() -> None:
    proc = subprocess.run(
        [sys.executable, "-c", RUN, "dagster-daemon", "--version"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    *printed, last = proc.stdout.splitlines()
    assert printed == [f"dagster-daemon, version {_dagster_version()}"], proc.stdout
    word, code, frozen, count = last.split()
    assert (word, code, frozen) == ("exit", "0", "frozen"), last
    assert int(count) > 10_000  # Dagster's imports, kept from the final collections


def test_the_command_runs_this_module_with_this_python_for_dagster_programs_only() -> None:
    assert dagster_program.command("dagster-webserver", "-p", "3000") == [
        sys.executable,
        "-m",
        "lake_platform.up.dagster_program",
        "dagster-webserver",
        "-p",
        "3000",
    ]
    with pytest.raises(ValueError, match="not a Dagster program"):
        dagster_program.command("lake", "up")


def test_a_program_not_installed_is_named() -> None:
    with pytest.raises(SystemExit, match="no-such-dagster-program is not installed"):
        dagster_program.main(["no-such-dagster-program"])


def _dagster_version() -> str:
    from importlib.metadata import version

    return version("dagster")
