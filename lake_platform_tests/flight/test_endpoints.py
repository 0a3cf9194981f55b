"""Multi-endpoint results: a splittable query answers one pinned ticket per part of its
snapshot, the parts add up to the single-endpoint answer row for row, and everything else keeps
one endpoint.

The table ``p.w.ns.big`` has 8 fragments of 500 rows (and deleted rows in two of them); the
server splits above 1000 rows into at most 4 endpoints.
"""

from __future__ import annotations

import secrets
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.flight as fl
import pytest

from lake_platform.catalog.catalog import Catalog
from lake_platform.errors import InvalidInput
from lake_platform.flight import proto
from lake_platform.query.part import Part
from lake_platform.settings import LakeSettings
from lake_platform_tests.flight.conftest import (
    ALICE,
    BOB,
    SPLIT,
    build_split_catalog,
    built_lake,
    login,
    plan,
    serving,
    t_rows,
)
from lake_platform_tests.servers import free_ports

KEYS = f"k1:{secrets.token_hex(32)}"


@pytest.fixture(scope="module")
def lake(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[LakeSettings, Catalog]]:
    yield from built_lake(tmp_path_factory, build_split_catalog, "endpoints")


@pytest.fixture(scope="module")
def server(lake: tuple[LakeSettings, Catalog]) -> Iterator[Any]:
    with serving(*lake, **SPLIT) as running:
        yield running


@pytest.fixture(scope="module")
def alice(server: Any) -> tuple[fl.FlightClient, fl.FlightCallOptions]:
    return login(f"grpc://127.0.0.1:{server.port}")


def rows(table: pa.Table) -> Counter[tuple[Any, ...]]:
    """The multiset of a result's rows."""
    return Counter(zip(*(c.to_pylist() for c in table.columns), strict=True))


def fetch_all(client: fl.FlightClient, options: fl.FlightCallOptions, info: fl.FlightInfo) -> pa.Table:
    parts = [client.do_get(e.ticket, options).read_all() for e in info.endpoints]
    return pa.concat_tables(parts)


def single(client: fl.FlightClient, options: fl.FlightCallOptions, sql: str) -> pa.Table:
    """The answer of one endpoint: the same rows, sorted (a sort is never split)."""
    info = plan(client, options, f"SELECT * FROM ({sql}) ORDER BY 1")
    assert len(info.endpoints) == 1 and info.ordered
    return client.do_get(info.endpoints[0].ticket, options).read_all()


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT * FROM w.ns.big",
        "SELECT id, x * 2 AS y FROM w.ns.big WHERE x > 100",
        "SELECT s FROM (SELECT * FROM w.ns.big WHERE id % 3 = 1) AS sub",
    ],
)
def test_parts_add_up_to_the_single_answer(alice: Any, sql: str) -> None:
    client, options = alice
    info = plan(client, options, sql)
    assert len(info.endpoints) == 4 and not info.ordered
    tickets = {e.ticket.ticket for e in info.endpoints}
    assert len(tickets) == 4
    assert all(e.locations == [] and e.expiration_time is not None for e in info.endpoints)
    parts = [client.do_get(e.ticket, options).read_all() for e in info.endpoints]
    assert all(p.num_rows for p in parts)  # every part has rows of its own
    assert all(p.schema == info.schema for p in parts)
    expected = single(client, options, sql)
    assert rows(pa.concat_tables(parts)) == rows(expected)


def test_deleted_rows_stay_deleted(alice: Any) -> None:
    client, options = alice
    got = fetch_all(client, options, plan(client, options, "SELECT id FROM w.ns.big"))
    ids = got.column("id").to_pylist()
    assert len(ids) == len(set(ids)) == 4000 - len([i for i in range(1000) if i % 7 == 0])
    assert set(ids) == {i for i in range(4000) if not (i % 7 == 0 and i < 1000)}


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT * FROM w.ns.big WHERE id = 4",  # a point query
        "SELECT * FROM w.ns.big WHERE id IN (4, 5)",
        "SELECT count(*) FROM w.ns.big",
        "SELECT * FROM w.ns.big LIMIT 10",
        "SELECT DISTINCT s FROM w.ns.big",
        "SELECT b.id FROM w.ns.big b JOIN w.ns.t t ON b.id = t.id",
        "SELECT id FROM w.ns.big WHERE id IN (SELECT id FROM w.ns.big WHERE x > 1)",
        "SELECT id, row_number() OVER () FROM w.ns.big",
        "SELECT * FROM w.ns.t",  # small
    ],
)
def test_what_keeps_one_endpoint(alice: Any, sql: str) -> None:
    client, options = alice
    info = plan(client, options, sql)
    assert len(info.endpoints) == 1 and info.endpoints[0].locations == []
    assert not info.ordered


