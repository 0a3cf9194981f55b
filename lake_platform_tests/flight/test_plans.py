"""Plans kept on one replica (``lake_platform.query.plans``): CreatePreparedStatement's plan serves
GetFlightInfo, GetFlightInfo's serves DoGet, and a kept plan never crosses a tenant, a principal,
bound parameters or a table version: an append gives the new rows in the next GetFlightInfo,
while a ticket pinned to the old version still reads it."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pyarrow as pa
import pyarrow.flight as fl
import pytest

from lake_platform.catalog.catalog import Catalog
from lake_platform.errors import InvalidInput, PermissionDenied
from lake_platform.flight import proto
from lake_platform.settings import LakeSettings
from lake_platform_tests.flight.conftest import (
    ALICE,
    BOB,
    SERVICE,
    Running,
    fetch,
    login,
    plan,
    serving,
    t_rows,
    wait_until,
)


@pytest.fixture(scope="module")
def running(lake: tuple[LakeSettings, Catalog]) -> Iterator[Running]:
    settings, catalog = lake
    catalog.tables.create_table("p.w.ns.grows", t_rows(10).to_reader())
    catalog.policies.set_policy("p.w.ns.grows", {"cache": "off"})  # plans over cached batches are not kept
    for project, rows in (("p", t_rows(50)), ("q", t_rows(50, start=1000))):
        catalog.tables.create_table(f"{project}.w.ns.keyed", rows.to_reader())
        catalog.indexes.create_index(f"{project}.w.ns.keyed", "id", "btree")
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
        running.catalog.tables.append("p.w.ns.grows", t_rows(5, start=10).to_reader())
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
    catalog.tables.create_table("p.w.ns.doomed", pa.table({"id": pa.array([1, 2], pa.int64())}).to_reader())
    catalog.policies.set_policy("p.w.ns.doomed", {"cache": "off"})
    assert wait_until(lambda: version_of(running, "doomed") >= 1)
    client, options = login(running.uri)
    info = plan(client, options, "SELECT count(*) AS n FROM w.ns.doomed")
    assert len(running.server.engine.plans) > 0
    catalog.trash.drop_table("p.w.ns.doomed", purge=True)
    assert wait_until(
        lambda: running.server.snapshots.current().project("p").table("w", "ns", "doomed") is None
    )
    with pytest.raises(Exception, match="no longer available|dropped|not found"):
        fetch(client, options, info)
    client.close()


# == the kept plan's ticket claims (pinning overhead, issue 14) ===================================


def view_of(server: Any) -> Any:
    """ALICE's project in the server's current catalog snapshot, as its planning reads it."""
    return server.snapshots.current().project(ALICE.project)


def opened(running: Running, info: Any, identity: Any = ALICE) -> Any:
    name, payload = proto.unpack_any(info.endpoints[0].ticket.ticket)
    handle = proto.parse(proto.TicketStatementQuery, payload).statement_handle
    return running.server.tickets.open_statement(handle, identity)


def test_kept_ticket_claims_never_pin_a_stale_version(running: Running) -> None:
    """Repeated GetFlightInfo of one statement is answered from its kept plan (and the claims
    kept with it: planned once, ``lake_query_plannings_total``); after an append the next
    GetFlightInfo plans again and pins the new version (new plan, new claims), never the old one."""
    running.catalog.tables.create_table("p.w.ns.pins", t_rows(3).to_reader())
    running.catalog.policies.set_policy("p.w.ns.pins", {"cache": "off"})
    assert wait_until(lambda: running.server.snapshots.current().project("p").table("w", "ns", "pins"))
    planned = running.server.engine.work.plannings
    sql = "SELECT count(*) AS n FROM w.ns.pins"
    client, options = login(running.uri)
    try:
        first, second = plan(client, options, sql), plan(client, options, sql)
        assert running.server.engine.work.plannings == planned + 1  # the second: the kept plan
        a, b = opened(running, first), opened(running, second)
        version = version_of(running, "pins")
        assert [r.version for r in a.snapshots] == [r.version for r in b.snapshots] == [version]
        assert a.ticket_id != b.ticket_id and b.issued_at_ms >= a.issued_at_ms
        running.catalog.tables.append("p.w.ns.pins", t_rows(2, start=3).to_reader())
        assert wait_until(lambda: version_of(running, "pins") == version + 1)
        third = plan(client, options, sql)
        assert running.server.engine.work.plannings == planned + 2
        assert [r.version for r in opened(running, third).snapshots] == [version + 1]
        assert fetch(client, options, third).to_pylist() == [{"n": 5}]
        assert fetch(client, options, first).to_pylist() == [{"n": 3}]  # still its own pin
    finally:
        client.close()


def test_kept_ticket_claims_never_carry_another_principal(running: Running) -> None:
    """Claims kept with a plan for one principal are never sealed for another, even when the
    very same plan object is answered for both (another user of the project, another tenant)."""
    server = running.server
    sql = "SELECT count(*) AS n FROM w.ns.t"
    planned = server.engine.plan(sql, view_of(server), scope=ALICE)
    for _ in range(2):
        server.endpoints.answer(ALICE, planned, None)  # the claims are kept now
    info = server.endpoints.answer(SERVICE, planned, None).info(fl.FlightDescriptor.for_command(b""))
    ticket = opened(running, info, SERVICE)
    assert ticket.identity == SERVICE
    with pytest.raises(PermissionDenied):
        opened(running, info, ALICE)
    again = server.endpoints.answer(ALICE, planned, None).info(fl.FlightDescriptor.for_command(b""))
    assert opened(running, again).identity == ALICE
    with pytest.raises(InvalidInput, match="invalid table snapshots"):  # p's pins, q's principal
        server.endpoints.answer(BOB, planned, None)


def test_claims_with_bound_parameters_are_never_kept(running: Running) -> None:
    server = running.server
    sql = "SELECT id FROM w.ns.t WHERE id = ?"
    planned = server.engine.plan(sql, view_of(server), pa.record_batch({"a": [5]}), scope=ALICE)
    descriptor = fl.FlightDescriptor.for_command(b"")
    for value in (5, 7):
        params = pa.record_batch({"a": [value]})
        info = server.endpoints.answer(ALICE, planned, params).info(descriptor)
        assert opened(running, info).params.equals(params)


# == plans whose result depends on when they run ==================================================


def clock_read(conn: Any, sql: str) -> int:
    """Column ``t`` of ``sql``'s one row, in nanoseconds since the epoch."""
    with conn.cursor() as cur:
        cur.execute(sql)
        return cur.fetch_arrow_table().column("t").cast(pa.timestamp("ns")).cast(pa.int64())[0].as_py()


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT now() AS t",
        "SELECT max(id) AS top, CAST(current_timestamp AS TIMESTAMP) AS t FROM w.ns.grows",
    ],
)
def test_a_rerun_of_a_query_that_reads_the_clock_reads_it_again(running: Running, sql: str) -> None:
    """DataFusion fixes now() when a plan is made: a kept plan would give every re-run the
    first run's time (a dashboard's `WHERE ts > now() - INTERVAL '1 hour'` would never move)."""
    conn = running.adbc()
    try:
        first = clock_read(conn, sql)
        while time.time_ns() <= first:  # the clock moves on (no guess at how long that takes)
            pass
        assert clock_read(conn, sql) > first
    finally:
        conn.close()


