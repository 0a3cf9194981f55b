"""Early starts end to end: a repeated quick query starts at GetFlightInfo (a new prepared
statement: at CreatePreparedStatement) and its DoGet (ADBC, pyarrow, the data plane) takes the
running query over, with the same rows as without, pinned to the snapshot GetFlightInfo planned
on even when a commit lands in between."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pyarrow.flight as fl
import pytest

from lake_platform.catalog.catalog import Catalog
from lake_platform.flight import proto, streams
from lake_platform.observability.audit import audit_target, read_records
from lake_platform.settings import LakeSettings
from lake_platform_tests.flight.conftest import Running, fetch, login, plan, serving, t_rows, wait_until
from lake_platform_tests.flight.helpers import waited_sends

SQL = "SELECT id FROM w.ns.early WHERE id < 5 ORDER BY id"


@pytest.fixture(autouse=True)
def quick_enough(monkeypatch: pytest.MonkeyPatch) -> None:
    """Any kept plan counts as quick: which plans are is ``test_streams``' business, and a
    loaded test machine must not decide whether the path under test runs."""
    monkeypatch.setattr(streams, "EARLY_FIRST_BATCH", 60.0)


@pytest.fixture(scope="module")
def early_lake(lake: tuple[LakeSettings, Catalog]) -> tuple[LakeSettings, Catalog]:
    settings, catalog = lake
    catalog.create_table("p.w.ns.early", t_rows(10).to_reader())
    catalog.set_policy("p.w.ns.early", {"cache": "off"})
    return settings, catalog


@pytest.fixture(scope="module", params=[{}, {"data_listen": "127.0.0.1:0"}], ids=["one port", "data plane"])
def running(request: pytest.FixtureRequest, early_lake: tuple[LakeSettings, Catalog]) -> Iterator[Running]:
    # A long window: a loaded test machine must not drop a start before its DoGet comes.
    with serving(*early_lake, snapshot_ttl_seconds=0.1, early_start_seconds=30, **request.param) as server:
        yield Running(server, *early_lake)


def fetch_where_named(info: fl.FlightInfo, options: fl.FlightCallOptions) -> pa.Table:
    """DoGet at the endpoint's location (the data plane)."""
    [endpoint] = info.endpoints
    client = fl.connect(endpoint.locations[0])
    try:
        return client.do_get(endpoint.ticket, options).read_all()
    finally:
        client.close()


def stats(running: Running) -> dict[str, int]:
    return running.server.health()["early_starts"]


def fetch_answer(client: fl.FlightClient, options: fl.FlightCallOptions, info: fl.FlightInfo) -> pa.Table:
    """The ticket's rows, where its endpoint says (this connection, or the data plane)."""
    if info.endpoints[0].locations:
        return fetch_where_named(info, options)
    return fetch(client, options, info)


def prepare(client: fl.FlightClient, options: fl.FlightCallOptions, sql: str) -> bytes:
    """CreatePreparedStatement: the statement's handle."""
    request = proto.pack(proto.ActionCreatePreparedStatementRequest(query=sql))
    [result] = client.do_action(fl.Action("CreatePreparedStatement", request), options)
    _, payload = proto.unpack_any(result.body.to_pybytes())
    return proto.parse(proto.ActionCreatePreparedStatementResult, payload).prepared_statement_handle


def plan_prepared(client: fl.FlightClient, options: fl.FlightCallOptions, handle: bytes) -> fl.FlightInfo:
    command = proto.CommandPreparedStatementQuery(prepared_statement_handle=handle)
    return client.get_flight_info(fl.FlightDescriptor.for_command(proto.pack(command)), options)


def test_adbc_rerunning_a_query_gets_it_started_early_with_the_same_rows(running: Running) -> None:
    before = stats(running)
    with running.adbc() as conn, conn.cursor() as cur:
        cur.execute(SQL)
        first = cur.fetch_arrow_table()
        for _ in range(3):
            cur.execute(SQL)  # ADBC keeps it prepared: GetFlightInfo + DoGet
            assert cur.fetch_arrow_table().equals(first)
    after = stats(running)
    assert first.column("id").to_pylist() == [0, 1, 2, 3, 4]
    assert after["claimed"] - before["claimed"] >= 3
    assert after["started"] - before["started"] == after["claimed"] - before["claimed"]
    assert after["waiting"] == 0 and running.server.streams.running() == 0