def test_order_by_is_one_ordered_endpoint(alice: Any) -> None:
    client, options = alice
    info = plan(client, options, "SELECT id FROM w.ns.big ORDER BY id DESC")
    assert len(info.endpoints) == 1 and info.ordered
    got = client.do_get(info.endpoints[0].ticket, options).read_all().column("id").to_pylist()
    assert got == sorted(got, reverse=True)


def test_parts_are_pinned_across_appends_and_deletes(
    lake: tuple[LakeSettings, Catalog], tmp_path: Path
) -> None:
    settings, _ = lake
    catalog = Catalog(settings)
    try:
        catalog.tables.create_table("p.w.ns.moving", t_rows(600).to_reader())
        for k in range(1, 4):
            catalog.tables.append("p.w.ns.moving", t_rows(600, start=600 * k).to_reader())
        with serving(settings, catalog, **SPLIT) as server:
            client, options = login(f"grpc://127.0.0.1:{server.port}")
            info = plan(client, options, "SELECT id FROM w.ns.moving")
            assert len(info.endpoints) == 3
            catalog.tables.append("p.w.ns.moving", t_rows(600, start=2400).to_reader())
            catalog.tables.delete_rows("p.w.ns.moving", "id < 1200")
            got = fetch_all(client, options, info)
            assert sorted(got.column("id").to_pylist()) == list(range(2400))
    finally:
        catalog.close()


def test_adbc_reads_every_endpoint(server: Any, alice: Any) -> None:
    import adbc_driver_flightsql.dbapi as fsql

    from lake_platform_tests.flight.conftest import PASSWORDS

    client, options = alice
    expected = single(client, options, "SELECT id, s FROM w.ns.big")
    uri = f"grpc://127.0.0.1:{server.port}"
    kwargs = {"username": "alice", "password": PASSWORDS["alice"]}
    with fsql.connect(uri, db_kwargs=kwargs, autocommit=True) as conn, conn.cursor() as cur:
        cur.execute("SELECT id, s FROM w.ns.big")
        got = cur.fetch_arrow_table()
        assert rows(got) == rows(expected)
        cur.execute("SELECT id, s FROM w.ns.big")
        frame = cur.fetch_df()
        assert sorted(frame["id"].tolist()) == sorted(expected.column("id").to_pylist())
        import polars as pl

        cur.execute("SELECT id, s FROM w.ns.big")
        polars = pl.from_arrow(cur.fetch_arrow_table())
        assert isinstance(polars, pl.DataFrame) and polars.height == expected.num_rows


def test_locations_spread_over_replicas(lake: tuple[LakeSettings, Catalog]) -> None:
    """Two in-process replicas sharing keys name each other; ADBC reads parts from both."""
    import adbc_driver_flightsql.dbapi as fsql

    from lake_platform_tests.flight.conftest import PASSWORDS

    port_a, port_b = free_ports(2)
    uri_a, uri_b = f"grpc://127.0.0.1:{port_a}", f"grpc://127.0.0.1:{port_b}"
    common = {**SPLIT, "keys": KEYS}
    with (
        serving(*lake, port=port_a, advertise=uri_a, peers=uri_b, **common) as a,
        serving(*lake, port=port_b, advertise=uri_b, peers=uri_a, **common) as b,
    ):
        client, options = login(uri_a)
        info = plan(client, options, "SELECT id, x FROM w.ns.big")
        firsts = [e.locations[0].uri.decode() for e in info.endpoints]
        assert all(len(e.locations) == 2 for e in info.endpoints)
        assert Counter(firsts) == Counter({uri_a: 2, uri_b: 2})
        expected = single(client, options, "SELECT id, x FROM w.ns.big")
        kwargs = {"username": "alice", "password": PASSWORDS["alice"]}
        with fsql.connect(uri_a, db_kwargs=kwargs, autocommit=True) as conn, conn.cursor() as cur:
            cur.execute("SELECT id, x FROM w.ns.big")
            assert rows(cur.fetch_arrow_table()) == rows(expected)
        assert len(a.parts) == 2 and len(b.parts) == 2  # each replica served its two parts
        # pyarrow at the named locations, the union exact
        got = []
        for e in info.endpoints:
            where = fl.connect(e.locations[0].uri.decode())
            got.append(where.do_get(e.ticket, options).read_all())
        assert rows(pa.concat_tables(got)) == rows(expected)
        # one point query on the same servers: one endpoint, no location
        point = plan(client, options, "SELECT * FROM w.ns.big WHERE id = 7")
        assert len(point.endpoints) == 1 and point.endpoints[0].locations == []


