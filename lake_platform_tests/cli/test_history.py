"""``lake table history``: the commit log, what can still be read, writes around the registry."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
from click.testing import CliRunner

from lake_platform.cli import cli
from lake_platform_tests.cli.conftest import T, run, write_parquet


def test_history_tells_of_a_commit_made_around_the_registry(lake: CliRunner) -> None:
    import lance  # plays the writer that bypasses the catalog

    from lake_platform.catalog.catalog import Catalog
    from lake_platform.settings import load_settings

    catalog = Catalog(load_settings())
    try:
        catalog.tables.create_table(T, pa.table({"id": pa.array([1, 2], pa.int64())}).to_reader())
        location = catalog.reads.open_table(T).record.location
        lance.write_dataset(pa.table({"id": pa.array([3], pa.int64())}), location, mode="append")  # version 2
        assert catalog.manifests.catch_bypasses(T) == [2]
    finally:
        catalog.close()

    text = lake.invoke(cli, ["table", "history", T])
    assert text.exit_code == 0, text.output
    assert "bypass" in text.output
    assert "version(s) 2 were committed around the registry (not through the catalog)" in text.output
    entries = run(lake, "table", "history", T)
    assert [e["detail"]["versions"] for e in entries if e["operation"] == "bypass"] == [[2]]  # type: ignore[index]


def test_the_history_of_a_table_that_never_existed_is_an_error(lake: CliRunner) -> None:
    """A typo'd name was an empty history (exit 0), as if the table had never changed."""
    result = lake.invoke(cli, ["table", "history", "p.w.ns.nope"])
    assert result.exit_code == 1
    assert result.output == "error [4 TABLE_NOT_FOUND]: table p.w.ns.nope does not exist\n"


def test_a_dropped_tables_history_remains(lake: CliRunner, tmp_path: Path) -> None:
    run(lake, "table", "create", T, "--from", str(write_parquet(tmp_path / "a.parquet", [1])))
    run(lake, "table", "drop", T)
    entries = run(lake, "table", "history", T)
    assert [(e["operation"], e["readable"]) for e in entries] == [("create", False), ("drop", None)]  # type: ignore[index]


def test_limit_shows_the_newest_entries_with_or_without_a_branch(lake: CliRunner, tmp_path: Path) -> None:
    """--limit was the oldest N on main (the newest N with --branch, and in `lake log`)."""
    run(lake, "table", "create", T, "--from", str(write_parquet(tmp_path / "a.parquet", [1])))
    for i in range(3):
        run(lake, "ingest", T, str(write_parquet(tmp_path / f"b{i}.parquet", [10 + i])))
    entries = run(lake, "table", "history", T, "--limit", "2")
    assert [(e["operation"], e["to_version"]) for e in entries] == [("append", 3), ("append", 4)]  # type: ignore[index]
