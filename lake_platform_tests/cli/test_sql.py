"""``lake sql``: the same results, refusals and tenancy as the Flight endpoint, and a streamed --output.

The registry is the Flight tests' two-tenant catalog (``p`` with alice, ``q`` with bob) with the
two users also registered, and a real Flight server over it for the comparison.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.csv as pcsv
import pyarrow.flight as fl
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner, Result

from lake_platform.catalog.catalog import Catalog
from lake_platform.cli import cli
from lake_platform_tests.flight.conftest import Running, build_catalog, login, query, start_server
from lake_platform_tests.flight.test_security import hostile_corpus

QUERIES = [
    "SELECT * FROM w.ns.t ORDER BY id",
    "SELECT s, x * 2 AS y FROM w.ns.t WHERE id % 7 = 3 ORDER BY s",
    "SELECT count(*) AS n, sum(id) AS total FROM w.ns.multi",
    'SELECT t.id, u.id AS uid FROM w.ns.t AS t JOIN w."ns.sub".u AS u ON t.id = u.id ORDER BY t.id',
]


@pytest.fixture(scope="module")
def running(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Running]:
    settings, catalog = build_catalog(tmp_path_factory.mktemp("sql") / "home")
    catalog.access.add_user("alice", project="p", role="reader", password="alice-password")
    catalog.access.add_user("bob", project="q", role="reader", password="bob-password")
    server = start_server(settings, catalog)
    try:
        yield Running(server, settings, catalog)
    finally:
        server.stop(grace=1)
        catalog.close()


def lake(running: Running, *args: str) -> Result:
    return CliRunner().invoke(cli, list(args), env={"LAKE_HOME": str(running.settings.home)})


def registry_state(catalog: Catalog) -> list[tuple[str, bytes]]:
    return [(i.key, i.value) for i in catalog.store.scan_prefix("")]


def flight_result(running: Running, user: str, sql: str) -> pa.Table:
    client, options = login(running.uri, user)
    return query(client, options, sql)


def flight_error(running: Running, user: str, sql: str) -> tuple[int, str]:
    """The code and message Flight refuses ``sql`` with (its status ends ``[Type, code N]``)."""
    client, options = login(running.uri, user)
    with pytest.raises((fl.FlightError, pa.ArrowException)) as err:
        query(client, options, sql)
    match = re.search(r"(?s)^(?:.*?: )?(.*) \[\w+, code (\d+)\]", str(err.value))
    assert match, str(err.value)
    return int(match.group(2)), match.group(1)


def cli_error(result: Result) -> tuple[int, str]:
    match = re.fullmatch(r"(?s)error \[(\d+) \w+\]: (.*)\n", result.output)
    assert match, result.output
    return int(match.group(1)), match.group(2)


@pytest.mark.parametrize("sql", QUERIES)
def test_output_file_equals_the_flight_result_for_the_same_user(
    running: Running, tmp_path: Path, sql: str
) -> None:
    expected = flight_result(running, "alice", sql)
    for name in ("r.parquet", "r.arrow", "r.csv"):
        path = tmp_path / name
        result = lake(running, "sql", "--as", "alice", "--output", str(path), sql)
        assert result.exit_code == 0, result.output
        assert f"{expected.num_rows} rows written" in result.output
        if name.endswith(".parquet"):
            got = pq.read_table(path)
        elif name.endswith(".arrow"):
            got = pa.ipc.open_file(path).read_all()
        else:
            # CSV keeps neither nullability nor types: read back with the expected types.
            types = pcsv.ConvertOptions(column_types=expected.schema)
            got = pcsv.read_csv(path, convert_options=types).cast(expected.schema)
        assert got.equals(expected), name


def test_json_rows_and_table_equal_the_flight_result(running: Running) -> None:
    sql = QUERIES[1]
    expected = flight_result(running, "bob", "SELECT * FROM w.ns.secret")
    result = lake(running, "sql", "--as", "bob", "--json", "SELECT * FROM w.ns.secret")
    assert result.exit_code == 0, result.output
    assert json.loads(result.output) == expected.to_pylist() == [{"code": "bob-only"}]
    expected = flight_result(running, "alice", sql)
    result = lake(running, "--json", "sql", "--as", "alice", sql)
    assert json.loads(result.output) == expected.to_pylist()
    result = lake(running, "sql", "--as", "alice", "--head", "3", sql)
    assert result.exit_code == 0, result.output
    shown = expected.to_pylist()[:3]
    for row in shown:
        assert str(row["s"]) in result.output
    assert str(expected.to_pylist()[3]["s"]) not in result.output
    assert re.search(rf"{expected.num_rows} rows \(3 shown\) in \d+\.\d\ds\n$", result.output)


def test_hostile_sql_is_refused_exactly_as_on_flight(running: Running, tmp_path: Path) -> None:
    before = registry_state(running.catalog)
    for sql in hostile_corpus(tmp_path):
        expected = flight_error(running, "alice", sql)
        out = str(tmp_path / "out.parquet")
        result = lake(running, "sql", "--as", "alice", "--output", out, "--", sql)
        assert result.exit_code == 2, (sql[:60], result.output)
        assert cli_error(result) == expected, sql[:60]
    assert registry_state(running.catalog) == before
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT * FROM w.ns.secret",
        "SELECT * FROM q.w.ns.secret",
        "SELECT * FROM w.ns.t AS a JOIN w.ns.secret AS b ON true",
        "SELECT * FROM information_schema.tables",
        "SELECT * FROM datafusion.information_schema.columns",
    ],
)
def test_another_tenants_tables_are_invisible_as_on_flight(running: Running, sql: str) -> None:
    expected = flight_error(running, "alice", sql)
    result = lake(running, "sql", "--as", "alice", sql)
    assert result.exit_code != 0
    assert cli_error(result) == expected
    assert "bob-only" not in result.output


def test_admin_picks_the_project(running: Running) -> None:
    result = lake(running, "sql", "SELECT 1 AS one")
    assert result.exit_code == 2
    assert "--project" in result.output and "p, q" in result.output
    result = lake(running, "--json", "sql", "--project", "q", "SELECT * FROM w.ns.secret")
    assert json.loads(result.output) == [{"code": "bob-only"}]
    result = lake(running, "sql", "--project", "q", "--as", "alice", "SELECT 1")
    assert result.exit_code == 2 and "belongs to project p" in result.output


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--as", "nobody"], "--as nobody: no such user"),
        (["--as", "../x"], "user name"),
        (["--project", "zz"], "--project zz: no such project"),
        (["--project", "p", "--output", "out.txt"], "the extension must be one of"),
        (["--project", "p", "--output", "missing/out.csv"], "does not exist"),
        # A folder no file can be made in: the file asked for and why, not INTERNAL.
        (["--project", "p", "--output", "/proc/out.csv"], "/proc/out.csv: cannot write there (No such file"),
    ],
)
def test_bad_input_is_a_typed_error(
    running: Running, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, args: list[str], message: str
) -> None:
    monkeypatch.chdir(tmp_path)
    result = lake(running, "sql", *args, "SELECT 1")
    assert result.exit_code == 2, result.output
    assert result.output.startswith("error [13 INVALID_INPUT]: ") and message in result.output
    assert list(tmp_path.iterdir()) == []


def test_a_failed_query_leaves_no_output_file(running: Running, tmp_path: Path) -> None:
    out = tmp_path / "r.parquet"
    result = lake(running, "sql", "--as", "alice", "--output", str(out), "SELECT 1 / (id - 500) FROM w.ns.t")
    assert result.exit_code != 0
    assert result.output.startswith("error [")
    assert list(tmp_path.iterdir()) == []


#: The command's own peak (VmHWM, of this process's memory map only): getrusage's ru_maxrss
#: also keeps the forking parent's resident size (Linux carries it across exec), so late in a
#: long pytest run it reported pytest's 1.6 GB.
PEAK_RSS = """
import sys
from lake_platform.cli import main
sys.argv = ["lake", *sys.argv[1:]]
try:
    main()
