"""Who holds a lease, and whether that process is provably gone.

A lease whose holder crashed would otherwise block its table until the deadline. On the holder's
own host we can prove it dead: pids are comparable only inside one boot and one pid namespace
(containers on one kernel share the boot id but not the namespace), and a pid may be reused, so
the record names the process by (boot id, pid namespace, pid, start time). Anything short of
proof (another host, no /proc, a process we may not signal, a record from an older release)
answers "not provably gone", and the deadline stands.
"""

from __future__ import annotations

import logging
import os
import socket
from dataclasses import dataclass

log = logging.getLogger(__name__)

_PROC = "/proc"


@dataclass(frozen=True)
class ProcessIdentity:
    host: str
    host_id: str
    pid: int
    started: int


_cached: tuple[int, ProcessIdentity | None] | None = None


def this_process() -> ProcessIdentity | None:
    """This process's identity, or None where it cannot be established (not Linux)."""
    global _cached
    pid = os.getpid()
    if _cached is not None and _cached[0] == pid:  # recomputed after a fork
        return _cached[1]
    identity = _identify(pid)
    _cached = (pid, identity)
    return identity


def _identify(pid: int) -> ProcessIdentity | None:
    try:
        with open(f"{_PROC}/sys/kernel/random/boot_id") as f:
            boot = f.read().strip()
        pid_ns = os.readlink(f"{_PROC}/self/ns/pid")
        with open(f"{_PROC}/self/stat") as f:
            own = _parse_stat(f.read())
    except (OSError, ValueError):
        return None
    # A /proc that is not this pid namespace's own would answer for other processes.
    if own is None or own[0] != pid or not boot:
        return None
    return ProcessIdentity(socket.gethostname(), f"{boot}/{pid_ns}", pid, own[2])


def _parse_stat(text: str) -> tuple[int, str, int] | None:
    """(pid, state, start time in ticks) from /proc/<pid>/stat; the command name may hold
    spaces and parentheses, so fields are counted from its last ')'."""
    head, _, rest = text.rpartition(")")
    fields = rest.split()
    if not head or len(fields) < 20:
        return None
    return int(head.split("(", 1)[0]), fields[0], int(fields[19])


def provably_gone(host_id: str | None, pid: int | None, started: int | None) -> bool:
    """True only when the recorded process ran on this host and no longer exists (or is a
    zombie, which can do no more I/O)."""
    me = this_process()
    if me is None or host_id is None or pid is None or started is None or host_id != me.host_id:
        return False
    if pid == me.pid:
        return started != me.started
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        pass  # exists, another user's: its stat (if visible) decides
    except OSError:
        return False
    try:
        with open(f"{_PROC}/{pid}/stat") as f:
            stat = _parse_stat(f.read())
    except FileNotFoundError:
        # It exited between the two checks, or /proc hides other users' processes: only a
        # second ESRCH is proof.
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        except OSError:
            return False
        return False
    except (OSError, ValueError):
        return False
    if stat is None:
        return False
    _, state, now_started = stat
    return now_started != started or state in ("Z", "X")
