"""compact, cleanup, and a drop through the trash and back."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from lake_platform.cli import cli
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
    assert run(lake, "table", "list", "--stats")[0]["rows"] == 4
    purged = run(lake, "table", "drop", T, "--purge")
    assert purged["expires_at_ms"] is None and run(lake, "trash", "list") == []


def test_orphan_folders_are_reported_then_reclaimed_and_live_tables_kept(
    lake: CliRunner, tmp_path: Path
) -> None:
    import os
    import time

    from lake_platform.catalog.catalog import Catalog
    from lake_platform.naming import WarehouseName
    from lake_platform.settings import load_settings

    run(lake, "table", "create", T, "--from", str(write_parquet(tmp_path / "a.parquet", [1])))
    with Catalog(load_settings()) as catalog:
        root = Path(catalog.ctx.warehouse(WarehouseName.parse("p.w")).root)
    leaked = root / "ns" / "gone-0123456789abcdef.lance"  # a create killed before its registry commit
    (leaked / "data").mkdir(parents=True)
    (leaked / "data" / "part.lance").write_bytes(b"x" * 10)
    old = time.time() - 3 * 86400
    for path in (leaked / "data" / "part.lance", leaked / "data", leaked):
        os.utime(path, (old, old))

    report = run(lake, "orphans", "scan-folders", "p.w", "--min-age", "1d")
    assert report["orphan_count"] == 1 and [o["path"] for o in report["orphans"]] == [
        "ns/gone-0123456789abcdef.lance"
    ]
    assert leaked.exists()  # a scan deletes nothing

    bad = lake.invoke(cli, ["orphans", "reclaim-folders", "p.w", "--older-than", "10m"])
    assert bad.exit_code == 2 and "at least" in bad.output and leaked.exists()
    reclaimed = run(lake, "orphans", "reclaim-folders", "p.w", "--older-than", "1d")
    assert [d["path"] for d in reclaimed["deleted"]] == [
        "ns/gone-0123456789abcdef.lance"
    ] and not leaked.exists()
    assert run(lake, "table", "describe", T, "--stats")["rows"] == 1  # the live table is untouched


@pytest.mark.parametrize("args", [[], ["--older-than", "0s"]])
def test_cleanup_keeps_what_the_tables_policy_keeps_unless_told(
    lake: CliRunner, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, args: list[str]
) -> None:
    """`lake cleanup T` once kept the newest 1 version and 7 days whatever the policy said (the
    platform's default policy keeps 10): now an option left out is the table's policy."""
    monkeypatch.setenv("LAKE_TICKET_LIFETIME_SECONDS", "0.001")
    monkeypatch.setenv("LAKE_READER_MAX_STALE_SECONDS", "0")
    run(lake, "table", "create", T, "--from", str(write_parquet(tmp_path / "a.parquet", [1])))
    for i in range(4):
        run(lake, "ingest", T, str(write_parquet(tmp_path / f"b{i}.parquet", [10 + i])))
    run(lake, "policy", "set", "p.w.ns", "retention=0s", "retain_versions=3")
    result = run(lake, "cleanup", T, *args)
    assert result["detail"]["versions_removed"] == [1, 2]  # type: ignore[index]
    assert run(lake, "cleanup", T, "--retain-versions", "1")["detail"]["versions_removed"] == [3, 4]  # type: ignore[index]


def test_compact_aims_at_the_tables_policy_unless_told(lake: CliRunner, tmp_path: Path) -> None:
    """The policy's target_rows_per_fragment, not a fixed 1,048,576 rows."""
    run(lake, "table", "create", T, "--from", str(write_parquet(tmp_path / "a.parquet", [1])))
    for i in range(3):
        run(lake, "ingest", T, str(write_parquet(tmp_path / f"b{i}.parquet", [10 + i])))
    run(lake, "policy", "set", T, "target_rows_per_fragment=2", "compact_min_fragments=2")
    assert run(lake, "compact", T)["status"] == "committed"
    assert run(lake, "table", "describe", T, "--stats")["fragments"] == 2