finally:
    with open("/proc/self/status") as status:
        kib = next(int(line.split()[1]) for line in status if line.startswith("VmHWM:"))
    print("peak", kib * 1024, file=sys.stderr)
"""


def peak_rss(running: Running, *args: str, **env: Any) -> tuple[subprocess.CompletedProcess[str], int]:
    proc = subprocess.run(
        [sys.executable, "-c", PEAK_RSS, *args],
        env={**os.environ, "LAKE_HOME": str(running.settings.home), **env},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    return proc, int(re.search(r"peak (\d+)", proc.stderr).group(1))  # type: ignore[union-attr]


@pytest.mark.slow
def test_output_streams_a_result_far_larger_than_the_memory_it_takes(
    running: Running, tmp_path: Path
) -> None:
    """A result four times larger (1.5M vs 6M rows of ~210 bytes; 0.35 vs 1.3 GB in Arrow) against
    a 64 MiB DataFusion pool: the writing process's peak RSS does not grow with the result.
    Measured ~450 MiB at both sizes when the machine is quiet; collecting the result first peaked
    at 3.1 GB. The difference between the two sizes is the robust figure (an allocator's
    retention varies with load and with what ran before); the absolute bound is a backstop."""
    peaks = {}
    for rows in (1_500_000, 6_000_000):
        sql = (
            "SELECT value AS id, concat(repeat('x', 200), CAST(value AS VARCHAR)) AS s "
            f"FROM generate_series(1, {rows})"
        )
        out = tmp_path / f"big-{rows}.arrow"
        env = {"LAKE_FLIGHT_MEMORY_LIMIT_BYTES": str(64 << 20)}
        proc, peaks[rows] = peak_rss(running, "sql", "--as", "alice", "--output", str(out), sql, **env)
        assert f"{rows} rows written" in proc.stdout
        with pa.memory_map(str(out)) as source:
            reader = pa.ipc.open_file(source)
            assert sum(reader.get_batch(i).num_rows for i in range(reader.num_record_batches)) == rows
    assert (tmp_path / "big-6000000.arrow").stat().st_size > 1_300_000_000
    assert peaks[6_000_000] - peaks[1_500_000] < 250 << 20, peaks  # ~1 GB more if it collected
    assert peaks[6_000_000] < 1536 << 20, peaks


def test_time_travel_reads_as_on_flight(running: Running) -> None:
    """The quoted-name syntax is how ``lake sql`` travels in time too (``multi`` has versions
    1..5, 100 rows each); a missing version is refused with Flight's code and message."""
    sql = 'SELECT count(*) AS n, max(id) AS top FROM w.ns."multi@v2"'
    expected = flight_result(running, "alice", sql)
    assert expected.to_pylist() == [{"n": 200, "top": 199}]
    result = lake(running, "--json", "sql", "--as", "alice", sql)
    assert result.exit_code == 0, result.output
    assert json.loads(result.output) == expected.to_pylist()
    missing = 'SELECT * FROM w.ns."multi@v42"'
    result = lake(running, "sql", "--as", "alice", missing)
    assert cli_error(result) == flight_error(running, "alice", missing)
    code, message = cli_error(result)
    # The table in full, as every other error names one: it said "version 42 of w.ns.multi".
    assert code == 11 and message.startswith("version 42 of p.w.ns.multi does not exist"), message
    for selector, said in (
        ("tag:nope", "no tag nope on p.w.ns.multi"),
        ("branch:nope", "no branch nope on p.w.ns.multi"),
    ):
        assert (
            said
            in cli_error(lake(running, "sql", "--as", "alice", f'SELECT * FROM w.ns."multi@{selector}"'))[1]
        )