def test_a_started_query_reads_the_snapshot_its_ticket_pins(running: Running) -> None:
    client, options = login(running.uri)
    fetch(client, options, plan(client, options, SQL))  # the plan is kept and known quick
    sql = "SELECT count(*) AS n FROM w.ns.early"
    fetch(client, options, plan(client, options, sql))
    info = plan(client, options, sql)
    assert stats(running)["waiting"] == 1
    fetch_at = (lambda: fetch(client, options, info)) if not info.endpoints[0].locations else None
    n = running.catalog.open_table("p.w.ns.early").count_rows()
    running.catalog.append("p.w.ns.early", t_rows(3, start=100).to_reader())
    claimed = stats(running)["claimed"]
    rows = fetch_at() if fetch_at is not None else fetch_where_named(info, options)
    assert rows.to_pylist() == [{"n": n}]  # not n + 3
    assert stats(running)["claimed"] == claimed + 1


def test_a_ticket_never_fetched_frees_its_slot(early_lake: tuple[LakeSettings, Catalog]) -> None:
    with serving(*early_lake, early_start_seconds=0.2, max_concurrent_queries=2) as server:
        running = Running(server, *early_lake)
        client, options = login(running.uri)
        fetch(client, options, plan(client, options, SQL))
        info = plan(client, options, SQL)
        assert server.health()["early_starts"]["started"] == 1
        assert wait_until(lambda: server.streams.running() == 0)
        assert server.health()["early_starts"]["waiting"] == 0
        # The ticket is still good: its DoGet runs the query itself.
        assert fetch(client, options, info).column("id").to_pylist() == [0, 1, 2, 3, 4]
        assert server.health()["early_starts"]["claimed"] == 0


def test_a_new_cursor_and_a_bound_key_lookup_start_early(
    running: Running, early_lake: tuple[LakeSettings, Catalog]
) -> None:
    """Key lookups on a scalar index are quick by nature: they start early on their first
    run, a new cursor per query (a new SQL text each time) or a parameter bound per run."""
    keyed(running, early_lake)
    before = stats(running)
    with running.adbc() as conn:
        for i in (3, 7, 11):
            with conn.cursor() as cur:
                cur.execute(f"SELECT id FROM w.ns.keyed WHERE id = {i}")
                assert cur.fetch_arrow_table().column("id").to_pylist() == [i]
        with conn.cursor() as cur:
            for i in (5, 9):
                cur.execute("SELECT id FROM w.ns.keyed WHERE id = ?", (i,))
                assert cur.fetch_arrow_table().column("id").to_pylist() == [i]
    after = stats(running)
    assert after["claimed"] - before["claimed"] == 5


def keyed(running: Running, early_lake: tuple[LakeSettings, Catalog]) -> None:
    """``p.w.ns.keyed``: 200 rows with a BTREE on ``id``, seen by the server."""
    _, catalog = early_lake
    if "p.w.ns.keyed" not in {t.name for t in catalog.list_tables("p.w.ns")}:
        catalog.create_table("p.w.ns.keyed", t_rows(200).to_reader())
        catalog.set_policy("p.w.ns.keyed", {"cache": "off"})
        catalog.create_index("p.w.ns.keyed", "id", "btree")
    assert wait_until(lambda: _version_seen(running, "keyed") >= 2)  # the index build: a commit


def bind(client: fl.FlightClient, options: fl.FlightCallOptions, handle: bytes, value: int) -> bytes:
    """DoPut of one Int64 parameter: the handle that carries it."""
    command = proto.CommandPreparedStatementQuery(prepared_statement_handle=handle)
    descriptor = fl.FlightDescriptor.for_command(proto.pack(command))
    writer, reader = client.do_put(descriptor, pa.schema([("0", pa.int64())]), options)
    writer.write_batch(pa.record_batch({"0": pa.array([value], pa.int64())}))
    writer.done_writing()
    metadata = reader.read()
    writer.close()
    return proto.parse(proto.DoPutPreparedStatementResult, metadata.to_pybytes()).prepared_statement_handle


