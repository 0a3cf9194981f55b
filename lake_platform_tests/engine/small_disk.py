"""Run a probe on a small real file system: ``python -m <module> <args>`` in a private mount
namespace with a tmpfs of a few MiB mounted at a folder, so writes there fail with ENOSPC, the
real error, with nothing faked. The mount disappears with the process.

Mounting needs root (CI runs ``make test`` as root: ``unshare --mount``) or, for anyone else,
unprivileged user namespaces (``unshare --mount --map-root-user``, on by default on most
Linux distributions). Where neither is possible the test is skipped with that reason (shown
by ``pytest -rs``); as root a failure to mount fails the test.

The probe prints its observations as one JSON object on its last line of output.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

_CANNOT_MOUNT = 97
_MOUNT = 'mount -t tmpfs -o size="$1",mode=0700 tmpfs "$2" || exit 97; shift 2; exec "$@"'


def run_on_tmpfs(mount: Path, size: str, module: str, *args: str, timeout: float = 600) -> dict[str, Any]:
    """``module``'s observations, run with a tmpfs of ``size`` (e.g. ``"8m"``) at ``mount``."""
    mount.mkdir(parents=True, exist_ok=True)
    as_root = os.geteuid() == 0
    unshare = ["unshare", "--mount", "--propagation", "private", *([] if as_root else ["--map-root-user"])]
    command = [*unshare, "sh", "-c", _MOUNT, "sh", size, str(mount), sys.executable, "-m", module, *args]
    done = subprocess.run(command, capture_output=True, text=True, timeout=timeout, check=False)  # noqa: S603
    if done.returncode == _CANNOT_MOUNT or (done.returncode != 0 and "unshare:" in done.stderr):
        if as_root:
            pytest.fail(f"could not mount a tmpfs as root: {done.stderr.strip()}")
        pytest.skip(
            "needs root or unprivileged user namespaces to mount a small tmpfs "
            f"(unshare said: {done.stderr.strip()[:200]})"
        )
    assert done.returncode == 0, f"the probe failed:\n{done.stdout[-3000:]}\n{done.stderr[-6000:]}"
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


def open_deleted_files(under: Path) -> list[str]:
    """Files under ``under`` this process holds open although they were deleted (their space
    is not freed until they are closed)."""
    found = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if target.startswith(str(under)) and target.endswith("(deleted)"):
            found.append(target)
    return found


def free_fraction(path: Path) -> float:
    stat = os.statvfs(path)
    return stat.f_bavail / stat.f_blocks
