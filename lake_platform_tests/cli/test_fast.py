"""A fast ``lake``: registry-only commands never import the engine's heavy libraries (nor the
metrics client, which only serving processes load), and
``--json`` is accepted anywhere on the command line."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from lake_platform.cli import cli
from lake_platform_tests.cli.conftest import T, run, write_parquet

HEAVY = ["lance", "lance_namespace", "datafusion", "prometheus_client"]

# Runs the commands in process through click's runner in a fresh interpreter (so sys.modules
# holds only what they imported), then prints which heavy modules got loaded.
PROBE = """
import json, sys
from click.testing import CliRunner
from lake_platform.cli import cli
runner = CliRunner()
for args in json.loads(sys.argv[1]):
    result = runner.invoke(cli, args)
    assert result.exit_code == 0, (args, result.output)
print(json.dumps(sorted(m for m in sys.modules if m.split(".")[0] in {heavy})))
"""


def heavy_modules_after(home: Path, commands: list[list[str]], heavy: list[str] = HEAVY) -> list[str]:
    out = subprocess.run(
        [sys.executable, "-c", PROBE.format(heavy=set(heavy)), json.dumps(commands)],
        env={**os.environ, "LAKE_HOME": str(home)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


REGISTRY_ONLY = [
    ["--help"],
    ["table", "list"],
    ["table", "describe", T],
    ["table", "history", T],
    ["table", "protect", T],
    ["log"],
    ["trash", "list"],
    ["policy", "set", "p.w", "retain_versions=4"],
    ["policy", "set", "p.w.ns", "indexes=id:btree,name:bitmap"],
    ["index", "--help"],
    ["index", "create", "--help"],
    ["policy", "show", "p.w.ns", "--effective"],
    ["policy", "unset", "p.w", "retain_versions"],
    ["user", "list"],
    ["token", "create", "bot", "--project", "p", "--role", "reader"],
    ["token", "list"],
    ["project", "create", "q"],
    ["warehouse", "create", "q.w"],
    ["warehouse", "protect", "q.w"],
    ["namespace", "create", "q.w.ns"],
    ["namespace", "protect", "q.w.ns"],
    ["namespace", "create", "q.w.gone"],
    ["namespace", "drop", "q.w.gone"],
    ["project", "list"],
    ["warehouse", "list"],
    ["warehouse", "list", "p"],
    ["namespace", "list"],
    ["namespace", "list", "p.w"],
    ["user", "add", "ann", "--project", "p", "--role", "reader"],
    ["user", "set-role", "ann", "writer"],
]


@pytest.mark.slow
def test_registry_only_commands_import_neither_lance_nor_datafusion(lake: CliRunner, tmp_path: Path) -> None:
    run(lake, "table", "create", T, "--from", str(write_parquet(tmp_path / "a.parquet", [1, 2])))
    assert heavy_modules_after(tmp_path / "home", REGISTRY_ONLY) == []
    # Only a table's schema needs Arrow: the rest of the registry-only commands skip even pyarrow.
    # (run again on the same lake, so what the first run created gets other names here)
    again = {"q": "r", "q.w": "r.w", "q.w.ns": "r.w.ns", "q.w.gone": "r.w.gone", "bot": "bot2", "ann": "ann2"}
    schemaless = [
        [again.get(a, a) for a in args] for args in REGISTRY_ONLY if args[:2] != ["table", "describe"]
    ]
    assert heavy_modules_after(tmp_path / "home", schemaless, [*HEAVY, "pyarrow"]) == []
    # The probe sees an import when there is one: the row count does open the table, in Lance,
    # by location and version, without the namespace client (a second of start-up on its own).
    loaded = heavy_modules_after(tmp_path / "home", [["table", "describe", T, "--stats"]])
    assert "lance" in loaded and "lance_namespace" not in loaded


def test_help_loads_neither_pydantic_nor_arrow(tmp_path: Path) -> None:
    # `lake --help` is the yardstick of the CLI's start-up (bench/cli.py): importing the command
    # modules loads no settings, records or Arrow; a command loads what it uses.
    assert heavy_modules_after(tmp_path / "home", [["--help"]], [*HEAVY, "pyarrow", "pydantic"]) == []
    assert "pydantic" in heavy_modules_after(tmp_path / "home", [["table", "list"]], ["pydantic"])


def _output(lake: CliRunner, args: list[str]) -> str:
    result = lake.invoke(cli, args)
    assert result.exit_code == 0, result.output
    return result.output


@pytest.mark.parametrize(
    "args",
    [
        ["table", "list"],
        ["table", "describe", T],
        ["table", "history", T],
        ["policy", "show", "p.w.ns", "--effective"],
        ["log", "p"],
    ],
)
def test_json_anywhere_prints_what_a_leading_json_prints(
    lake: CliRunner, tmp_path: Path, args: list[str]
) -> None:
    run(lake, "table", "create", T, "--from", str(write_parquet(tmp_path / "a.parquet", [1])))
    leading = _output(lake, ["--json", *args])
    json.loads(leading)
    assert _output(lake, [*args, "--json"]) == leading
    assert _output(lake, [args[0], "--json", *args[1:]]) == leading


def test_json_after_a_double_dash_is_an_argument_not_the_flag(lake: CliRunner) -> None:
    result = lake.invoke(cli, ["table", "describe", "--", "--json"])
    assert result.exit_code != 0 and "--json" in result.output
    assert not result.output.lstrip().startswith("{")


def test_table_list_and_describe_leave_stats_out_unless_asked(lake: CliRunner, tmp_path: Path) -> None:
    run(lake, "table", "create", T, "--from", str(write_parquet(tmp_path / "a.parquet", [1, 2, 3])))
    assert run(lake, "table", "list") == [{"name": T, "version": 1, "rows": None}]
    assert run(lake, "table", "list", "--stats") == [{"name": T, "version": 1, "rows": 3}]
    described = run(lake, "table", "describe", T)
    assert (described["rows"], described["fragments"], described["data_bytes"]) == (None, None, None)
    assert run(lake, "table", "describe", T, "--stats")["rows"] == 3
    human = _output(lake, ["table", "list"])
    assert T in human and "rows" not in human


# Runs one `lake sql` in a fresh interpreter and prints how many objects the collector had
# frozen before and after it.
FREEZE_PROBE = """
import gc
from click.testing import CliRunner
from lake_platform.cli import cli
before = gc.get_freeze_count()
result = CliRunner().invoke(cli, ["sql", "--json", "SELECT id FROM w.ns.t ORDER BY id"])
assert result.exit_code == 0, result.output
print(before, gc.get_freeze_count(), result.output)
"""


def test_lake_sql_freezes_what_importing_the_engine_built(lake: CliRunner, tmp_path: Path) -> None:
    # Importing the engine builds ~150,000 long-lived objects (the Lance namespace client's
    # validators): collected over repeatedly as they were made and again at exit, they cost
    # ~0.8 s of CPU per `lake sql` until the command froze them.
    run(lake, "table", "create", T, "--from", str(write_parquet(tmp_path / "a.parquet", [1, 2])))
    out = subprocess.run(
        [sys.executable, "-c", FREEZE_PROBE],
        env={**os.environ, "LAKE_HOME": str(tmp_path / "home")},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    before, after, rows = out.stdout.split(maxsplit=2)
    assert int(before) == 0 and int(after) > 100_000
    assert json.loads(rows) == [{"id": 1}, {"id": 2}]
