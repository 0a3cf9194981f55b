"""The root group: the command tree, typed errors, settings errors, the entry points."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from lake_platform.cli import cli, parse_duration
from lake_platform.cli.app import handles_errors
from lake_platform.errors import InvalidInput
from lake_platform_tests.engine.helpers import lance_panic

COMMAND_TREE = [
    "audit queries",
    "branch compact",
    "branch create",
    "branch delete",
    "branch list",
    "branch publish",
    "branch undrop",
    "cleanup",
    "compact",
    "conformance",
    "dagster",
    "dagster-daemon",
    "dagster-webserver",
    "flight retire-keys",
    "flight rotate-key",
    "index create",
    "index drop",
    "index list",
    "index refresh",
    "ingest",
    "log",
    "namespace create",
    "namespace drop",
    "namespace list",
    "namespace protect",
    "namespace undrop",
    "orphans reclaim",
    "orphans reclaim-folders",
    "orphans scan",
    "orphans scan-folders",
    "policy delete",
    "policy set",
    "policy show",
    "policy unset",
    "project create",
    "project drop",
    "project list",
    "registry init",
    "registry migrate",
    "results expire",
    "serve-flight",
    "serve-rest",
    "sql",
    "table alter add-column",
    "table alter drop-column",
    "table alter rename-column",
    "table create",
    "table describe",
    "table drop",
    "table history",
    "table list",
    "table protect",
    "table repair",
    "table undrop",
    "tag create",
    "tag delete",
    "tag list",
    "token create",
    "token list",
    "token revoke",
    "trash expire",
    "trash list",
    "up",
    "user add",
    "user list",
    "user remove",
    "user set-role",
    "warehouse create",
    "warehouse drop",
    "warehouse list",
    "warehouse protect",
]


def _leaves(group: click.Group, prefix: str = "") -> list[str]:
    names = []
    for name, command in sorted(group.commands.items()):
        path = f"{prefix}{name}"
        names += _leaves(command, f"{path} ") if isinstance(command, click.Group) else [path]
    return names


def test_every_command_module_is_attached_to_the_root_group() -> None:
    assert _leaves(cli) == COMMAND_TREE


def test_runs_as_a_module(tmp_path: Path) -> None:
    """`lake up` starts the Flight SQL endpoint as ``python -m lake_platform.cli serve-flight``."""
    env = {**os.environ, "LAKE_HOME": str(tmp_path / "home")}
    out = subprocess.run(
        [sys.executable, "-m", "lake_platform.cli", "serve-flight", "--help"],
        capture_output=True,
        text=True,
        env=env,
        check=True,
    )
    assert out.stdout.startswith("Usage: lake serve-flight") and "--host" in out.stdout


@pytest.mark.parametrize("args", [["--help"], ["table", "describe", "p.w.ns.missing"]])
def test_a_command_exits_with_its_heap_frozen(tmp_path: Path, args: list[str]) -> None:
    """The interpreter's final collections skip what the command built: 0.7-1 s of the exit of a
    command that imported Lance, pyarrow or Dagster, ~4 s of `lake up`'s. Success or failure."""
    script = (
        "import atexit, gc, sys\n"
        "atexit.register(lambda: print('frozen', gc.get_freeze_count(), file=sys.stderr))\n"
        "from lake_platform.cli import main\n"
        "main()\n"
    )
    env = {**os.environ, "LAKE_HOME": str(tmp_path / "home")}
    out = subprocess.run([sys.executable, "-c", script, *args], capture_output=True, text=True, env=env)
    frozen = [line for line in out.stderr.splitlines() if line.startswith("frozen ")]
    assert frozen and int(frozen[-1].split()[1]) > 0, out.stderr


@pytest.mark.parametrize(
    ("args", "code"),
    [
        (["table", "describe", "Bad.Name.x.y"], 13),
        (["table", "describe", "p.w.ns.missing"], 4),
        (["namespace", "create", "p.nope.ns"], 1),
        (["project", "create", "p"], 2),
        (["ingest", "p.w.ns.t", "/nonexistent/file.parquet"], 13),
        (["cleanup", "p.w.ns.t", "--older-than", "soon"], 13),
        (["warehouse", "create", "p.x", "--root", "ftp://host/x"], 13),
    ],
)
def test_errors_print_code_and_message_without_traceback(lake: CliRunner, args: list[str], code: int) -> None:
    result = lake.invoke(cli, args)
    assert result.exit_code != 0
    assert f"error [{code} " in result.output
    assert "Traceback" not in result.output
    as_json = lake.invoke(cli, ["--json", *args])
    assert json.loads(as_json.output)["error"]["code"] == code


