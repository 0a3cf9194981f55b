"""The SQLite registry on a real full disk (a tmpfs filled to its last byte, in a private mount
namespace: ``engine/small_disk``): every write is refused as ServiceUnavailable naming the full
disk, nothing of it is written, and the same store writes again once space is back."""

from __future__ import annotations

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
