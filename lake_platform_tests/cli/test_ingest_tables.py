"""``lake ingest --table NAME=FILE ...``: several tables' files in one atomic commit."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
from click.testing import CliRunner

from lake_platform.cli import cli
from lake_platform_tests.cli.conftest import run, write_parquet

ORDERS, LINES = "p.w.ns.orders", "p.w.ns.order_lines"


def _create(lake: CliRunner, tmp_path: Path) -> None:
    run(lake, "table", "create", ORDERS, "--from", str(write_parquet(tmp_path / "o0.parquet", [1])))
    run(lake, "table", "create", LINES, "--from", str(write_parquet(tmp_path / "l0.parquet", [10])))


def _versions(lake: CliRunner) -> dict[str, int]:
    return {t["name"]: t["version"] for t in run(lake, "table", "list")}  # type: ignore[index]


def test_several_tables_in_one_commit_replayed_under_their_commit_id(lake: CliRunner, tmp_path: Path) -> None:
    _create(lake, tmp_path)
    o1, o2 = write_parquet(tmp_path / "o1.parquet", [2]), write_parquet(tmp_path / "o2.parquet", [3, 4])
    lines = write_parquet(tmp_path / "l1.parquet", [11])
    args = ["ingest", "--table", f"{ORDERS}={o1}", "--table", f"{LINES}={lines}", "--table", f"{ORDERS}={o2}"]
    out = run(lake, *args, "--commit-id", "pipeline-0001")
    assert out["commit_id"] == "pipeline-0001"  # type: ignore[index]
    rows = {r["table"]: (r["rows_added"], r["to_version"], r["replayed"]) for r in out["tables"]}  # type: ignore[index]
    assert rows == {ORDERS: (3, 2, False), LINES: (1, 2, False)}
    again = run(lake, *args, "--commit-id", "pipeline-0001")
    assert [r["replayed"] for r in again["tables"]] == [True, True]  # type: ignore[index]
    assert _versions(lake) == {ORDERS: 2, LINES: 2}
    history = run(lake, "table", "history", LINES)
    assert history[-1]["detail"]["transaction"] == "pipeline-0001"  # type: ignore[index]


def test_a_bad_file_for_one_table_commits_no_table(lake: CliRunner, tmp_path: Path) -> None:
    _create(lake, tmp_path)
    good = write_parquet(tmp_path / "o1.parquet", [2])
    bad = tmp_path / "bad.parquet"
    pq.write_table(pa.table({"id": ["not a number"]}), bad)
    result = lake.invoke(cli, ["ingest", "--table", f"{ORDERS}={good}", "--table", f"{LINES}={bad}"])
    assert result.exit_code != 0
    assert _versions(lake) == {ORDERS: 1, LINES: 1}


def test_names_and_table_options_are_not_mixed(lake: CliRunner, tmp_path: Path) -> None:
    _create(lake, tmp_path)
    f = write_parquet(tmp_path / "o1.parquet", [2])
    mixed = lake.invoke(cli, ["ingest", ORDERS, str(f), "--table", f"{LINES}={f}"])
    assert mixed.exit_code != 0 and "not both" in mixed.output
    malformed = lake.invoke(cli, ["ingest", "--table", ORDERS])
    assert malformed.exit_code != 0 and "NAME=FILE" in malformed.output
    nothing = lake.invoke(cli, ["ingest"])
    assert nothing.exit_code != 0
    assert _versions(lake) == {ORDERS: 1, LINES: 1}
