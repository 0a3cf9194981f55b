"""The SQLite registry on a real full disk (a tmpfs filled to its last byte, in a private mount
namespace: ``engine/small_disk``): every write is refused as ServiceUnavailable naming the full
disk, nothing of it is written, and the same store writes again once space is back."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path


def test_a_full_disk_refuses_every_write_typed_and_writes_nothing(tmp_path: Path) -> None:
    """A batch's COMMIT failing for space made SQLite roll the transaction back itself; the
    store's ROLLBACK after it then raised sqlite3.OperationalError 'cannot rollback - no
    transaction is active', untyped, and the full disk went unsaid."""
    from lake_platform_tests.engine.small_disk import run_on_tmpfs

    seen = run_on_tmpfs(
        tmp_path / "disk", "1m", "lake_platform_tests.registry.full_disk_probe", str(tmp_path / "disk")
    )
    for name, outcome in seen["writes"].items():
        assert outcome[0] == "ServiceUnavailable", (name, outcome)
        assert "database or disk is full" in outcome[1], (name, outcome)
    assert seen["unchanged"]
    assert seen["after"] == 2


def test_a_damaged_registry_file_is_a_typed_error_on_every_call(tmp_path: Path) -> None:
    """Pages of the registry's file overwritten (a bad disk, a copy taken mid-write): every read
    and write raised sqlite3.DatabaseError ('database disk image is malformed'), untyped. Now
    Internal naming the damage, and nothing is written."""
    import os

    import pytest

    from lake_platform.errors import Internal
    from lake_platform.registry.sqlite import SqliteMetaStore
    from lake_platform.registry.store import ABSENT, Put

    path = tmp_path / "registry.db"
    store = SqliteMetaStore(path)
    for i in range(300):
        store.put_if_absent(f"x/{i:04d}", os.urandom(2000))
    store.close()
    with path.open("r+b") as damaged:
        # Every page but the first (the schema) starts with a garbled leaf header.
        for at in range(4096, path.stat().st_size, 4096):
            damaged.seek(at)
            damaged.write(b"\x0d\x00\x00\x00\x09\xff\xff" * 50)
    store = SqliteMetaStore(path)
    calls: dict[str, Callable[[], object]] = {
        "get": lambda: store.get("x/0150"),
        "get_many": lambda: store.get_many(["x/0100", "x/0200"]),
        "scan": lambda: list(store.scan_prefix("x/")),
        "put": lambda: store.compare_and_swap("x/0150", 1, b"v"),
        "batch": lambda: store.transact([Put("x/0150", b"v", 1), Put("x/new", b"v", ABSENT)]),
    }
    for call in calls.values():
        with pytest.raises(Internal, match="registry database is damaged: database disk image"):
            call()
    store.close()
