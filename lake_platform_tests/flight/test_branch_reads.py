"""Branch reads over ADBC (issue 46): ``w.ns."t@branch:dev"`` reads the branch's head, read from
the registry per query (no snapshot refresh to wait for), ``"t@branch:dev@v<N>"`` one of its
versions; a ticket pins the branch version planned; unknown branches and versions are NOT_FOUND."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import adbc_driver_manager
import pyarrow as pa
import pytest

from lake_platform_tests.flight.conftest import Running, fetch, plan, wait_until
from lake_platform_tests.flight.helpers import tagged_rows

T = "p.w.ns.brt"


def _count(conn: Any, sql: str) -> int:
    with conn.cursor() as cur:
        cur.execute(sql)
        return int(cur.fetch_arrow_table().column(0)[0].as_py())


@pytest.fixture(scope="module")
def branched(running: Running) -> Iterator[Running]:
    """``T``: main 10 rows (v1); branch ``dev`` from v1 with +5 rows (its v2)."""
    catalog = running.catalog
    catalog.tables.create_table(T, tagged_rows(10, tag="main"))
    catalog.branches.create_branch(T, "dev")
    catalog.branch_writes.append(T, "dev", tagged_rows(5, start=10, tag="dev"))
    client, options = running.client()
    assert wait_until(lambda: fetch(client, options, plan(client, options, "SELECT * FROM w.ns.brt")))
    yield running


def test_a_branch_and_its_versions_read_over_adbc_beside_main(branched: Running) -> None:
    with branched.adbc() as conn:
        assert _count(conn, "SELECT count(*) FROM w.ns.brt") == 10
        assert _count(conn, 'SELECT count(*) FROM w.ns."brt@branch:dev"') == 15
        assert _count(conn, 'SELECT count(*) FROM w.ns."brt@branch:dev@v1"') == 10
        both = (
            "SELECT (SELECT count(*) FROM w.ns.brt) AS main, "
            '(SELECT count(*) FROM w.ns."brt@branch:dev") AS dev'
        )
        with conn.cursor() as cur:
            cur.execute(both)
            assert cur.fetch_arrow_table().to_pylist() == [{"main": 10, "dev": 15}]
        # A branch write is visible to the next query at once: its head is read per query.
        branched.catalog.branch_writes.append(T, "dev", tagged_rows(1, start=100, tag="dev"))
        assert _count(conn, 'SELECT count(*) FROM w.ns."brt@branch:dev"') == 16
        assert _count(conn, "SELECT count(*) FROM w.ns.brt") == 10


def test_a_ticket_pins_the_branch_version_it_planned(branched: Running) -> None:
    client, options = branched.client()
    sql = 'SELECT count(*) AS n FROM w.ns."brt@branch:dev"'
    info = plan(client, options, sql)
    before = fetch(client, options, info).column("n")[0].as_py()
    branched.catalog.branch_writes.append(T, "dev", tagged_rows(2, start=200, tag="dev"))
    assert fetch(client, options, info).column("n")[0].as_py() == before
    assert fetch(client, options, plan(client, options, sql)).column("n")[0].as_py() == before + 2


@pytest.mark.parametrize(
    ("sql", "status", "message"),
    [
        ('SELECT * FROM w.ns."brt@branch:nope"', "NOT_FOUND", r"no branch nope on p\.w\.ns\.brt.*code 22"),
        ('SELECT * FROM w.ns."brt@branch:dev@v99"', "NOT_FOUND", r"version 99 of branch dev.*code 11"),
        ('SELECT * FROM w.ns."brt@branch:Dev"', "INVALID_ARGUMENT", r"invalid time-travel reference"),
        ('SELECT * FROM w.ns."brt@branch:dev@3"', "INVALID_ARGUMENT", r"invalid time-travel reference"),
    ],
)
def test_bad_branch_references_get_typed_errors(
    branched: Running, sql: str, status: str, message: str
) -> None:
    with branched.adbc() as conn, conn.cursor() as cur, pytest.raises(adbc_driver_manager.Error) as err:
        cur.execute(sql)
    assert status in str(err.value)
    assert re.search(message, str(err.value)), str(err.value)


def test_a_published_branch_reads_as_main_and_main_keeps_its_history(branched: Running) -> None:
    catalog = branched.catalog
    catalog.tables.create_table("p.w.ns.brpub", tagged_rows(3, tag="main"))
    catalog.branches.create_branch("p.w.ns.brpub", "fix")
    catalog.branch_writes.append("p.w.ns.brpub", "fix", tagged_rows(4, start=3, tag="fix"))
    catalog.branch_publish.publish_branch("p.w.ns.brpub", "fix")
    client, options = branched.client()

    def counts() -> pa.Table:
        return fetch(
            client,
            options,
            plan(
                client,
                options,
                "SELECT (SELECT count(*) FROM w.ns.brpub) AS now, "
                '(SELECT count(*) FROM w.ns."brpub@v1") AS v1',
            ),
        )

    assert wait_until(lambda: counts().to_pylist() == [{"now": 7, "v1": 3}])
