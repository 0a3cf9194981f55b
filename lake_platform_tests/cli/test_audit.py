"""``lake log``: every command's commit carries LAKE_ACTOR; ``lake audit queries``: its trail file."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from lake_platform_tests.cli.conftest import run, write_parquet


def test_every_commit_carries_lake_actor(
    lake: CliRunner, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LAKE_ACTOR", "alice")
    parquet = str(write_parquet(tmp_path / "a.parquet", [1]))
    q = "q.w.ns.t"
    for args in (
        ["project", "create", "q"],
        ["warehouse", "create", "q.w"],
        ["namespace", "create", "q.w.ns"],
        ["table", "create", q, "--from", parquet],
        ["ingest", q, parquet],
        ["table", "protect", q],
        ["table", "protect", q, "--off"],
        ["policy", "set", q, "trash_grace=1d", "retain_versions=3"],
        ["policy", "unset", q, "trash_grace"],
        ["policy", "delete", q],
        ["table", "drop", q],
        ["table", "undrop", q],
        ["namespace", "drop", "q.w.ns", "--cascade"],
        ["namespace", "undrop", "q.w.ns"],
        ["namespace", "drop", "q.w.ns", "--cascade", "--purge"],
        ["trash", "expire"],
        ["user", "add", "cy", "--project", "q", "--role", "reader"],
        ["user", "remove", "cy"],
        ["warehouse", "drop", "q.w"],
        ["project", "drop", "q"],
    ):
        run(lake, *args)
    entries = run(lake, "log", "q")
    assert {
        "create project",
        "create warehouse",
        "create namespace",
        "create",
        "append",
        "protect",
        "unprotect",
        "policy set",
        "policy unset",
        "policy delete",
        "drop",
        "undrop",
        "drop namespace cascade",
        "undrop namespace",
        "purge",
        "user add",
        "user remove",
        "drop warehouse",
        "drop project",
    } <= {e["operation"] for e in entries}
    assert sorted({(e["operation"], e["actor"]) for e in entries if e["actor"] != "alice"}) == []


def test_an_audit_file_given_that_does_not_exist_is_an_error(lake: CliRunner, tmp_path: Path) -> None:
    """A mistyped --file was "no queries" (exit 0), as if nobody had queried; the default trail
    not written yet still is (nobody has)."""
    from lake_platform.cli import cli

    result = lake.invoke(
        cli, ["--json", "audit", "queries", "--project", "p", "--file", str(tmp_path / "nope.jsonl")]
    )
    assert result.exit_code == 2
    assert "nope.jsonl' does not exist" in json.loads(result.stdout)["error"]["message"]
    assert run(lake, "audit", "queries", "--project", "p") == []


def test_a_log_prefix_naming_nothing_is_an_error_like_a_describe(lake: CliRunner) -> None:
    """`lake log p.w.nsx` (a typo) printed "no entries" and exited 0."""
    from lake_platform.cli import cli

    for prefix, code in (("p.w.nsx", "NAMESPACE_NOT_FOUND"), ("p.w.ns.nope", "TABLE_NOT_FOUND")):
        result = lake.invoke(cli, ["log", prefix])
        assert result.exit_code == 1, result.output
        assert result.stderr.startswith("error [") and code in result.stderr and prefix in result.stderr
        result = lake.invoke(cli, ["--json", "log", prefix])
        assert result.exit_code == 1 and prefix in json.loads(result.stdout)["error"]["message"]
    assert [e["operation"] for e in run(lake, "log", "p.w.ns")] == ["create namespace"]


def test_a_tenants_sql_cannot_forge_or_hide_lines_of_the_audit_shown_as_text(tmp_path: Path) -> None:
    """The SQL column is what a tenant's client sent: a line break in it printed a second row of
    the operator's table (a forged record: another principal, another status), a carriage return
    and an escape code overwrote or erased what the terminal showed. Shown as text, control
    characters are escaped; --json keeps the text as sent."""
    import os
    import subprocess
    import sys

    from lake_platform_tests.flight.conftest import build_catalog, login, query, start_server

    settings, catalog = build_catalog(tmp_path / "home")
    forged = "2099-01-01T00:00:00Z  mallory  OK  1  0.1  p.w.ns.t@1  SELECT 1"
    sql = f"SELECT id FROM w.ns.sub.u /* x\n{forged}\r\x1b[2K\x1b]0;owned\x07\u202eevil */"
    try:
        server = start_server(settings, catalog)
        try:
            alice, options = login(f"grpc://127.0.0.1:{server.port}", "alice")
            assert query(alice, options, sql).num_rows == 3
        finally:
            server.stop(grace=0)
    finally:
        catalog.close()
    env = {**os.environ, "LAKE_HOME": str(settings.home)}
    lake = [sys.executable, "-m", "lake_platform.cli", "audit", "queries", "--project", "p"]
    text = subprocess.run(lake, capture_output=True, text=True, env=env, check=True).stdout
    header, *rows = text.splitlines()
    assert header.split()[:2] == ["at", "principal"] and len(rows) == 1, text
    assert "mallory" in rows[0] and rows[0].split()[1] == "alice"
    assert not any(c in text for c in "\r\x1b\x07\u202e"), repr(text)
    assert "\\n2099-01-01" in rows[0] and "\\x1b[2K" in rows[0]
    as_json = subprocess.run([*lake, "--json"], capture_output=True, text=True, env=env, check=True).stdout
    assert [r["sql"] for r in json.loads(as_json)] == [sql]
