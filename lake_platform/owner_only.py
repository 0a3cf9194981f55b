"""Files and folders only their owner can read: 0600 and 0700 whatever the process umask.

``LAKE_HOME`` holds password and token hashes (the registry), every tenant's SQL (the audit
trail) and query spill; the results area holds query results. The usual umask (022) would make
all of them world-readable, so everything the platform creates there goes through here. The
process umask itself is never changed: it is shared with every library in the process.
"""

from __future__ import annotations

import os
from pathlib import Path

FILE_MODE = 0o600
DIR_MODE = 0o700


def make_dir(path: str | Path, *, narrow: bool = False) -> Path:
    """Create ``path`` and its missing parents, each 0700. Folders that already exist keep
    their mode (they may be shared, like ``/tmp``, or set by the operator), except ``path``
    itself with ``narrow``: for a folder that is the platform's own (``<LAKE_HOME>/spill``), so
    homes made before this rule are fixed on use."""
    path = Path(path)
    if narrow and path.is_dir() and path.stat().st_uid == os.getuid():
        os.chmod(path, DIR_MODE)
    missing = []
    here = path
    while not here.exists():
        missing.append(here)
        here = here.parent
    for folder in reversed(missing):
        try:
            folder.mkdir(mode=DIR_MODE)
        except FileExistsError:  # another process made it meanwhile: theirs to keep
            continue
        os.chmod(folder, DIR_MODE)  # mkdir's mode is narrowed by the umask, never widened
    return path


def open_file(path: str | Path, flags: int) -> int:
    """``os.open`` creating ``path`` 0600 (in a 0700 folder made if missing). A file of ours
    that exists is narrowed to 0600 too, so homes made before this rule are fixed on use."""
    path = Path(path)
    make_dir(path.parent)
    fd = os.open(path, flags | os.O_CREAT, FILE_MODE)
    try:
        if os.fstat(fd).st_uid == os.getuid():
            os.fchmod(fd, FILE_MODE)
    except BaseException:
        os.close(fd)
        raise
    return fd


def touch(path: str | Path) -> None:
    """Create ``path`` empty and 0600 unless it exists, so a writer that then opens it by name
    (SQLite, pyarrow) keeps that mode."""
    os.close(open_file(path, os.O_RDONLY))


def write_text(path: str | Path, text: str) -> None:
    """Write ``text`` to ``path`` whole, the file 0600 from its creation (never readable by
    others, not even between a write and a chmod)."""
    with os.fdopen(open_file(path, os.O_WRONLY | os.O_TRUNC), "w", encoding="utf-8") as f:
        f.write(text)
