"""``lake branch create|list|delete|undrop|publish|compact`` and ``--branch`` on ``ingest``, ``table
describe``, ``table history`` and ``tag create``; ``lake sql`` reads a branch by name."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from lake_platform.cli import cli
from lake_platform.errors import ErrorCode
from lake_platform_tests.cli.conftest import T, run, write_parquet


@pytest.fixture
def table(lake: CliRunner, tmp_path: Path) -> CliRunner:
    """``T`` at version 2 (ids 1, 2), branch ``dev`` from it with id 10 appended."""
    run(lake, "table", "create", T, "--from", str(write_parquet(tmp_path / "a.parquet", [1])))
    run(lake, "ingest", T, str(write_parquet(tmp_path / "b.parquet", [2])))
    run(lake, "branch", "create", T, "dev")
    run(lake, "ingest", T, str(write_parquet(tmp_path / "c.parquet", [10])), "--branch", "dev")
    return lake


def count(runner: CliRunner, sql: str) -> int:
    return int(run(runner, "sql", "--project", "p", sql)[0]["n"])


def test_branch_lifecycle_through_the_cli(table: CliRunner, tmp_path: Path) -> None:
    listed = run(table, "branch", "list", T)
    assert [(b["branch"], b["version"], b["parent"], b["parent_version"]) for b in listed] == [
        ("dev", 3, "main", 2)
    ]
    described = run(table, "table", "describe", T, "--branch", "dev", "--stats")
    assert (described["version"], described["rows"]) == (3, 3)
    assert [c["name"] for c in described["schema"]] == ["id", "name"]
    assert run(table, "table", "describe", T)["current_version"] == 2
    assert count(table, 'SELECT count(*) AS n FROM w.ns."t@branch:dev"') == 3
    assert count(table, 'SELECT count(*) AS n FROM w.ns."t@branch:dev@v2"') == 2
    assert count(table, "SELECT count(*) AS n FROM w.ns.t") == 2

    history = run(table, "table", "history", T, "--branch", "dev")
    assert [(e["operation"], e["to_version"], e["readable"]) for e in history] == [
        ("branch-create", 2, True),
        ("append", 3, True),
    ]
    assert run(table, "tag", "create", T, "candidate", "--branch", "dev")["version"] == 3
    assert (
        run(table, "branch", "create", T, "review", "--from-branch", "dev", "--from-tag", "candidate")[
            "parent_version"
        ]
        == 3
    )

    published = run(table, "branch", "publish", T, "dev")
    assert (published["from_version"], published["to_version"]) == (2, 3)
    assert count(table, "SELECT count(*) AS n FROM w.ns.t") == 3
    assert [b["branch"] for b in run(table, "branch", "list", T)] == ["review"]

    run(table, "branch", "delete", T, "review")
    assert run(table, "branch", "list", T) == []
    assert [b["state"] for b in run(table, "branch", "list", T, "--all")] == ["trashed"]
    assert run(table, "branch", "undrop", T, "review")["state"] == "active"
    run(table, "branch", "delete", T, "review", "--purge")
    assert run(table, "branch", "list", T, "--all") == []


def test_publish_after_main_moved_answers_the_typed_conflict(table: CliRunner, tmp_path: Path) -> None:
    run(table, "ingest", T, str(write_parquet(tmp_path / "d.parquet", [3])))
    result = table.invoke(cli, ["--json", "branch", "publish", T, "dev"])
    assert result.exit_code != 0
    error = json.loads(result.output)["error"]
    assert error["code"] == ErrorCode.CONCURRENT_MODIFICATION and error["error"] == "BranchDiverged"
    assert "version 2" in error["message"] and "version 3" in error["message"]


@pytest.mark.parametrize(
    ("args", "code"),
    [
        (["branch", "create", T, "Bad-Name"], ErrorCode.INVALID_INPUT),
        (["branch", "create", T, "main"], ErrorCode.INVALID_INPUT),
        (["branch", "create", T, "dev"], ErrorCode.TABLE_BRANCH_ALREADY_EXISTS),
        (["branch", "create", T, "x", "--from-version", "9"], ErrorCode.TABLE_VERSION_NOT_FOUND),
        (["branch", "create", "p.w.ns.missing", "x"], ErrorCode.TABLE_NOT_FOUND),
        (["branch", "delete", T, "nope"], ErrorCode.TABLE_BRANCH_NOT_FOUND),
        (["branch", "undrop", T, "dev"], ErrorCode.TABLE_BRANCH_ALREADY_EXISTS),
        (["branch", "publish", T, "nope"], ErrorCode.TABLE_BRANCH_NOT_FOUND),
        (["table", "describe", T, "--branch", "nope"], ErrorCode.TABLE_BRANCH_NOT_FOUND),
        (["tag", "create", T, "x", "--branch", "nope"], ErrorCode.TABLE_BRANCH_NOT_FOUND),
        (["tag", "create", T, "x", "--branch", "dev", "--version", "9"], ErrorCode.TABLE_VERSION_NOT_FOUND),
        # Once INTERNAL (OverflowError from Lance) and, for 0, accepted.
        (["branch", "compact", T, "dev", "--target-rows", "-5"], ErrorCode.INVALID_INPUT),
        (["branch", "compact", T, "dev", "--target-rows", "0"], ErrorCode.INVALID_INPUT),
    ],
)
def test_bad_input_fails_typed_and_changes_nothing(table: CliRunner, args: list[str], code: int) -> None:
    before = run(table, "table", "history", T), run(table, "branch", "list", T, "--all")
    result = table.invoke(cli, ["--json", *args])
    assert result.exit_code != 0 and "Traceback" not in result.output
    assert json.loads(result.output)["error"]["code"] == code
    assert (run(table, "table", "history", T), run(table, "branch", "list", T, "--all")) == before


def test_ingest_into_a_missing_branch_reads_no_file_and_changes_nothing(
    table: CliRunner, tmp_path: Path
) -> None:
    before = run(table, "table", "history", T)
    result = table.invoke(cli, ["--json", "ingest", T, str(tmp_path / "absent.parquet"), "--branch", "nope"])
    assert json.loads(result.output)["error"]["code"] in (
        ErrorCode.TABLE_BRANCH_NOT_FOUND,
        ErrorCode.INVALID_INPUT,
    )
    assert run(table, "table", "history", T) == before


def test_branch_compact_rewrites_the_branch_only(table: CliRunner, tmp_path: Path) -> None:
    run(table, "ingest", T, str(write_parquet(tmp_path / "d.parquet", [11])), "--branch", "dev")
    done = run(table, "branch", "compact", T, "dev")
    assert done["status"] == "committed" and done["version"] > 4
    assert run(table, "branch", "list", T)[0]["version"] == done["version"]
    assert count(table, 'SELECT count(*) AS n FROM w.ns."t@branch:dev"') == 4
    assert run(table, "table", "describe", T)["current_version"] == 2
    assert run(table, "branch", "compact", T, "dev")["status"] == "nothing-to-do"


def test_branch_compact_aims_at_the_tables_policy_unless_told(table: CliRunner, tmp_path: Path) -> None:
    """The policy's target_rows_per_fragment, as `lake compact`, not a fixed 1,048,576 rows."""
    for i in range(3):
        run(table, "ingest", T, str(write_parquet(tmp_path / f"d{i}.parquet", [11 + i])), "--branch", "dev")
    run(table, "policy", "set", T, "target_rows_per_fragment=2")
    done = run(table, "branch", "compact", T, "dev")
    assert done["status"] == "committed" and done["detail"]["fragments_added"] == 3  # 6 rows, 2 each
