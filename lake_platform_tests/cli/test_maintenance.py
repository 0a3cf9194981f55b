"""compact, cleanup, and a drop through the trash and back."""

from __future__ import annotations

from pathlib import Path

from click.testing import CliRunner

from lake_platform_tests.cli.conftest import T, run, write_parquet


def test_compact_cleanup_and_drop(lake: CliRunner, tmp_path: Path) -> None:
    run(lake, "table", "create", T, "--from", str(write_parquet(tmp_path / "a.parquet", [1])))
    for i in range(3):
        run(lake, "ingest", T, str(write_parquet(tmp_path / f"b{i}.parquet", [10 + i])))
    assert run(lake, "compact", T)["status"] == "committed"
    assert run(lake, "compact", T)["status"] == "nothing-to-do"
    assert run(lake, "cleanup", T, "--older-than", "1h")["status"] == "nothing-to-do"  # all younger than that
    dropped = run(lake, "table", "drop", T)
    assert dropped["operation"] == "drop" and dropped["expires_at_ms"] is not None
    assert run(lake, "table", "list") == []
    assert [t["name"] for t in run(lake, "trash", "list")] == [T]
    assert run(lake, "table", "undrop", T)["to_version"] == 6
    assert run(lake, "table", "list")[0]["rows"] == 4
    purged = run(lake, "table", "drop", T, "--purge")
    assert purged["expires_at_ms"] is None and run(lake, "trash", "list") == []