def test_a_plan_that_reads_the_clock_is_never_kept(running: Running) -> None:
    server = running.server
    kept = len(server.engine.plans)
    planned = server.engine.plan("SELECT now() AS t", view_of(server), scope=ALICE)
    assert not planned.deterministic
    server.engine.remember(ALICE, planned, None)
    assert len(server.engine.plans) == kept
    again = server.engine.plan("SELECT now() AS t", view_of(server), scope=ALICE)
    assert again is not planned


def test_a_prepared_key_lookup_run_with_new_values_is_planned_once_per_principal(running: Running) -> None:
    """A service running one prepared statement with a new id each time (DoPut, GetFlightInfo,
    DoGet on one cursor): the first binding is planned, the next are answered from its plan
    with their own values; another tenant's binding is planned over its own table."""
    engine = running.server.engine
    sql = "SELECT id, s FROM w.ns.keyed WHERE id = ?"
    alice, bob = running.adbc("alice"), running.adbc("bob")
    try:
        rebound = engine.rebound
        with alice.cursor() as cur:
            for i in (3, 4, 5, 1004):
                cur.execute(sql, (i,))
                assert cur.fetch_arrow_table().to_pylist() == ([{"id": i, "s": f"row-{i}"}] if i < 50 else [])
        assert engine.rebound == rebound + 3
        assert adbc_rows(bob, sql, (4,)) == []  # bob's table has ids 1000-1049
        assert adbc_rows(bob, sql, (1004,)) == [{"id": 1004, "s": "row-1004"}]
        assert engine.rebound == rebound + 4
        assert running.server.health()["plans"]["shaped"] == engine.rebound
    finally:
        alice.close()
        bob.close()


def test_a_rebound_lookups_ticket_is_served_where_its_plan_is_not_kept(running: Running) -> None:
    """Its ticket carries its own SQL and parameters: a replica without the plan (here: the
    plans forgotten) plans that binding, and reads the same row from the pinned version."""
    server, engine = running.server, running.server.engine
    sql = "SELECT id, s FROM w.ns.keyed WHERE id = ?"
    client, options = login(running.uri)
    try:
        server.engine.plan(sql, view_of(server), pa.record_batch({"a": [10]}), scope=ALICE)
        rebound = engine.rebound
        params = pa.record_batch({"a": [11]})
        planned = engine.plan(sql, view_of(server), params, scope=ALICE)
        assert engine.rebound == rebound + 1
        info = server.endpoints.answer(ALICE, planned, params).info(fl.FlightDescriptor.for_command(b""))
        engine.plans.clear()
        assert fetch(client, options, info).to_pylist() == [{"id": 11, "s": "row-11"}]
    finally:
        client.close()
