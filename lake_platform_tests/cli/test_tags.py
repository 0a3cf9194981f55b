"""``lake tag create|list|delete``: registry-logged tags that keep their version through cleanup."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from lake_platform.catalog.catalog import Catalog
from lake_platform.cli import cli
from lake_platform.errors import ErrorCode
from lake_platform.settings import load_settings
from lake_platform_tests.cli.conftest import T, run, write_parquet


@pytest.fixture
def versions(lake: CliRunner, tmp_path: Path) -> CliRunner:
    """``T`` at versions 1..4, holding 1, 2, 3 and 4 rows."""
    run(lake, "table", "create", T, "--from", str(write_parquet(tmp_path / "a.parquet", [1])))
    for i in (2, 3, 4):
        run(lake, "ingest", T, str(write_parquet(tmp_path / f"b{i}.parquet", [i])))
    return lake


def rows_at(version: int) -> int:
    with Catalog(load_settings()) as catalog:
        return catalog.reads.open_table(T, version).count_rows()


def test_create_list_read_and_delete(versions: CliRunner) -> None:
    assert run(versions, "tag", "create", T, "gold", "--version", "2") == {
        "table": T,
        "tag": "gold",
        "version": 2,
    }
    assert run(versions, "tag", "create", T, "latest")["version"] == 4  # the current version by default
    assert run(versions, "tag", "list", T) == [{"tag": "gold", "version": 2}, {"tag": "latest", "version": 4}]
    assert rows_at(run(versions, "tag", "list", T)[0]["version"]) == 2  # a pinned read of the tagged version

    assert run(versions, "tag", "create", T, "gold", "--version", "3", "--replace")["version"] == 3
    assert run(versions, "tag", "list", T)[0] == {"tag": "gold", "version": 3}
    assert run(versions, "tag", "delete", T, "gold") == {"table": T, "tag": "gold", "deleted": True}
    assert run(versions, "tag", "list", T) == [{"tag": "latest", "version": 4}]

    logged = [(e["operation"], e["to_version"], e["detail"]) for e in run(versions, "table", "history", T)]
    assert [entry for entry in logged if entry[0] in ("tag", "untag")] == [
        ("tag", 2, {"tag": "gold"}),
        ("tag", 4, {"tag": "latest"}),
        ("tag", 3, {"tag": "gold"}),
        ("untag", None, {"tag": "gold"}),
    ]
    human = versions.invoke(cli, ["tag", "list", T])
    assert human.exit_code == 0 and human.output.split("\n")[1].split() == ["latest", "4"]


@pytest.mark.parametrize(
    ("args", "code"),
    [
        (["create", T, "Not-A-Tag", "--version", "2"], ErrorCode.INVALID_INPUT),
        (["create", T, "fresh", "--version", "0"], ErrorCode.INVALID_INPUT),
        (["create", "p.w.ns.missing", "fresh"], ErrorCode.TABLE_NOT_FOUND),
        (["create", T, "fresh", "--version", "99"], ErrorCode.TABLE_VERSION_NOT_FOUND),
        (["create", T, "gold", "--version", "3"], ErrorCode.TABLE_TAG_ALREADY_EXISTS),
        (["create", T, "fresh", "--version", "3", "--replace"], ErrorCode.TABLE_TAG_NOT_FOUND),
        (["delete", T, "fresh"], ErrorCode.TABLE_TAG_NOT_FOUND),
        (["delete", T, "Bad Tag"], ErrorCode.INVALID_INPUT),
        (["list", "p.w.ns.missing"], ErrorCode.TABLE_NOT_FOUND),
    ],
)
def test_bad_input_fails_typed_and_changes_nothing(versions: CliRunner, args: list[str], code: int) -> None:
    run(versions, "tag", "create", T, "gold", "--version", "2")
    history = run(versions, "table", "history", T)

    result = versions.invoke(cli, ["--json", "tag", *args])
    assert result.exit_code != 0 and "Traceback" not in result.output
    assert json.loads(result.output)["error"]["code"] == code
    assert run(versions, "tag", "list", T) == [{"tag": "gold", "version": 2}]
    assert run(versions, "table", "history", T) == history


def test_a_tagged_version_survives_cleanup(versions: CliRunner, monkeypatch: pytest.MonkeyPatch) -> None:
    # Make every superseded version old enough to clean up at once.
    monkeypatch.setenv("LAKE_TICKET_LIFETIME_SECONDS", "0.001")
    monkeypatch.setenv("LAKE_READER_MAX_STALE_SECONDS", "0")
    run(versions, "tag", "create", T, "gold", "--version", "2")

    kept = run(versions, "cleanup", T, "--older-than", "0s", "--retain-versions", "1")
    assert sorted(kept["detail"]["versions_removed"]) == [1, 3]
    assert run(versions, "tag", "list", T) == [{"tag": "gold", "version": 2}]
    assert rows_at(2) == 2

    run(versions, "tag", "delete", T, "gold")
    assert run(versions, "cleanup", T, "--older-than", "0s", "--retain-versions", "1")["detail"][
        "versions_removed"
    ] == [2]


def test_history_says_which_versions_are_still_readable(
    versions: CliRunner, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LAKE_TICKET_LIFETIME_SECONDS", "0.001")
    monkeypatch.setenv("LAKE_READER_MAX_STALE_SECONDS", "0")
    run(versions, "tag", "create", T, "gold", "--version", "2")
    run(
        versions, "cleanup", T, "--older-than", "0s", "--retain-versions", "1"
    )  # removes 1 and 3; 2 is tagged, 4 current
    history = run(versions, "table", "history", T)
    made = {
        e["to_version"]: (e["readable"], e["tags"]) for e in history if e["operation"] in ("create", "append")
    }
    assert made == {1: (False, []), 2: (True, ["gold"]), 3: (False, []), 4: (True, [])}
    # A tag entry names no incarnation: no answer rather than a guess.
    assert [e["readable"] for e in history if e["operation"] == "tag"] == [None]
    human = versions.invoke(cli, ["table", "history", T])
    assert human.exit_code == 0
    rows = [line.split() for line in human.output.splitlines()]
    assert "readable" in rows[0]
    assert any("yes" in r and "(gold)" in r for r in rows) and any("no" in r for r in rows)