def lake_command() -> list[str]:
    """The installed ``lake`` script of this environment (what a user runs)."""
    script = Path(sys.executable).parent / "lake"
    return [str(script)] if script.exists() else [sys.executable, "-m", "lake_platform.cli"]


RUNS = 24


@pytest.mark.slow
def test_lake_sql_json_exits_cleanly_every_time(running: Running) -> None:
    """24 runs of ``lake sql --json``, two at a time: each prints the right rows, nothing on
    stderr, and exits 0. Before every batch was taken on the main thread, DataFusion's runtime
    thread that hands over an asynchronous batch could still be inside Python when the process
    finalised: 2 to 6 of 20 runs ended with ``Fatal Python error: PyGILState_Release`` (exit
    134) after printing the rows, so 24 runs miss it about once in 200. Each run is seconds of
    CPU, mostly importing (pandas, DataFusion, Lance; before the query layer stopped importing
    the Lance namespace client, its pydantic validators were half of it): 50 runs overran the
    test's 600 s on a loaded machine."""
    sql = "SELECT id, s FROM w.ns.t WHERE id < 5 ORDER BY id"
    expected = flight_result(running, "alice", sql).to_pylist()
    env = {**os.environ, "LAKE_HOME": str(running.settings.home)}
    command = [*lake_command(), "sql", "--as", "alice", "--json", sql]

    def run_once(_: int) -> subprocess.CompletedProcess[str]:
        return subprocess.run(command, env=env, capture_output=True, text=True, timeout=300)

    with ThreadPoolExecutor(2) as pool:
        runs = list(pool.map(run_once, range(RUNS)))
    failed = [(r.returncode, r.stderr[-300:], r.stdout[-300:]) for r in runs if r.returncode != 0 or r.stderr]
    assert failed == [], f"{len(failed)} of {RUNS} runs failed: {failed[:3]}"
    assert all(json.loads(r.stdout) == expected for r in runs)