def test_bad_setting_names_the_variable(lake: CliRunner, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LAKE_LEASE_TTL_SECONDS", "forever")
    result = lake.invoke(cli, ["table", "list"])
    assert result.exit_code == 2 and "LAKE_LEASE_TTL_SECONDS" in result.output


def test_installed_console_script_runs(tmp_path: Path) -> None:
    exe = Path(sys.executable).with_name("lake")
    env = {**os.environ, "LAKE_HOME": str(tmp_path / "home")}
    out = subprocess.run([str(exe), "--help"], capture_output=True, text=True, env=env, check=True)
    assert "ingest" in out.stdout and "table" in out.stdout


def test_parse_duration() -> None:
    assert parse_duration("90m").total_seconds() == 5400
    assert parse_duration("7d").days == 7
    for bad in ("", "7", "d", "-1h", "1.5h", "1y"):
        with pytest.raises(InvalidInput):
            parse_duration(bad)


def test_text_tables_leave_unknown_cells_blank() -> None:
    from lake_platform.cli.app import text_table

    # A declare has no versions yet: blank, not "None" (--json keeps the nulls).
    out = text_table(["operation", "from", "to"], [{"operation": "declare", "from": None, "to": None}])
    assert out.splitlines() == ["operation  from  to", "declare"]
    assert text_table(["a", "bb"], []) == "a  bb"  # no rows: the header alone


def test_a_lance_panic_is_a_typed_error_not_a_traceback(tmp_path: Path) -> None:
    """A panic raised outside the engine's calls (rows read by ``lake sql`` in process) is a
    BaseException every ``except Exception`` lets through."""
    panic = lance_panic(tmp_path)

    @click.command()
    @handles_errors
    def panics() -> None:
        raise panic

    result = CliRunner().invoke(panics, [])
    assert result.exit_code == 1 and "Traceback" not in result.output
    assert result.output.startswith("error [18 INTERNAL]: Lance panicked: ")


@pytest.mark.parametrize(
    "args",
    [
        ["table", "create", "p.w.ns.t9"],  # a missing option
        ["table", "nope"],  # an unknown command
        ["log", "--limit", "0"],  # a value out of range
        ["project", "list", "extra"],  # an extra argument
        # A mistake at the root: they were click's usage text, as the root's callback (which
        # makes the --json state) had not run yet.
        ["nope"],  # an unknown command
        ["--nope", "project", "list"],  # an unknown option
    ],
)
def test_usage_errors_under_json_are_json(lake: CliRunner, args: list[str]) -> None:
    """A script reading --json output gets a JSON error for a bad command line too, not click's
    usage text (and nothing on stdout)."""
    result = lake.invoke(cli, ["--json", *args])
    assert result.exit_code == 2
    error = json.loads(result.stdout)["error"]
    assert error["code"] == 13 and error["error"] == "InvalidInput" and error["message"]
    plain = lake.invoke(cli, args)  # without --json: click's usage text, as before
    assert plain.exit_code == 2 and "Usage: " in plain.stderr and not plain.stdout


def test_no_command_under_json_is_a_json_error(lake: CliRunner) -> None:
    """`lake --json` alone was click's "Missing command." usage text on stderr."""
    result = lake.invoke(cli, ["--json"])
    assert result.exit_code == 2 and "Missing command" in json.loads(result.stdout)["error"]["message"]


def test_a_home_that_cannot_be_created_is_a_typed_error_naming_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    blocker = tmp_path / "afile"
    blocker.write_text("")
    monkeypatch.setenv("LAKE_HOME", str(blocker / "home"))
    result = CliRunner().invoke(cli, ["--json", "project", "create", "p"])
    assert result.exit_code == 2
    error = json.loads(result.stdout)["error"]
    assert error["code"] == 13 and str(blocker) in error["message"]
    assert not (blocker / "home").exists()


def test_a_connection_refused_is_unavailable_not_a_bad_path() -> None:
    """An OSError without a path of the user's (a server that refused the connection) is
    SERVICE_UNAVAILABLE, not a path to fix."""

    @click.command()
    @handles_errors
    def connects() -> None:
        raise ConnectionRefusedError(111, "Connection refused")

    result = CliRunner().invoke(connects, [])
    assert result.exit_code == 1
    assert result.output == "error [17 SERVICE_UNAVAILABLE]: [Errno 111] Connection refused\n"


def test_a_misspelt_setting_is_warned_about(
    lake: CliRunner, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """LAKE_LEASE_TTL_SECOND (no S) would be ignored in silence, the default in force."""
    monkeypatch.setenv("LAKE_LEASE_TTL_SECOND", "5")
    with caplog.at_level("WARNING", logger="lake_platform.cli"):
        result = lake.invoke(cli, ["project", "list"])
    assert result.exit_code == 0
    assert [r.getMessage() for r in caplog.records if r.name == "lake_platform.cli"] == [
        "LAKE_LEASE_TTL_SECOND: no such setting (did you mean LAKE_LEASE_TTL_SECONDS?); ignored"
    ]


def test_a_reader_that_stops_reading_ends_the_command_quietly(lake: CliRunner) -> None:
    """`lake ... | head`: once 'error [18 INTERNAL]: unexpected error (BrokenPipeError)' on
    stderr; now the shell's exit status for a closed pipe (141) and nothing printed."""
    sql = "SELECT * FROM generate_series(1, 200000)"
    proc = subprocess.Popen(
        [sys.executable, "-m", "lake_platform.cli", "--json", "sql", "--project", "p", sql],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert proc.stdout is not None and proc.stderr is not None
    assert proc.stdout.read(10)  # it is writing
    proc.stdout.close()
    err = proc.stderr.read()
    assert proc.wait(60) == 141 and err == b""


def test_text_a_terminal_cannot_encode_is_escaped_not_an_internal_error(tmp_path: Path) -> None:
    """A terminal whose encoding is not UTF-8 (an ASCII or Latin-1 locale, a CI log): a value it
    cannot encode (a name with an accent in a query's rows, a tenant's SQL in `lake audit
    queries`) ended the command with INTERNAL 'unexpected error (UnicodeEncodeError)' and
    printed nothing of the answer. Now the character is shown escaped."""
    env = {**os.environ, "LAKE_HOME": str(tmp_path / "home"), "PYTHONIOENCODING": "ascii"}
    lake = [sys.executable, "-m", "lake_platform.cli"]
    subprocess.run([*lake, "project", "create", "p"], capture_output=True, env=env, check=True)
    out = subprocess.run(
        [*lake, "sql", "--project", "p", "SELECT 'caf\u00e9 \u2713' AS x"], capture_output=True, env=env
    )
    assert out.returncode == 0, out.stderr
    assert b"caf\\xe9 \\u2713" in out.stdout and b"1 row" in out.stdout
