"""Tables and ingest; a link or a parse error never shows a file's content."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.csv as pcsv
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

from lake_platform.cli import cli
from lake_platform.errors import InvalidInput, TableSchemaValidationError
from lake_platform_tests.cli.conftest import T, run, write_parquet
from lake_platform_tests.engine.helpers import PANICS


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
    listed = run(lake, "table", "list", "--stats")
    assert listed == [{"name": T, "version": 2, "rows": 6}]
    described = run(lake, "table", "describe", T, "--stats")
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
    assert run(lake, "table", "list", "--stats")[0]["rows"] == 2
    # A replay reports what its commit appended (1 row), not 0 rows nor the files now named.
    assert (
        (again["rows_added"], again["bytes_added"])
        == (first["rows_added"], first["bytes_added"])
        == (1, first["bytes_added"])
    )
    told = lake.invoke(cli, ["ingest", T, str(f), str(f), "--commit-id", "batch-000001"]).output
    assert told.startswith(f"commit batch-000001 on {T}: 1 rows, version 1 -> 2 (already committed earlier")


def test_wrong_schema_ingest_is_refused(lake: CliRunner, tmp_path: Path) -> None:
    run(lake, "table", "create", T, "--from", str(write_parquet(tmp_path / "a.parquet", [1])))
    other = tmp_path / "other.parquet"
    pq.write_table(pa.table({"x": [1.5]}), other)
    result = lake.invoke(cli, ["ingest", T, str(other)])
    assert result.exit_code == 2 and "error [20 " in result.output
    assert run(lake, "table", "list")[0]["version"] == 1


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
    lake: CliRunner, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    from lake_platform.maintenance import sources

    caplog.set_level("DEBUG")
    run(lake, "table", "create", T, "--from", str(write_parquet(tmp_path / "a.parquet", [1])))
    data = tmp_path / "data"
    data.mkdir()
    link = data / "x.csv"
    link.symlink_to(_secret_file(tmp_path))
    for args in (
        ["ingest", T, str(link)],
        ["--json", "ingest", T, str(link)],
        ["table", "create", "p.w.ns.t2", "--from", str(link)],
    ):
        result = lake.invoke(cli, args)
        assert result.exit_code == 2, result.output
        assert (
            "x.csv" in result.output
            and "symbolic link" in result.output
            and ("INVALID_INPUT" in result.output or '"code": 13' in result.output)
        )
        assert "passwd" not in result.output and "elsewhere" not in result.output  # nor the target's path
        _no_secret(result, caplog)
    with pytest.raises(InvalidInput) as refused:
        sources.describe(link)
    assert SECRET not in str(refused.value) and "x.csv" in str(refused.value)
    assert run(lake, "table", "list", "--stats") == [{"name": T, "version": 1, "rows": 1}]


def test_ingest_reads_a_link_that_stays_in_its_folder(lake: CliRunner, tmp_path: Path) -> None:
    run(lake, "table", "create", T, "--from", str(write_parquet(tmp_path / "a.parquet", [1])))
    real = write_parquet(tmp_path / "real.parquet", [2, 3])
    (tmp_path / "alias.parquet").symlink_to("real.parquet")
    assert run(lake, "ingest", T, str(tmp_path / "alias.parquet"))["rows_added"] == 2
    assert real.exists()


@pytest.mark.parametrize(
    ("name", "content", "code"),
    [
        ("bad.csv", f"id,name\n1,a\n2,b,{SECRET}\n3,c\n", 13),  # an extra field: Arrow quotes the line
        ("value.csv", f"id,name\n{SECRET},a\n", 20),  # a value that does not convert: Arrow quotes it
        ("float.csv", "id,name\n4711.25,a\n", 20),  # a lossy cast: Arrow quotes the number
        ("header.csv", f"{SECRET},name\n1,a\n", 20),  # unknown columns: the header is content too
        ("bad.jsonl", f'{{"id": 1, "name": "a"}}\n{{"id": {SECRET}}}\n', 13),
        ("kind.jsonl", f'{{"{SECRET}": 1}}\n{{"{SECRET}": "x"}}\n', 13),  # Arrow names the column
        ("bad.parquet", f"{SECRET} is not parquet", 13),
        ("bad.arrow", f"{SECRET} is not arrow", 13),
    ],
)
def test_parse_errors_name_the_file_and_a_position_never_its_content(
    lake: CliRunner, tmp_path: Path, caplog: pytest.LogCaptureFixture, name: str, content: str, code: int
) -> None:
    from lake_platform.maintenance import sources

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
        reader = sources.open_many(
            [sources.describe(bad)], pa.schema([("id", pa.int64()), ("name", pa.string())])
        )
        reader.read_all()
    assert SECRET not in str(raised.value) and "4711" not in str(raised.value)
    assert run(lake, "table", "list")[0]["version"] == 1


def test_a_bad_csv_line_is_located(tmp_path: Path) -> None:
    from lake_platform.maintenance import sources

    bad = tmp_path / "bad.csv"
    bad.write_text("id,name\n1,a\n2,b\n3,c,extra\n")
    with pytest.raises(InvalidInput) as raised:
        sources.open_many([sources.describe(bad)]).read_all()
    message = str(raised.value)
    assert "bad.csv" in message and "expected 2 columns, got 3" in message and "at line 4" in message
    assert "extra" not in message


def test_a_value_that_breaks_type_inference_midway_is_not_quoted(tmp_path: Path) -> None:
    from lake_platform.maintenance import sources

    bad = tmp_path / "late.csv"
    bad.write_text("id,name\n" + "".join(f"{i},x\n" for i in range(5)) + f"{SECRET},y\n")
    with pytest.raises(InvalidInput) as raised:  # small blocks: the bad value lands in a later one
        sources.open_source(sources.describe(bad), block_size=16).read_all()
    message = str(raised.value)
    assert SECRET not in message
    assert (
        message == "cannot read late.csv as csv: in column 1, a value does not convert to int64, after row 5"
    )


_KILLED_WRITER = """
import os, signal, sys
import pyarrow as pa
from lake_platform.catalog.catalog import Catalog
from lake_platform.settings import load_settings

