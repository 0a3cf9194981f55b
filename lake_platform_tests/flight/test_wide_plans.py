"""A query combining thousands of relations is refused before DataFusion optimizes it
(``query.relations``), and the replica keeps serving.

DataFusion's optimizer cannot be interrupted, and its time grows with the cube of the joins (a
chain of 256 keyed joins: 12 s of one core, 128: 1.8 s) and faster than the square of a union's
branches (2,000: 17 s). ``SELECT 1 FROM (SELECT 0) s0, (SELECT 1) s1, ...`` with 2,000 relations
(60 kB, within LAKE_FLIGHT_MAX_SQL_BYTES) held a core for seven minutes in ADBC's Prepare, far
past LAKE_FLIGHT_QUERY_TIMEOUT_SECONDS=5 (checked only between the steps of planning), and then
the endpoint died: every tenant's calls failed with UNAVAILABLE. Measured on a server in its own
process through ADBC.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import adbc_driver_flightsql.dbapi as flight_sql
import adbc_driver_manager
import pytest

from lake_platform_tests.flight.conftest import PASSWORDS, build_catalog
from lake_platform_tests.flight.server_process import spawn

WIDE = {
    "comma-join": "SELECT 1 AS a FROM " + ", ".join(f"(SELECT {i} AS c{i}) s{i}" for i in range(2_000)),
    "keyed-join": "SELECT 1 AS a FROM (SELECT 0 AS k) s0 "
    + " ".join(f"JOIN (SELECT 0 AS k) s{i} ON s{i}.k = s{i - 1}.k" for i in range(1, 400)),
    "union": " UNION ALL ".join(f"SELECT {i} AS a" for i in range(900)),
    "tables": "SELECT count(*) AS n FROM " + ", ".join(f"w.ns.t t{i}" for i in range(200)) + " WHERE false",
}


@pytest.fixture(scope="module")
def uri(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    home = tmp_path_factory.mktemp("wide")
    build_catalog(home)[1].close()
    proc, port = spawn(home, "query_timeout_seconds=5")
    try:
        yield f"grpc://127.0.0.1:{port}"
    finally:
        proc.kill()
        proc.wait()


def connect(uri: str, user: str = "alice") -> Any:
    return flight_sql.connect(uri, db_kwargs={"username": user, "password": PASSWORDS[user]}, autocommit=True)


def run(uri: str, sql: str, user: str = "alice") -> list[dict[str, Any]]:
    with connect(uri, user) as conn, conn.cursor() as cur:
        cur.execute(sql)
        return cur.fetch_arrow_table().to_pylist()


@pytest.mark.parametrize("sql", WIDE.values(), ids=WIDE.keys())
def test_a_query_of_too_many_relations_is_refused_and_the_replica_serves(uri: str, sql: str) -> None:
    with pytest.raises(adbc_driver_manager.ProgrammingError) as refused:
        run(uri, sql)
    message = str(refused.value)
    assert "INVALID_ARGUMENT" in message and "LAKE_FLIGHT_MAX_RELATIONS=128" in message, message
    assert "[RelationsTooMany, code 13]" in message, message
    assert run(uri, "SELECT count(*) AS n FROM w.ns.t", "bob") == [{"n": 2}]


def test_queries_within_the_bound_answer(uri: str) -> None:
    """Up to the bound: a union of 128 branches, a keyed join of 40 copies of a table."""
    union = " UNION ALL ".join(f"SELECT {i} AS a" for i in range(128))
    assert sorted(r["a"] for r in run(uri, union)) == list(range(128))
    keyed = "SELECT count(*) AS n FROM w.ns.t t0 " + " ".join(
        f"JOIN w.ns.t t{i} ON t{i}.id = t{i - 1}.id" for i in range(1, 40)
    )
    assert run(uri, keyed) == [{"n": 1000}]
