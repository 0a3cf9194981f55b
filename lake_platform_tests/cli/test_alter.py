"""``lake table alter`` and schema evolution through ``lake ingest``."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

from lake_platform.cli import cli
from lake_platform_tests.cli.conftest import T, run, write_parquet


@pytest.fixture
def table(lake: CliRunner, tmp_path: Path) -> CliRunner:
    run(lake, "table", "create", T, "--from", str(write_parquet(tmp_path / "a.parquet", [1, 2])))
    return lake


def columns(lake: CliRunner) -> list[str]:
    described = run(lake, "table", "describe", T)
    assert isinstance(described, dict)
    return [c["name"] for c in described["schema"]]


def test_add_rename_drop_with_json_anywhere(table: CliRunner) -> None:
    added = table.invoke(cli, ["table", "alter", T, "add-column", "note", "string", "--json"])
    assert added.exit_code == 0, added.output
    data = json.loads(added.output)
    assert (data["table"], data["operation"], data["column"], data["type"]) == (
        T,
        "add-column",
        "note",
        "string",
    )
    assert data["to_version"] == data["from_version"] + 1
    renamed = run(table, "table", "alter", T, "rename-column", "note", "remark")
    assert isinstance(renamed, dict) and renamed["operation"] == "rename-column"
    dropped = run(table, "table", "alter", T, "drop-column", "name")
    assert isinstance(dropped, dict) and dropped["to_version"] == data["to_version"] + 2
    assert columns(table) == ["id", "remark"]
    history = run(table, "table", "history", T)
    assert isinstance(history, list)
    assert [h["operation"] for h in history][-3:] == ["add-column", "rename-column", "drop-column"]


def test_plain_output_names_the_change(table: CliRunner) -> None:
    result = table.invoke(cli, ["table", "alter", T, "add-column", "n", "int64"])
    assert result.exit_code == 0, result.output
    assert result.output.strip() == f"{T}: added column n (version 1 -> 2)"


@pytest.mark.parametrize(
    ("args", "code", "exit_code"),
    [
        (["add-column", "name", "string"], 20, 2),  # exists
        (["add-column", "x", "varchar"], 13, 2),  # bad type
        (["add-column", "a.b", "string"], 13, 2),  # nested path
        (["drop-column", "nope"], 12, 1),  # unknown column
        (["rename-column", "nope", "x"], 12, 1),
        (["rename-column", "id", "name"], 20, 2),  # existing name
    ],
)
def test_bad_input_answers_a_typed_error_and_changes_nothing(
    table: CliRunner, args: list[str], code: int, exit_code: int
) -> None:
    before = run(table, "table", "describe", T)
    result = table.invoke(cli, ["--json", "table", "alter", T, *args])
    assert result.exit_code == exit_code, result.output
    assert json.loads(result.output)["error"]["code"] == code
    assert run(table, "table", "describe", T) == before


def test_a_protected_table_keeps_its_columns(table: CliRunner) -> None:
    run(table, "table", "protect", T)
    result = table.invoke(cli, ["table", "alter", T, "drop-column", "name"])
    assert result.exit_code == 1 and "protected" in result.output
    assert columns(table) == ["id", "name"]


def test_unknown_table(lake: CliRunner) -> None:
    result = lake.invoke(cli, ["--json", "table", "alter", "p.w.ns.nope", "add-column", "x", "int64"])
    assert result.exit_code == 1 and json.loads(result.output)["error"]["code"] == 4


def _file(path: Path, **cols: pa.Array) -> Path:
    pq.write_table(pa.table(cols), path)
    return path


def test_ingest_follows_the_policy(table: CliRunner, tmp_path: Path) -> None:
    grown = _file(tmp_path / "grown.parquet", id=pa.array([3], pa.int64()), name=["n3"], extra=[1.5])
    refused = table.invoke(cli, ["ingest", T, str(grown)])
    assert refused.exit_code == 2 and "grown.parquet" in refused.output and "strict" in refused.output
    assert columns(table) == ["id", "name"]
    run(table, "policy", "set", T, "schema_evolution=add_columns")
    done = run(table, "ingest", T, str(grown))
    assert isinstance(done, dict) and done["rows_added"] == 1
    assert columns(table) == ["id", "name", "extra"]
    # Strings where the table has integers: never parsed, whatever the policy.
    run(table, "policy", "set", T, "schema_evolution=widen")
    text_ids = _file(tmp_path / "text.parquet", id=["4"], name=["n4"], extra=[2.5])
    bad = table.invoke(cli, ["--json", "ingest", T, str(text_ids)])
    assert bad.exit_code == 2 and json.loads(bad.output)["error"]["code"] == 20
    assert "text.parquet" in bad.output


def test_the_policy_value_is_checked(table: CliRunner) -> None:
    result = table.invoke(cli, ["--json", "policy", "set", T, "schema_evolution=loose"])
    assert result.exit_code == 2 and json.loads(result.output)["error"]["code"] == 13
    shown = run(table, "policy", "show", T, "--effective")
    assert isinstance(shown, dict) and shown["schema_evolution"] == "strict"


def test_alter_help_imports_no_engine(table: CliRunner, tmp_path: Path) -> None:
    from lake_platform_tests.cli.test_fast import heavy_modules_after

    commands = [["table", "alter", "--help"], ["table", "alter", T, "add-column", "--help"]]
    assert (
        heavy_modules_after(
            tmp_path / "home", commands, ["lance", "lance_namespace", "datafusion", "pyarrow"]
        )
        == []
    )