def die(point):
    # The registry commit landed; the manifest is not published.
    if point in ("append:registered", "branch-append:registered"):
        os.kill(os.getpid(), signal.SIGKILL)

rows = pa.table({"id": [2], "name": ["n2"]}).to_reader()
catalog = Catalog(load_settings(), hook=die)
if len(sys.argv) > 2:
    catalog.branch_writes.append(sys.argv[1], sys.argv[2], rows)
else:
    catalog.tables.append(sys.argv[1], rows)
"""


@pytest.mark.parametrize("branch", [None, "dev"])
def test_repair_publishes_a_version_a_killed_writer_left_unpublished(
    lake: CliRunner, tmp_path: Path, branch: str | None
) -> None:
    """On main, or on a branch: ``lake table repair`` repairs the table and its live branches."""
    import os
    import signal
    import subprocess
    import sys

    run(lake, "table", "create", T, "--from", str(write_parquet(tmp_path / "a.parquet", [1])))
    run(lake, "branch", "create", T, "dev")
    on = [] if branch is None else [branch]
    killed = subprocess.run(
        [sys.executable, "-c", _KILLED_WRITER, T, *on], env=dict(os.environ), capture_output=True
    )
    assert killed.returncode == -signal.SIGKILL, killed.stderr.decode()[-2000:]
    # Reading the data is refused; the registry alone (describe without --stats) still answers.
    describe = ["table", "describe", T, *(["--branch", branch] if branch else [])]
    refused = lake.invoke(cli, [*describe, "--stats"])
    assert refused.exit_code != 0 and "not finalized" in refused.output and "Traceback" not in refused.output

    done, nothing = {"finalized": [2], "quarantined": []}, {"finalized": [], "quarantined": []}
    main, dev = (nothing, done) if branch else (done, nothing)
    assert run(lake, "table", "repair", T) == {"table": T, **main, "branches": {"dev": dev}}
    assert run(lake, *describe, "--stats")["rows"] == 2
    text = lake.invoke(cli, ["table", "repair", T]).output  # idempotent
    assert text.splitlines() == [
        f"{T}: finalized nothing; quarantined nothing",
        f"{T} branch dev: finalized nothing; quarantined nothing",
    ]


def test_a_file_lance_panics_on_is_a_typed_error_not_a_traceback(lake: CliRunner, tmp_path: Path) -> None:
    """pylance 14.0.2 panics writing a fixed-size list of strings (``engine/panics.py``)."""
    path = tmp_path / "fsl.parquet"
    pq.write_table(PANICS, path)
    result = lake.invoke(cli, ["table", "create", T, "--from", str(path)])
    assert result.exit_code != 0 and "Traceback" not in result.output
    assert result.output.startswith("error [18 INTERNAL]: create failed: Lance panicked: ")
    assert run(lake, "table", "list") == []


@pytest.mark.parametrize(
    ("args", "message"),
    [
        # A prefix naming nothing: once "no tables" (exit 0), though `namespace list` refuses it.
        (["table", "list", "q"], "project q does not exist"),
        (["table", "list", "p.nope"], "warehouse p.nope does not exist"),
        (["table", "list", "p.w.nope"], "no namespace or table p.w.nope"),
        (["table", "list", "p.w.ns.nope"], "no namespace or table p.w.ns.nope"),
    ],
)
def test_a_list_prefix_that_names_nothing_is_not_an_empty_answer(
    lake: CliRunner, args: list[str], message: str
) -> None:
    result = lake.invoke(cli, args)
    assert result.exit_code == 1
    assert result.output == f"error [1 NAMESPACE_NOT_FOUND]: {message}\n"


def test_an_empty_container_lists_no_tables_and_a_table_lists_itself(lake: CliRunner, tmp_path: Path) -> None:
    """Only a prefix that names nothing is refused; a table's own name lists that table (the
    registry's listing by namespace alone found nothing)."""
    assert run(lake, "table", "list", "p.w.ns") == []
    assert run(lake, "table", "list", "p") == []
    run(lake, "table", "create", T, "--from", str(write_parquet(tmp_path / "a.parquet", [1])))
    assert run(lake, "table", "list", T) == [{"name": T, "version": 1, "rows": None}]
