"""A Dagster program (``dagster``, ``dagster-daemon``, ``dagster-webserver``) run in this
process through the console-script entry point its package publishes (what its script in the
environment's ``bin/`` runs), as ``lake up`` starts its code server, daemon and webserver:
``python -m lake_platform.up.dagster_program PROGRAM ARGS...`` (``command``).

The one difference from the script: once the program returns (a stop: SIGTERM, Ctrl-C), the
heap is frozen (``gc.freeze``) before the interpreter exits. Dagster's imports alone leave
hundreds of thousands of objects that the interpreter's final collections walk with nothing to
free, the process being over: 1-2 s of each server's exit on a quiet machine, several seconds on
a busy one, and ``lake up``'s stop waits for the slowest of the three. Frozen objects are not
collected, but module teardown and atexit handlers run as before. (The ``lake`` command freezes
its heap on exit for the same reason, ``cli.app.main``.)
"""

from __future__ import annotations

import gc
import sys
from collections.abc import Sequence

PROGRAMS = ("dagster", "dagster-daemon", "dagster-webserver")


def command(program: str, *args: str) -> list[str]:
    """The command line that runs ``program ARGS...`` with this environment's Python."""
    if program not in PROGRAMS:
        raise ValueError(f"not a Dagster program lake up runs: {program!r} (one of {', '.join(PROGRAMS)})")
    return [sys.executable, "-m", __name__, program, *args]


def main(argv: Sequence[str]) -> None:
    """Run ``argv[0]``'s console-script entry point with ``argv[1:]``; it exits the process
    (click's ``SystemExit``), with the heap frozen on the way out."""
    from importlib.metadata import entry_points  # here: ``lake``'s start-up imports PROGRAMS

    program, *args = argv
    found = entry_points(group="console_scripts", name=program)
    if not found:
        raise SystemExit(f"{program} is not installed in this environment ({sys.executable})")
    run = next(iter(found)).load()
    sys.argv = [program, *args]
    try:
        run()
    finally:
        gc.freeze()


if __name__ == "__main__":
    main(sys.argv[1:])