def test_a_bound_key_lookup_starts_at_doput_and_its_doget_takes_it_over(
    running: Running, early_lake: tuple[LakeSettings, Catalog]
) -> None:
    """A prepared key lookup executed with a new value: once a binding of it was planned, the
    next starts as its DoPut answers, and its GetFlightInfo gives that start its ticket."""
    keyed(running, early_lake)
    settled(running, "early", "keyed")
    client, options = login(running.uri)
    handle = prepare(client, options, "SELECT id FROM w.ns.keyed WHERE id = ?")
    fetch_answer(client, options, plan_prepared(client, options, bind(client, options, handle, 5)))
    for value in (6, 7, 7):
        before = stats(running)
        bound = bind(client, options, handle, value)
        assert stats(running)["started"] == before["started"] + 1  # before any GetFlightInfo
        info = plan_prepared(client, options, bound)
        assert stats(running)["started"] == before["started"] + 1  # the GetFlightInfo started nothing
        assert fetch_answer(client, options, info).column("id").to_pylist() == [value]
        after = stats(running)
        assert after["claimed"] == before["claimed"] + 1 and after["waiting"] == 0


def test_a_new_prepared_statement_starts_at_create_and_its_doget_takes_it_over(running: Running) -> None:
    settled(running, "early")
    client, options = login(running.uri)
    fetch_answer(client, options, plan(client, options, SQL))  # kept, and known quick
    before = stats(running)
    handle = prepare(client, options, SQL)
    assert stats(running)["started"] == before["started"] + 1  # before any GetFlightInfo
    info = plan_prepared(client, options, handle)
    assert stats(running)["started"] == before["started"] + 1  # the GetFlightInfo started nothing
    rows = fetch_answer(client, options, info)
    assert rows.column("id").to_pylist() == [0, 1, 2, 3, 4]
    after = stats(running)
    assert after["claimed"] == before["claimed"] + 1 and after["started"] == before["started"] + 1


def test_a_small_started_result_goes_out_with_the_status(
    running: Running, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The start looked past its one small batch before the DoGet came, so on the grpcio port
    the DoGet sends that batch with the status: grpcio waits for the schema's send only. The
    data plane gets it as a plain batch. The same rows either way."""
    settled(running, "early")
    client, options = login(running.uri)
    sql = f"{SQL} -- sent with the status"
    fetch_answer(client, options, plan(client, options, sql))  # kept, and known quick
    handle = prepare(client, options, sql)
    info = plan_prepared(client, options, handle)
    waited = waited_sends(monkeypatch)
    claimed = stats(running)["claimed"]
    rows = fetch_answer(client, options, info)
    assert rows.column("id").to_pylist() == [0, 1, 2, 3, 4]
    assert stats(running)["claimed"] == claimed + 1
    assert len(waited) == (0 if info.endpoints[0].locations else 1)  # the data plane is C++
    # The stream ended before the status went out: audited as a whole, successful query.
    *_, record = [r for r in read_records(Path(audit_target(running.settings))) if r["sql"] == sql]
    assert (record["status"], record["rows"]) == ("OK", 5)


def test_a_start_at_create_is_not_served_when_a_newer_version_is_planned(running: Running) -> None:
    """A commit published between CreatePreparedStatement and GetFlightInfo: the GetFlightInfo
    plans the new version, and its ticket reads it, never the start made on the older one."""
    settled(running, "early")
    client, options = login(running.uri)
    sql = "SELECT count(*) AS n FROM w.ns.early WHERE id >= 0"
    fetch_answer(client, options, plan(client, options, sql))  # kept, and known quick
    before = stats(running)
    handle = prepare(client, options, sql)
    assert stats(running)["started"] == before["started"] + 1
    n = running.catalog.open_table("p.w.ns.early").count_rows()
    version = running.catalog.append("p.w.ns.early", t_rows(3, start=200).to_reader()).to_version
    assert version is not None and wait_until(lambda: _version_seen(running, "early") >= version)
    info = plan_prepared(client, options, handle)
    # The start on the older version is stopped as the GetFlightInfo plans the new one, not at
    # the end of its window (the new plan, never run and no key lookup, starts nothing).
    assert stats(running)["waiting"] == 0
    assert fetch_answer(client, options, info).to_pylist() == [{"n": n + 3}]
    assert stats(running)["claimed"] == before["claimed"]  # the start on the older one is not it


def settled(running: Running, *tables: str) -> None:
    """Until the server's catalog snapshot shows ``tables`` at their current versions. A commit
    of an earlier test that the server sees only mid-test makes a new project view, over which
    a statement is planned again: a start made on the older view is then rightly never claimed,
    and the test would watch the wrong thing."""
    for table in tables:
        current = running.catalog.describe_table(f"p.w.ns.{table}", with_stats=False).current_version
        assert wait_until(lambda table=table, current=current: _version_seen(running, table) == current)


def _version_seen(running: Running, table: str) -> int:
    return running.server.snapshots.current().project("p").table("w", "ns", table).ref.version
