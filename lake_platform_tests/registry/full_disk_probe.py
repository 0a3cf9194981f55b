"""The SQLite registry on a tmpfs filled to the last byte (run by
``engine/small_disk.run_on_tmpfs``): writes of each shape while the disk is full, then the same
store once space is back. Prints, per write, the error's type and message, and the registry's
contents before and after.

``python -m lake_platform_tests.registry.full_disk_probe FOLDER``
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from lake_platform.registry.sqlite import SqliteMetaStore
from lake_platform.registry.store import ABSENT, Op, Put

PAD = b"v" * 3000


def fill(folder: Path) -> Path:
    """A file taking every free byte of ``folder``'s file system."""
    filler = folder / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        while True:
            os.write(fd, b"x" * 4096)
    except OSError:
        pass
    finally:
        os.close(fd)
    return filler


def main(folder: Path) -> None:
    store = SqliteMetaStore(folder / "registry.db")
    for i in range(10):
        store.transact([Put(f"tbl/t{i}", PAD, ABSENT), Put(f"log/t{i}", PAD, ABSENT)])
    before = [(i.key, i.revision) for i in store.scan_prefix("")]
    filler = fill(folder)
    writes: dict[str, list[Op]] = {
        "batch": [Put(f"tbl/n{i}", PAD, ABSENT) for i in range(8)],
        "commit": [Put("tbl/t1", PAD * 2, 1), Put("ver/t1/2", PAD, ABSENT), Put("log/t1/2", PAD, ABSENT)],
        "single": [Put("x/big", PAD * 20, ABSENT)],
    }
    seen: dict[str, object] = {}
    for name, ops in writes.items():
        try:
            store.transact(ops)
            seen[name] = "written"
        except Exception as exc:  # noqa: BLE001 - what escapes is the observation
            seen[name] = [type(exc).__name__, str(exc)]
    during = [(i.key, i.revision) for i in store.scan_prefix("")]
    filler.unlink()
    store.transact(writes["commit"])
    after = store.get("tbl/t1")
    print(
        json.dumps(
            {
                "writes": seen,
                "unchanged": during == before,
                "after": after.revision if after else None,
            }
        )
    )


if __name__ == "__main__":
    main(Path(sys.argv[1]))
