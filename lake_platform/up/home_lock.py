"""One ``lake up`` per LAKE_HOME. A second one on the same home (other ports, so no port check
stops it) started a second Dagster daemon over the same Dagster storage and lake: every sensor
and schedule ran twice each tick, and the two demo seeds raced.

The lock is an ``flock`` on ``<home>/up.lock``, held by the launcher while its servers run: the
kernel drops it with the process however that ends (kill -9 included), so a run that died leaves
no stale lock behind; the file's pid only names the holder in the refusal. The descriptor is not
inherited by the servers (Python opens files non-inheritable), so the lock ends with the launcher.
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

from lake_platform import owner_only
from lake_platform.errors import ServiceUnavailable

LOCK_FILE = "up.lock"


class HomeLock:
    """A held lock: ``release()`` (idempotent) lets the next ``lake up`` on the home start."""

    def __init__(self, fd: int) -> None:
        self._fd: int | None = fd

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)  # closing the last descriptor drops the flock
            self._fd = None


def lock_home(home: Path) -> HomeLock:
    """Lock ``home`` for this process's ``lake up``; ServiceUnavailable naming the running one
    (by pid) when another holds it."""
    fd = owner_only.open_file(home / LOCK_FILE, os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = os.pread(fd, 32, 0).decode("ascii", "replace").strip() or "?"
        os.close(fd)
        raise ServiceUnavailable(
            f"another `lake up` (pid {holder}) runs on LAKE_HOME {home}: stop it first, or give this "
            "one its own LAKE_HOME"
        ) from None
    except BaseException:
        os.close(fd)
        raise
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{os.getpid()}\n".encode("ascii"), 0)
    return HomeLock(fd)