def test_the_time_limit_stops_a_long_batch(running: Running) -> None:
    """A cross join whose one aggregate batch takes minutes is stopped at the time limit with
    the endpoint's QueryTimeout, not when the batch is done (a blocking stream checks its
    deadline between batches only; the SIGALRM timer stops it within one). In a process of
    its own: DataFusion's runtime goes on computing a dropped stream's join, until the process
    exits."""
    sql = (
        "SELECT sum(a.value * b.value % 7) AS s "
        "FROM generate_series(1, 200000) AS a, generate_series(1, 200000) AS b"
    )
    env = {**os.environ, "LAKE_HOME": str(running.settings.home), "LAKE_FLIGHT_QUERY_TIMEOUT_SECONDS": "1"}
    env["LAKE_FLIGHT_MAX_JOIN_PAIRS"] = "0"  # the bound would refuse this join before it runs
    proc = subprocess.run(
        [*lake_command(), "sql", "--as", "alice", sql], env=env, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 1, proc.stderr
    assert re.fullmatch(
        r"error \[18 \w+\]: the query ran longer than LAKE_FLIGHT_QUERY_TIMEOUT_SECONDS=1 and was stopped\n",
        proc.stdout + proc.stderr,
    ), (proc.stdout, proc.stderr)


def test_json_rows_that_fail_part_way_are_one_json_error_document(running: Running) -> None:
    """Rows were printed as they came: a query failing in a later batch left stdout an
    unterminated array of the rows so far with the error object after it (two documents, not
    one, and not JSON: `jq` failed, a lenient reader took the first rows for the answer). Now
    stdout is the rows once the query finished, or the error alone."""
    env = {**os.environ, "LAKE_HOME": str(running.settings.home)}
    command = [sys.executable, "-m", "lake_platform.cli", "--json", "sql", "--project", "p"]
    failing = "SELECT id, 10 / (id - 450) AS x FROM w.ns.multi"
    out = subprocess.run([*command, failing], capture_output=True, text=True, env=env)
    assert out.returncode == 2, out.stderr
    assert json.loads(out.stdout)["error"]["message"] == "Arrow error: Divide by zero error", out.stdout
    ok = subprocess.run(
        [*command, "SELECT id FROM w.ns.multi ORDER BY id"], capture_output=True, text=True, env=env
    )
    assert ok.returncode == 0 and json.loads(ok.stdout) == [{"id": i} for i in range(500)]


def test_a_query_opens_its_tables_without_the_namespace_client(running: Running) -> None:
    """``lake sql`` opens the versions it reads by location and number (``engine.pinned``), so
    it never imports ``lance_namespace``: its generated REST client builds pydantic validators
    for every REST method on import, which was half of every ``lake sql``'s CPU. Seen in the
    modules a real run imported (``-X importtime``), the table's open among them."""
    env = {**os.environ, "LAKE_HOME": str(running.settings.home)}
    command = [
        sys.executable,
        "-X",
        "importtime",
        "-m",
        "lake_platform.cli",
        "sql",
        "--as",
        "alice",
        "--json",
    ]
    proc = subprocess.run(
        [*command, "SELECT count(*) AS n FROM w.ns.t"], env=env, capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr
    imported = {
        line.rpartition("|")[2].strip()
        for line in proc.stderr.splitlines()
        if line.startswith("import time:")
    }
    assert sorted(m for m in imported if m.partition(".")[0].startswith("lance_namespace")) == []
    assert "lake_platform.engine.pinned" in imported
