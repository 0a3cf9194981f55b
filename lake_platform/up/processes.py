"""Child processes that do not outlive the process that started them.

A parent that is killed (SIGKILL, the OOM killer, a crash) runs no cleanup, so children it
would have stopped keep running: ``lake up``'s Dagster, Flight SQL and REST servers would hold
their ports and the lake, and a test server or a bench's endpoint would outlive its run.
``die_with_parent`` as a ``Popen`` ``preexec_fn`` has the kernel signal the child instead.
"""

from __future__ import annotations

import ctypes
import signal

_PR_SET_PDEATHSIG = 1
#: libc, loaded in the parent: ``preexec_fn`` runs between fork and exec, where loading a
#: library could wait forever on a loader lock another thread of the parent held at the fork.
_LIBC = ctypes.CDLL(None, use_errno=True)


def die_with_parent(sig: int = signal.SIGTERM) -> None:
    """``preexec_fn``: the kernel sends this child ``sig`` (SIGTERM) when its parent dies. Kept
    across ``exec`` (and set after ``Popen(user=...)`` switches the user, which would clear it);
    Linux only.

    The kernel watches the parent's *thread* that started the child, so start such children
    from a thread that lives as long as they should (the main thread).

    ``sig`` is set back to its default action first: an ignored signal is inherited across
    ``exec``, and the parent may ignore SIGTERM by the time it starts a child (Dagster maps
    SIGTERM to SIGINT's handler when it runs a job in process, and SIGINT is ignored in a job a
    CI runner starts in the background). Such a child would ignore both this signal and its
    parent's ``terminate()``."""
    if signal.getsignal(sig) == signal.SIG_IGN:
        signal.signal(sig, signal.SIG_DFL)
    if _LIBC.prctl(_PR_SET_PDEATHSIG, int(sig), 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_PDEATHSIG) failed")
