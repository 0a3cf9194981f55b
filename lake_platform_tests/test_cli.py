"""The ``lake`` command line, run in process through click's runner with a temp LAKE_HOME."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.csv as pcsv
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

from lake_platform.cli import cli, parse_duration
from lake_platform.errors import InvalidInput, TableSchemaValidationError

T = "p.w.ns.t"


@pytest.fixture
def lake(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> CliRunner:
    monkeypatch.setenv("LAKE_HOME", str(tmp_path / "home"))
    monkeypatch.chdir(tmp_path)
    runner = CliRunner()
    for args in (["project", "create", "p"], ["warehouse", "create", "p.w"], ["namespace", "create", "p.w.ns"]):
        result = runner.invoke(cli, args)
        assert result.exit_code == 0, result.output
    return runner


def run(runner: CliRunner, *args: str) -> dict | list:  # type: ignore[type-arg]
    result = runner.invoke(cli, ["--json", *args])
    assert result.exit_code == 0, result.output
    return json.loads(result.output)


def write_parquet(path: Path, ids: list[int]) -> Path:
    pq.write_table(pa.table({"id": pa.array(ids, pa.int64()), "name": [f"n{i}" for i in ids]}), path)
    return path


def test_create_ingest_list_describe_history(lake: CliRunner, tmp_path: Path) -> None:
    created = run(lake, "table", "create", T, "--from", str(write_parquet(tmp_path / "a.parquet", [1, 2])))
    assert created["to_version"] == 1 and created["rows_added"] == 2
    csv = tmp_path / "b.csv"
    pcsv.write_csv(pa.table({"id": [3], "name": ["n3"]}), csv)
    jsonl = tmp_path / "c.jsonl"
    jsonl.write_text('{"id": 4, "name": "n4"}\n{"id": 5, "name": "n5"}\n')
    arrow = tmp_path / "d.arrow"
    with pa.ipc.new_file(arrow, pa.schema([("id", pa.int64()), ("name", pa.string())])) as w:
        w.write_table(pa.table({"id": pa.array([6], pa.int64()), "name": ["n6"]}))
    ingested = run(lake, "ingest", T, str(csv), str(jsonl), str(arrow))
    assert ingested["rows_added"] == 4 and ingested["to_version"] == 2  # one commit for all files
    listed = run(lake, "table", "list")
    assert listed == [{"name": T, "version": 2, "rows": 6}]
    described = run(lake, "table", "describe", T)
    assert described["current_version"] == 2 and described["rows"] == 6
    assert [c["name"] for c in described["schema"]] == ["id", "name"]
    assert described["location"].endswith(f"t-{described['incarnation']}.lance")
    history = run(lake, "table", "history", T)
    assert [(h["operation"], h["to_version"]) for h in history] == [("create", 1), ("append", 2)]
    human = lake.invoke(cli, ["table", "list"])
    assert T in human.output and "version" in human.output


def test_ingest_is_idempotent_with_commit_id(lake: CliRunner, tmp_path: Path) -> None:
    run(lake, "table", "create", T, "--from", str(write_parquet(tmp_path / "a.parquet", [1])))
    f = write_parquet(tmp_path / "b.parquet", [2])
    first = run(lake, "ingest", T, str(f), "--commit-id", "batch-000001")
    again = run(lake, "ingest", T, str(f), "--commit-id", "batch-000001")
    assert not first["replayed"] and again["replayed"]
    assert run(lake, "table", "list")[0]["rows"] == 2


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
    assert run(lake, "table", "list")[0]["rows"] == 4
    purged = run(lake, "table", "drop", T, "--purge")
    assert purged["expires_at_ms"] is None and run(lake, "trash", "list") == []


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


def test_wrong_schema_ingest_is_refused(lake: CliRunner, tmp_path: Path) -> None:
    run(lake, "table", "create", T, "--from", str(write_parquet(tmp_path / "a.parquet", [1])))
    other = tmp_path / "other.parquet"
    pq.write_table(pa.table({"x": [1.5]}), other)
    result = lake.invoke(cli, ["ingest", T, str(other)])
    assert result.exit_code == 2 and "error [20 " in result.output
    assert run(lake, "table", "list")[0]["version"] == 1


def test_bad_setting_names_the_variable(lake: CliRunner, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LAKE_LEASE_TTL_SECONDS", "forever")
    result = lake.invoke(cli, ["table", "list"])
    assert result.exit_code == 2 and "LAKE_LEASE_TTL_SECONDS" in result.output


def test_demo_seed_is_idempotent(tmp_path: Path) -> None:
    """What `lake up` seeds before it starts the processes (the launcher test runs `up` whole)."""
    from lake_platform.catalog.catalog import Catalog
    from lake_platform.demo import ensure_demo_user, seed_demo
    from lake_platform.settings import load_settings

    with Catalog(load_settings(home=tmp_path / "home")) as catalog:
        first, second = seed_demo(catalog), seed_demo(catalog)
        assert first.created and not second.created and first.rows == second.rows == 1000
        user, password = ensure_demo_user(catalog, tmp_path / "home")
        assert ensure_demo_user(catalog, tmp_path / "home") == (user, password)  # stable across runs
        assert catalog.authenticate_password(user, password).role == "reader"
        assert (tmp_path / "home" / "demo-user.txt").stat().st_mode & 0o777 == 0o600


def test_up_has_ports_in_help(lake: CliRunner) -> None:
    result = lake.invoke(cli, ["up", "--help"])
    assert result.exit_code == 0 and "--port" in result.output and "--flight-port" in result.output


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


def test_registry_init_creates_the_dynamodb_table(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                   moto_endpoint: str) -> None:
    url = f"dynamodb://cli_init_test?region=us-east-1&endpoint_url={moto_endpoint}"
    monkeypatch.setenv("LAKE_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("LAKE_REGISTRY_URL", url)
    runner = CliRunner()
    assert run(runner, "registry", "init") == {"registry": url, "ready": True}
    assert run(runner, "registry", "init")["ready"]  # idempotent
    run(runner, "project", "create", "p")
    assert [e["operation"] for e in run(runner, "log", "p")] == ["create project"]


def test_serve_flight_on_a_busy_port_fails_cleanly(lake: CliRunner, monkeypatch: pytest.MonkeyPatch) -> None:
    import socket

    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        monkeypatch.setenv("LAKE_FLIGHT_PORT", str(busy.getsockname()[1]))
        result = lake.invoke(cli, ["serve-flight"])
    assert result.exit_code == 1
    assert "SERVICE_UNAVAILABLE" in result.output and "cannot listen on 127.0.0.1" in result.output
    assert "Traceback" not in result.output


def test_every_commit_carries_lake_actor(lake: CliRunner, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LAKE_ACTOR", "alice")
    parquet = str(write_parquet(tmp_path / "a.parquet", [1]))
    q = "q.w.ns.t"
    for args in (["project", "create", "q"], ["warehouse", "create", "q.w"], ["namespace", "create", "q.w.ns"],
                 ["table", "create", q, "--from", parquet], ["ingest", q, parquet],
                 ["table", "protect", q], ["table", "protect", q, "--off"],
                 ["policy", "set", q, "trash_grace=1d", "retain_versions=3"], ["policy", "unset", q, "trash_grace"],
                 ["policy", "delete", q], ["table", "drop", q], ["table", "undrop", q],
                 ["namespace", "drop", "q.w.ns", "--cascade"], ["namespace", "undrop", "q.w.ns"],
                 ["namespace", "drop", "q.w.ns", "--cascade", "--purge"], ["trash", "expire"],
                 ["user", "add", "cy", "--project", "q", "--role", "reader"], ["user", "remove", "cy"],
                 ["warehouse", "drop", "q.w"], ["project", "drop", "q"]):
        run(lake, *args)
    entries = run(lake, "log", "q")
    assert {"create project", "create warehouse", "create namespace", "create", "append", "protect", "unprotect",
            "policy set", "policy unset", "policy delete", "drop", "undrop", "drop namespace cascade",
            "undrop namespace", "purge", "user add", "user remove", "drop warehouse",
            "drop project"} <= {e["operation"] for e in entries}
    assert sorted({(e["operation"], e["actor"]) for e in entries if e["actor"] != "alice"}) == []


def test_policy_unset_and_delete(lake: CliRunner) -> None:
    run(lake, "policy", "set", "p.w", "retain_versions=4")
    run(lake, "policy", "set", "p.w.ns", "retain_versions=3", "retention=1d")
    unset = run(lake, "policy", "unset", "p.w.ns", "retention")
    assert unset["policy"]["retention_seconds"] == 7 * 86400 and unset["policy"]["retain_versions"] == 3
    assert run(lake, "policy", "delete", "p.w.ns") == {"deleted": "p.w.ns"}
    assert run(lake, "policy", "show", "p.w.ns", "--effective")["source"] == "p.w"
    for args, code in ((["policy", "delete", "p.w.ns"], 1), (["policy", "unset", "p.w", "nope"], 13),
                       (["policy", "unset", "p.w.ns", "retention"], 1)):
        result = lake.invoke(cli, ["--json", *args])
        assert result.exit_code != 0 and json.loads(result.output)["error"]["code"] == code, result.output
    for sub in ("unset", "delete"):
        help_text = lake.invoke(cli, ["policy", sub, "--help"])
        assert help_text.exit_code == 0 and "SCOPE" in help_text.output


# -- ingest: links and parse errors never show a file's content ----------------------------------

SECRET = "TOPSECRET-4711"


def _secret_file(tmp_path: Path) -> Path:
    """Like /etc/passwd: one colon-separated record per line, a secret inside."""
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir(exist_ok=True)
    secret = elsewhere / "passwd"
    secret.write_text(f"root:x:0:0:{SECRET}:/root:/bin/bash\nuser:x:1:1:{SECRET}-2:/home:/bin/sh\n")
    return secret


def _no_secret(result: object, caplog: pytest.LogCaptureFixture) -> None:
    for text in (result.output, result.stdout, result.stderr, caplog.text):  # type: ignore[attr-defined]
        assert SECRET not in text


def test_ingest_refuses_a_link_that_leaves_its_folder_and_quotes_nothing(
        lake: CliRunner, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    from lake_platform import sources

    caplog.set_level("DEBUG")
    run(lake, "table", "create", T, "--from", str(write_parquet(tmp_path / "a.parquet", [1])))
    data = tmp_path / "data"
    data.mkdir()
    link = data / "x.csv"
    link.symlink_to(_secret_file(tmp_path))
    for args in (["ingest", T, str(link)], ["--json", "ingest", T, str(link)],
                 ["table", "create", "p.w.ns.t2", "--from", str(link)]):
        result = lake.invoke(cli, args)
        assert result.exit_code == 2, result.output
        assert "x.csv" in result.output and "symbolic link" in result.output and ("INVALID_INPUT" in result.output or '"code": 13' in result.output)
        assert "passwd" not in result.output and "elsewhere" not in result.output  # nor the target's path
        _no_secret(result, caplog)
    with pytest.raises(InvalidInput) as refused:
        sources.describe(link)
    assert SECRET not in str(refused.value) and "x.csv" in str(refused.value)
    assert run(lake, "table", "list") == [{"name": T, "version": 1, "rows": 1}]


def test_ingest_reads_a_link_that_stays_in_its_folder(lake: CliRunner, tmp_path: Path) -> None:
    run(lake, "table", "create", T, "--from", str(write_parquet(tmp_path / "a.parquet", [1])))
    real = write_parquet(tmp_path / "real.parquet", [2, 3])
    (tmp_path / "alias.parquet").symlink_to("real.parquet")
    assert run(lake, "ingest", T, str(tmp_path / "alias.parquet"))["rows_added"] == 2
    assert real.exists()


@pytest.mark.parametrize(("name", "content", "code"), [
    ("bad.csv", f"id,name\n1,a\n2,b,{SECRET}\n3,c\n", 13),  # an extra field: Arrow quotes the line
    ("value.csv", f"id,name\n{SECRET},a\n", 20),  # a value that does not convert: Arrow quotes it
    ("float.csv", "id,name\n4711.25,a\n", 20),  # a lossy cast: Arrow quotes the number
    ("header.csv", f"{SECRET},name\n1,a\n", 20),  # unknown columns: the header is content too
    ("bad.jsonl", f'{{"id": 1, "name": "a"}}\n{{"id": {SECRET}}}\n', 13),
    ("kind.jsonl", f'{{"{SECRET}": 1}}\n{{"{SECRET}": "x"}}\n', 13),  # Arrow names the column
    ("bad.parquet", f"{SECRET} is not parquet", 13),
    ("bad.arrow", f"{SECRET} is not arrow", 13),
])
def test_parse_errors_name_the_file_and_a_position_never_its_content(
        lake: CliRunner, tmp_path: Path, caplog: pytest.LogCaptureFixture, name: str, content: str, code: int) -> None:
    from lake_platform import sources

    caplog.set_level("DEBUG")
    run(lake, "table", "create", T, "--from", str(write_parquet(tmp_path / "a.parquet", [1])))
    bad = tmp_path / name
    bad.write_text(content)
    result = lake.invoke(cli, ["ingest", T, str(bad)])
    assert result.exit_code == 2, result.output
    assert f"error [{code} " in result.output and name in result.output
    _no_secret(result, caplog)
    assert "4711" not in result.output
    with pytest.raises(InvalidInput if code == 13 else TableSchemaValidationError) as raised:
        reader = sources.open_many([sources.describe(bad)], pa.schema([("id", pa.int64()), ("name", pa.string())]))
        reader.read_all()
    assert SECRET not in str(raised.value) and "4711" not in str(raised.value)
    assert run(lake, "table", "list")[0]["version"] == 1


def test_a_bad_csv_line_is_located(tmp_path: Path) -> None:
    from lake_platform import sources

    bad = tmp_path / "bad.csv"
    bad.write_text("id,name\n1,a\n2,b\n3,c,extra\n")
    with pytest.raises(InvalidInput) as raised:
        sources.open_many([sources.describe(bad)]).read_all()
    message = str(raised.value)
    assert "bad.csv" in message and "expected 2 columns, got 3" in message and "at line 4" in message
    assert "extra" not in message


def test_a_value_that_breaks_type_inference_midway_is_not_quoted(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from lake_platform import sources

    monkeypatch.setattr(sources, "BLOCK_SIZE", 16)  # the bad value lands in a later block
    bad = tmp_path / "late.csv"
    bad.write_text("id,name\n" + "".join(f"{i},x\n" for i in range(5)) + f"{SECRET},y\n")
    with pytest.raises(InvalidInput) as raised:
        sources.open_many([sources.describe(bad)]).read_all()
    message = str(raised.value)
    assert SECRET not in message
    assert message == "cannot read late.csv as csv: in column 1, a value does not convert to int64, after row 5"
