"""``lake index create|list|refresh|drop`` and the indexes ``lake table describe --stats`` shows."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from lake_platform.cli import cli
from lake_platform.cli.indexes import KINDS
from lake_platform.engine.indexes import KINDS as ENGINE_KINDS
from lake_platform.errors import ErrorCode
from lake_platform_tests.cli.conftest import T, run, write_parquet


@pytest.fixture
def table(lake: CliRunner, tmp_path: Path) -> CliRunner:
    run(lake, "table", "create", T, "--from", str(write_parquet(tmp_path / "a.parquet", list(range(100)))))
    return lake


def test_the_cli_offers_exactly_the_engines_kinds() -> None:
    assert KINDS == [k.lower() for k in ENGINE_KINDS]


def test_create_list_describe_refresh_drop(table: CliRunner, tmp_path: Path) -> None:
    made = run(table, "index", "create", T, "id")
    assert (made["status"], made["version"], made["detail"]["kind"]) == ("committed", 2, "BTREE")
    run(table, "index", "create", T, "name", "--kind", "BITMAP")
    listed = run(table, "index", "list", T)
    assert [(i["name"], i["column"], i["kind"], i["rows_indexed"]) for i in listed] == [
        ("id_idx", "id", "BTREE", 100),
        ("name_idx", "name", "BITMAP", 100),
    ]
    # Registry-only describe stays without indexes (no Lance); --stats shows them and their lag.
    assert run(table, "table", "describe", T)["indexes"] is None
    run(table, "ingest", T, str(write_parquet(tmp_path / "b.parquet", [100, 101])))
    described = run(table, "table", "describe", T, "--stats")["indexes"]
    assert [(i["name"], i["rows_unindexed"], i["lagging"]) for i in described] == [
        ("id_idx", 2, True),
        ("name_idx", 2, True),
    ]
    human = table.invoke(cli, ["table", "describe", T, "--stats"])
    assert "id_idx: btree on id, 100 rows indexed, 2 not yet" in human.output

    assert run(table, "index", "refresh", T, "id_idx")["detail"] == {"indexes": ["id_idx"]}
    assert [i["rows_unindexed"] for i in run(table, "index", "list", T)] == [0, 2]
    assert run(table, "index", "refresh", T)["detail"] == {"indexes": ["name_idx"]}
    assert run(table, "index", "refresh", T)["status"] == "nothing-to-do"

    assert run(table, "index", "drop", T, "name")["status"] == "committed"
    assert [i["name"] for i in run(table, "index", "list", T)] == ["id_idx"]
    ops = [e["operation"] for e in run(table, "table", "history", T)]
    assert ops == [
        "create",
        "index create",
        "index create",
        "append",
        "index refresh",
        "index refresh",
        "index drop",
    ]


def test_full_text_options_are_passed_and_logged(table: CliRunner) -> None:
    args = "--kind inverted --with-position --no-lower-case --language french --keep-stop-words".split()
    made = run(table, "index", "create", T, "name", *args, "--base-tokenizer", "whitespace")
    assert made["detail"]["options"] == {
        "with_position": True,
        "base_tokenizer": "whitespace",
        "language": "French",
        "lower_case": False,
        "remove_stop_words": False,
    }
    assert [(i["name"], i["kind"]) for i in run(table, "index", "list", T)] == [("name_idx", "INVERTED")]
    assert "options" not in run(table, "index", "create", T, "id")["detail"]


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["--kind", "inverted", "--language", "Klingon"], "language 'Klingon' is not one Lance takes"),
        (["--kind", "inverted", "--max-token-length", "-1"], "max_token_length must be an integer from 0"),
        (
            ["--kind", "inverted", "--base-tokenizer", "jieba"],
            "base_tokenizer 'jieba' is not one Lance takes",
        ),
        (["--kind", "bitmap", "--no-stem"], "stem applies to inverted (fts) indexes only, not to bitmap"),
    ],
)
def test_full_text_options_lance_would_not_take_are_refused(
    table: CliRunner, args: list[str], said: str
) -> None:
    result = table.invoke(cli, ["--json", "index", "create", T, "name", *args])
    error = json.loads(result.output)["error"]
    assert (error["code"], said in error["message"]) == (ErrorCode.INVALID_INPUT, True), error
    assert [e["operation"] for e in run(table, "table", "history", T)] == ["create"]


def test_branch_option_indexes_the_branch_alone(table: CliRunner, tmp_path: Path) -> None:
    run(table, "branch", "create", T, "dev")
    made = run(table, "index", "create", T, "id", "--branch", "dev")
    assert (made["status"], made["version"], made["detail"]["branch"]) == ("committed", 2, "dev")
    assert [i["name"] for i in run(table, "index", "list", T, "--branch", "dev")] == ["id_idx"]
    assert run(table, "index", "list", T) == []  # main has none, and is still at version 1
    assert run(table, "table", "describe", T)["current_version"] == 1
    run(table, "ingest", T, str(write_parquet(tmp_path / "b.parquet", [100])), "--branch", "dev")
    refreshed = run(table, "index", "refresh", T, "--branch", "dev")
    assert (refreshed["version"], refreshed["detail"]["indexes"]) == (4, ["id_idx"])
    assert run(table, "index", "drop", T, "id", "--branch", "dev")["version"] == 5
    assert run(table, "index", "list", T, "--branch", "dev") == []
    result = table.invoke(cli, ["--json", "index", "list", T, "--branch", "nope"])
    assert json.loads(result.output)["error"]["code"] == ErrorCode.TABLE_BRANCH_NOT_FOUND


@pytest.mark.parametrize(
    ("args", "code"),
    [
        (["create", T, "nope"], ErrorCode.TABLE_COLUMN_NOT_FOUND),
        (["create", T, "id"], ErrorCode.TABLE_INDEX_ALREADY_EXISTS),
        (["create", "p.w.ns.missing", "id"], ErrorCode.TABLE_NOT_FOUND),
        (["create", "p.w.ns.Bad", "id"], ErrorCode.INVALID_INPUT),
        (["create", T, "name", "--kind", "label_list"], ErrorCode.INVALID_INPUT),  # not a list
        (["drop", T, "name"], ErrorCode.TABLE_INDEX_NOT_FOUND),
        (["refresh", T, "name_idx"], ErrorCode.TABLE_INDEX_NOT_FOUND),
        (["list", "p.w.ns.missing"], ErrorCode.TABLE_NOT_FOUND),
    ],
)
def test_bad_input_fails_typed_and_changes_nothing(table: CliRunner, args: list[str], code: int) -> None:
    run(table, "index", "create", T, "id")
    history = run(table, "table", "history", T)
    result = table.invoke(cli, ["--json", "index", *args])
    assert result.exit_code != 0 and "Traceback" not in result.output
    assert json.loads(result.output)["error"]["code"] == code
    assert run(table, "table", "history", T) == history


def test_an_unknown_kind_is_refused_before_anything_runs(table: CliRunner) -> None:
    result = table.invoke(cli, ["index", "create", T, "id", "--kind", "hash"])
    assert result.exit_code == 2 and "hash" in result.output
