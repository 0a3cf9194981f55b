"""A query whose expression or plan is thousands of operators deep is refused before DataFusion
plans it (``query.sql.check_depth``).

DataFusion walks expressions and plans recursively: ``SELECT 1+1+...+1`` (10,000 terms, 20 kB,
well within LAKE_FLIGHT_MAX_SQL_BYTES), ``WHERE id = 1 OR id = 2 OR ...`` or a long ``UNION ALL``
chain overflowed a thread's stack and the endpoint died of SIGSEGV: one reader of one tenant
ended every tenant's session and running query. Measured on a server in its own process.
"""

from __future__ import annotations

from collections.abc import Iterator

import pyarrow as pa
import pyarrow.flight as fl
import pytest

from lake_platform_tests.flight.conftest import build_catalog, fetch, login, plan
from lake_platform_tests.flight.server_process import spawn

DEEP = {
    "sum": "SELECT " + "1+" * 10_000 + "1",
    "or": "SELECT count(*) FROM w.ns.t WHERE " + " OR ".join(f"id = {i}" for i in range(10_000)),
    "column-sum": "SELECT " + "id+" * 4_000 + "1 FROM w.ns.t",
    "concat": "SELECT s" + " || s" * 4_000 + " FROM w.ns.t",
    # read as a plain string, E'\'' ran on to the next quote and the chain went unchecked
    "after-an-e-string": "SELECT E'\\'', " + "1+" * 10_000 + "1 AS x, 'a'",
    "union": " UNION ALL ".join(["SELECT 1 AS a"] * 4_000),
    "in-parentheses": "SELECT " + "(" * 40 + ("1+" * 300 + "1)") * 40,
}


@pytest.fixture(scope="module")
def uri(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    home = tmp_path_factory.mktemp("deep")
    build_catalog(home)[1].close()
    proc, port = spawn(home)
    try:
        yield f"grpc://127.0.0.1:{port}"
    finally:
        proc.kill()
        proc.wait()


@pytest.mark.parametrize("sql", DEEP.values(), ids=DEEP.keys())
def test_a_query_deeper_than_the_bound_is_refused_and_the_server_lives(uri: str, sql: str) -> None:
    client, options = login(uri)
    with pytest.raises(pa.ArrowInvalid, match=r"operators deep.*\[InvalidInput, code 13\]"):
        fetch(client, options, plan(client, options, sql))
    assert fetch(client, options, plan(client, options, "SELECT count(*) AS n FROM w.ns.t")).to_pylist() == [
        {"n": 1000}
    ]


def test_wide_queries_within_the_bound_answer(uri: str) -> None:
    """Width is not depth: long select lists, IN lists and CASE branches plan as lists."""
    client, options = login(uri)
    wide = [
        "SELECT " + ", ".join(f"id + {i} AS c{i}" for i in range(3_000)) + " FROM w.ns.t LIMIT 1",
        "SELECT count(*) AS n FROM w.ns.t WHERE id IN (" + ", ".join(map(str, range(20_000))) + ")",
        "SELECT sum(CASE "
        + " ".join(f"WHEN id = {i} THEN {i}" for i in range(3_000))
        + " END) AS n FROM w.ns.t",
        "SELECT count(*) AS n FROM w.ns.t WHERE " + " OR ".join(f"id = {i}" for i in range(300)),
    ]
    rows = [fetch(client, options, plan(client, options, sql)) for sql in wide]
    assert rows[0].num_columns == 3_000
    assert rows[1].to_pylist() == [{"n": 1000}]
    assert rows[2].to_pylist() == [{"n": sum(range(1000))}]
    assert rows[3].to_pylist() == [{"n": 300}]


def test_the_failure_is_not_a_crash_of_the_client(uri: str) -> None:
    """The refusal is an answer: the same connection goes on."""
    client, options = login(uri)
    with pytest.raises(pa.ArrowInvalid):
        plan(client, options, DEEP["sum"])
    assert isinstance(plan(client, options, "SELECT 1"), fl.FlightInfo)
