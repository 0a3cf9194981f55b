"""Child processes that do not outlive the process that started them.

A parent that is killed (SIGKILL, the OOM killer, a crash) runs no cleanup, so children it
would have stopped keep running: ``lake up``'s Dagster, Flight SQL and REST servers would hold
their ports and the lake, and a test server or a bench's endpoint would outlive its run.
The kernel signals such a child instead (``prctl(PR_SET_PDEATHSIG)``, kept across ``exec``).

``bound_to_parent(command)`` is the command to start: this module, run as a program, sets the
signal and then ``exec``s the command. The parent runs no Python code between fork and exec
(no ``preexec_fn``), so ``subprocess`` starts the child with vfork or posix_spawn and runs no
fork handlers. A ``preexec_fn`` made Python fork the whole process: after Lance is loaded that
prints Lance's "lance is not fork-safe" warning, and rightly, since a fork taken while its
runtime threads hold locks can deadlock the child before it reaches ``exec``. The wrapper costs
one interpreter start (~0.1 s) per child, for servers that run for hours. A process that is
itself the child (a test's server) calls ``die_with_parent()`` first thing instead.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys
from collections.abc import Sequence

_PR_SET_PDEATHSIG = 1
#: libc, loaded at import: were ``die_with_parent`` run as a ``preexec_fn`` (nothing here does),
#: between fork and exec, loading a library could wait forever on a loader lock another thread
#: of the parent held at the fork.
_LIBC = ctypes.CDLL(None, use_errno=True)


def bound_to_parent(command: Sequence[str], sig: int = signal.SIGTERM) -> list[str]:
    """``command`` as a child that the kernel sends ``sig`` (SIGTERM) when this process dies:
    pass the result to ``subprocess.Popen`` without a ``preexec_fn``. Linux only.

    The kernel watches the parent's *thread* that started the child, so start such children
    from a thread that lives as long as they should (the main thread)."""
    return [sys.executable, "-m", __name__, str(os.getpid()), str(int(sig)), "--", *command]


def die_with_parent(sig: int = signal.SIGTERM) -> None:
    """The kernel sends this process ``sig`` (SIGTERM) when its parent dies. Kept across
    ``exec`` (and set after ``Popen(user=...)`` switches the user, which would clear it).

    ``sig`` and SIGINT are set back to their default actions first: an ignored signal is
    inherited across ``exec``, and a job a CI runner (or a script's ``&``) starts in the
    background ignores SIGINT, so the parent may ignore both by the time it starts a child
    (Dagster maps SIGTERM to SIGINT's handler). Such a child would ignore this signal and its
    parent's ``terminate()``; and a Python child that inherits an ignored SIGINT installs no
    handler for it, so a Dagster server it runs maps SIGTERM to "ignore" in turn."""
    for ignored in {sig, signal.SIGINT}:
        if signal.getsignal(ignored) == signal.SIG_IGN:
            signal.signal(ignored, signal.SIG_DFL)
    if _LIBC.prctl(_PR_SET_PDEATHSIG, int(sig), 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_PDEATHSIG) failed")


def main(argv: Sequence[str]) -> None:
    """``python -m lake_platform.up.processes PARENT_PID SIGNAL -- COMMAND...``"""
    parent, sig, separator, *command = argv
    if separator != "--" or not command:
        raise SystemExit("usage: python -m lake_platform.up.processes PARENT_PID SIGNAL -- COMMAND...")
    die_with_parent(int(sig))
    # A parent that died before the signal was set sends nothing: this process has been
    # handed to another parent already, and its command must not start.
    if os.getppid() != int(parent):
        raise SystemExit(f"the parent process {parent} has exited")
    os.execvp(command[0], command)


if __name__ == "__main__":
    main(sys.argv[1:])
