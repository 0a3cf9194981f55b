"""Early starts end to end: a repeated quick query starts at GetFlightInfo and its DoGet (ADBC,
pyarrow, the data plane) takes the running query over, with the same rows as without, pinned to
the snapshot GetFlightInfo planned on even when a commit lands in between."""

from __future__ import annotations

from collections.abc import Iterator

import pyarrow as pa
import pyarrow.flight as fl
import pytest

from lake_platform.catalog.catalog import Catalog
from lake_platform.settings import LakeSettings
from lake_platform_tests.flight.conftest import Running, fetch, login, plan, serving, t_rows, wait_until

SQL = "SELECT id FROM w.ns.early WHERE id < 5 ORDER BY id"


#: Any kept plan counts as quick (``early_first_batch``): which plans are is ``test_streams``'
#: business, and a loaded test machine must not decide whether the path under test runs.
QUICK_ENOUGH = 60.0


@pytest.fixture(scope="module")
def early_lake(lake: tuple[LakeSettings, Catalog]) -> tuple[LakeSettings, Catalog]:
    settings, catalog = lake
    catalog.tables.create_table("p.w.ns.early", t_rows(10).to_reader())
    catalog.policies.set_policy("p.w.ns.early", {"cache": "off"})
    return settings, catalog


@pytest.fixture(scope="module", params=[{}, {"data_listen": "127.0.0.1:0"}], ids=["one port", "data plane"])
def running(request: pytest.FixtureRequest, early_lake: tuple[LakeSettings, Catalog]) -> Iterator[Running]:
    # A long window: a loaded test machine must not drop a start before its DoGet comes.
    with serving(
        *early_lake,
        snapshot_ttl_seconds=0.1,
        early_start_seconds=30,
        early_first_batch=QUICK_ENOUGH,
        **request.param,
    ) as server:
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
    n = running.catalog.reads.open_table("p.w.ns.early").count_rows()
    running.catalog.tables.append("p.w.ns.early", t_rows(3, start=100).to_reader())
    claimed = stats(running)["claimed"]
    rows = fetch_at() if fetch_at is not None else fetch_where_named(info, options)
    assert rows.to_pylist() == [{"n": n}]  # not n + 3
    assert stats(running)["claimed"] == claimed + 1


def test_a_ticket_never_fetched_frees_its_slot(early_lake: tuple[LakeSettings, Catalog]) -> None:
    with serving(
        *early_lake, early_start_seconds=0.2, max_concurrent_queries=2, early_first_batch=QUICK_ENOUGH
    ) as server:
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
    if "p.w.ns.keyed" not in {t.name for t in catalog.reads.list_tables("p.w.ns")}:
        catalog.tables.create_table("p.w.ns.keyed", t_rows(200).to_reader())
        catalog.policies.set_policy("p.w.ns.keyed", {"cache": "off"})
        catalog.indexes.create_index("p.w.ns.keyed", "id", "btree")
    assert wait_until(lambda: _version_seen(running, "keyed") >= 2)  # the index build: a commit


def _version_seen(running: Running, table: str) -> int:
    return running.server.snapshots.current().project("p").table("w", "ns", table).ref.version