def test_a_replica_that_cannot_serve_refuses_fast(lake: tuple[LakeSettings, Catalog]) -> None:
    with serving(*lake, keys=KEYS, **SPLIT) as a, serving(*lake, **SPLIT) as other:
        client, options = login(f"grpc://127.0.0.1:{a.port}")
        info = plan(client, options, "SELECT id FROM w.ns.big")
        stranger = fl.connect(f"grpc://127.0.0.1:{other.port}")
        with pytest.raises(fl.FlightUnauthenticatedError):
            stranger.do_get(info.endpoints[0].ticket, options).read_all()


def test_another_tenant_cannot_use_a_part_ticket(server: Any, alice: Any) -> None:
    client, options = alice
    info = plan(client, options, "SELECT * FROM w.ns.big")
    bob_client, bob_options = login(f"grpc://127.0.0.1:{server.port}", "bob")
    with pytest.raises(fl.FlightUnauthorizedError, match="ticket"):
        bob_client.do_get(info.endpoints[1].ticket, bob_options).read_all()


def test_forged_part_tickets_are_refused(server: Any, alice: Any) -> None:
    client, options = alice
    info = plan(client, options, "SELECT * FROM w.ns.big")
    raw = bytearray(info.endpoints[0].ticket.ticket)
    raw[-5] ^= 1
    with pytest.raises(fl.FlightUnauthenticatedError, match="invalid ticket"):
        client.do_get(fl.Ticket(bytes(raw)), options).read_all()
    # Sealed with the right keys (as if one leaked) but for bob's project with alice's part:
    # refused, bob's project pins no table of alice's.
    blob = proto.statement_handle(info.endpoints[0].ticket.ticket)
    claims = server.sealer.open("ticket", blob, what="ticket")
    assert claims["prt"]["n"] == "p.w.ns.big"
    forged = {**claims, **BOB.claims()}
    for key in ("v", "kid", "pur", "iat", "exp"):
        forged.pop(key, None)
    ticket = proto.pack(proto.TicketStatementQuery(statement_handle=server.sealer.seal("ticket", forged, 60)))
    bob_client, bob_options = login(f"grpc://127.0.0.1:{server.port}", "bob")
    with pytest.raises(fl.FlightUnauthenticatedError, match="invalid ticket"):
        bob_client.do_get(fl.Ticket(ticket), bob_options).read_all()
    # A part naming a table the ticket does not pin.
    forged = {**claims, "prt": {"n": "p.w.ns.t", "r": [[0, 0]]}}
    for key in ("v", "kid", "pur", "iat", "exp"):
        forged.pop(key, None)
    ticket = proto.pack(proto.TicketStatementQuery(statement_handle=server.sealer.seal("ticket", forged, 60)))
    with pytest.raises(fl.FlightUnauthenticatedError, match="invalid ticket"):
        client.do_get(fl.Ticket(ticket), options).read_all()
    with pytest.raises(InvalidInput, match="a part must be of a table the query reads"):
        server.tickets.seal_statement(ALICE, "SELECT 1", None, (), part=Part("p.w.ns.t", ((0, 0),)))


def test_malformed_part_claims_are_refused(server: Any) -> None:
    for bad in ({"n": "x", "r": []}, {"n": "x", "r": [[3, 1]]}, {"n": "x", "r": [[0, 2], [2, 3]]}, {"n": 1}):
        with pytest.raises(ValueError):
            Part.from_json(bad)


def test_replica_settings_are_checked() -> None:
    from lake_platform.errors import LakeError
    from lake_platform.settings.flight import flight_settings

    ok = flight_settings(advertise="grpc://a:1", peers="grpc+tls://b.example:443, grpc://a:1,grpc://[::1]:5")
    assert ok.replicas() == ["grpc://a:1", "grpc+tls://b.example:443", "grpc://[::1]:5"]
    assert flight_settings().replicas() == []
    for bad in (
        {"advertise": "http://a:1"},
        {"advertise": "grpc://a"},
        {"advertise": "grpc://a:1,grpc://b:2"},
        {"peers": "grpc://b:2"},  # peers without advertise
        {"advertise": "grpc://a:1", "peers": "grpc://b:2/x"},
    ):
        with pytest.raises(LakeError, match="LAKE_FLIGHT_(ADVERTISE|PEERS)"):
            flight_settings(**bad)
