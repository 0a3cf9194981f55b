"""Plans kept on one replica (``lake_platform.query.plans``): CreatePreparedStatement's plan serves
GetFlightInfo, GetFlightInfo's serves DoGet, and a kept plan never crosses a tenant, a principal,
bound parameters or a table version: an append gives the new rows in the next GetFlightInfo,
while a ticket pinned to the old version still reads it."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pyarrow as pa
import pytest

from lake_platform.catalog.catalog import Catalog
from lake_platform.settings import LakeSettings
from lake_platform_tests.flight.conftest import Running, fetch, login, plan, serving, t_rows, wait_until


@pytest.fixture(scope="module")
def running(lake: tuple[LakeSettings, Catalog]) -> Iterator[Running]:
    settings, catalog = lake
    catalog.create_table("p.w.ns.grows", t_rows(10).to_reader())
    catalog.set_policy("p.w.ns.grows", {"cache": "off"})  # plans over cached batches are not kept
    with serving(settings, catalog, snapshot_ttl_seconds=0.1) as server:
        yield Running(server, settings, catalog)


def adbc_rows(conn: Any, sql: str, params: Any = None) -> list[dict[str, Any]]:
    with conn.cursor() as cur:
        cur.execute(sql, params)
        return cur.fetch_arrow_table().to_pylist()


def version_of(running: Running, name: str) -> int:
    return running.server.snapshots.current().project("p").table("w", "ns", name).ref.version


def test_an_append_between_identical_queries_gives_the_new_rows(running: Running) -> None:
    sql = "SELECT count(*) AS n, max(id) AS top FROM w.ns.grows"
    plans = running.server.engine.plans
    conn = running.adbc()
    client, options = login(running.uri)
    try:
        before = version_of(running, "grows")
        hits = plans.hits
        assert adbc_rows(conn, sql) == [{"n": 10, "top": 9}]
        # prepare -> GetFlightInfo and GetFlightInfo -> DoGet each reused the plan
        assert plans.hits >= hits + 2
        old_ticket = plan(client, options, sql)
        running.catalog.append("p.w.ns.grows", t_rows(5, start=10).to_reader())
        assert wait_until(lambda: version_of(running, "grows") == before + 1)
        assert adbc_rows(conn, sql) == [{"n": 15, "top": 14}]
        hits = plans.hits
        assert fetch(client, options, old_ticket).to_pylist() == [{"n": 10, "top": 9}]
        assert plans.hits == hits + 1  # the old ticket's kept plan: still the old version's
        assert fetch(client, options, plan(client, options, sql)).to_pylist() == [{"n": 15, "top": 14}]
    finally:
        conn.close()
        client.close()


def test_a_kept_plan_never_serves_another_tenant(running: Running) -> None:
    sql = "SELECT count(*) AS n FROM w.ns.t"
    plans = running.server.engine.plans
    alice, bob = running.adbc("alice"), running.adbc("bob")
    try:
        hits = plans.hits
        for _ in range(2):
            assert adbc_rows(alice, sql) == [{"n": 1000}]
            assert adbc_rows(bob, sql) == [{"n": 2}]
        assert plans.hits >= hits + 8  # every execution reused its own tenant's plans
    finally:
        alice.close()
        bob.close()


def test_bound_parameters_are_part_of_the_key(running: Running) -> None:
    sql = "SELECT id, s FROM w.ns.t WHERE id = ?"
    conn = running.adbc()
    try:
        for _ in range(2):
            assert adbc_rows(conn, sql, (5,)) == [{"id": 5, "s": "row-5"}]
            assert adbc_rows(conn, sql, (7,)) == [{"id": 7, "s": "row-7"}]
    finally:
        conn.close()


def test_without_a_plan_cache_doget_plans_again(lake: tuple[LakeSettings, Catalog]) -> None:
    settings, catalog = lake
    with serving(settings, catalog, plan_cache_size=0) as server:
        client, options = login(f"grpc://127.0.0.1:{server.port}")
        info = plan(client, options, "SELECT count(*) AS n FROM w.ns.t")
        assert fetch(client, options, info).to_pylist() == [{"n": 1000}]
        assert server.engine.plans.hits == 0 and len(server.engine.plans) == 0
        client.close()


def test_a_kept_plan_still_fails_when_its_table_was_dropped(running: Running) -> None:
    catalog = running.catalog
    catalog.create_table("p.w.ns.doomed", pa.table({"id": pa.array([1, 2], pa.int64())}).to_reader())
    catalog.set_policy("p.w.ns.doomed", {"cache": "off"})
    assert wait_until(lambda: version_of(running, "doomed") >= 1)
    client, options = login(running.uri)
    info = plan(client, options, "SELECT count(*) AS n FROM w.ns.doomed")
    assert len(running.server.engine.plans) > 0
    catalog.drop_table("p.w.ns.doomed", purge=True)
    assert wait_until(
        lambda: running.server.snapshots.current().project("p").table("w", "ns", "doomed") is None
    )
    with pytest.raises(Exception, match="no longer available|dropped|not found"):
        fetch(client, options, info)
    client.close()
