"""The data plane (LAKE_FLIGHT_DATA_LISTEN): DoGet of statement tickets on a C++ Flight server.

Statement endpoints name the data plane; what it serves is exactly what the grpcio port serves
for the same tickets (row for row, single and split results, pyarrow and ADBC clients), with
the same checks (identity, tenant, seal, expiry, admission) answered with typed statuses. The
table ``p.w.ns.big`` has 8 fragments of 500 rows (deleted rows in one); the server splits above
1000 rows into at most 4 endpoints. Replicas, TLS, the plane off, its settings:
test_dataplane_setup.py.
"""

from __future__ import annotations

import os
import secrets
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.flight as fl
import pytest

from lake_platform.catalog.catalog import Catalog
from lake_platform.flight import proto
from lake_platform.flight.dataplane import SURFACE, DataCall, watched_stream
from lake_platform.observability import context as request_context
from lake_platform.observability.metrics import REQUESTS
from lake_platform.settings import LakeSettings
from lake_platform_tests.engine.helpers import lance_panic
from lake_platform_tests.flight.conftest import (
    ALICE,
    PASSWORDS,
    SPLIT,
    SVC_TOKEN,
    build_split_catalog,
    built_lake,
    login,
    plan,
    serving,
    start_server,
    t_rows,
    wait_until,
)
from lake_platform_tests.flight.helpers import SLOW_SQL, SlowUdf, streams_of

DATA = {"data_listen": "127.0.0.1:0"}
KEYS = f"k1:{secrets.token_hex(32)}"
BIG = "SELECT * FROM w.ns.big"


@pytest.fixture(scope="module")
def lake(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[LakeSettings, Catalog]]:
    yield from built_lake(tmp_path_factory, build_split_catalog, "dataplane")


@pytest.fixture(scope="module")
def server(lake: tuple[LakeSettings, Catalog]) -> Iterator[Any]:
    with serving(*lake, **SPLIT, **DATA) as running:
        yield running


@pytest.fixture(scope="module")
def alice(server: Any) -> tuple[fl.FlightClient, fl.FlightCallOptions]:
    return login(f"grpc://127.0.0.1:{server.port}")


def data_uri(server: Any) -> str:
    assert server.data_plane is not None
    return f"grpc://127.0.0.1:{server.data_plane.port}"


def rows(table: pa.Table) -> Counter[tuple[Any, ...]]:
    return Counter(zip(*(c.to_pylist() for c in table.columns), strict=True))


def at_locations(info: fl.FlightInfo, options: fl.FlightCallOptions) -> pa.Table:
    """Every endpoint fetched where its first location says, by a new pyarrow client."""
    parts = []
    for endpoint in info.endpoints:
        where = fl.connect(endpoint.locations[0].uri.decode())
        parts.append(where.do_get(endpoint.ticket, options).read_all())
    return pa.concat_tables(parts)


def on_the_endpoint(client: fl.FlightClient, options: fl.FlightCallOptions, info: fl.FlightInfo) -> pa.Table:
    """The same tickets redeemed on the grpcio port (the path without the data plane)."""
    return pa.concat_tables([client.do_get(e.ticket, options).read_all() for e in info.endpoints])


def served(code: str = "OK") -> float:
    return REQUESTS.labels(SURFACE, "DoGet", code)._value.get()


# == what it serves =============================================================================


@pytest.mark.parametrize(
    "sql",
    [BIG, "SELECT id, x * 2 AS y FROM w.ns.big WHERE x > 100", "SELECT s FROM w.ns.big WHERE id % 3 = 1"],
)
def test_split_results_through_the_data_plane_equal_the_grpcio_path(
    alice: Any, server: Any, sql: str
) -> None:
    client, options = alice
    info = plan(client, options, sql)
    assert len(info.endpoints) == 4
    assert all([loc.uri.decode() for loc in e.locations] == [data_uri(server)] for e in info.endpoints)
    before = served()
    got = at_locations(info, options)
    assert served() == before + 4
    assert got.schema == info.schema
    assert rows(got) == rows(on_the_endpoint(client, options, info))
    ordered = plan(client, options, f"SELECT * FROM ({sql}) ORDER BY 1")
    assert rows(got) == rows(at_locations(ordered, options))


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT * FROM w.ns.big WHERE id = 4",
        "SELECT count(*) AS n, sum(x) AS sx FROM w.ns.big",
        "SELECT id FROM w.ns.big ORDER BY id DESC",
        "SELECT * FROM w.ns.t",
    ],
)
def test_single_endpoint_results_name_the_data_plane_too(alice: Any, server: Any, sql: str) -> None:
    client, options = alice
    info = plan(client, options, sql)
    assert len(info.endpoints) == 1
    assert [loc.uri.decode() for loc in info.endpoints[0].locations] == [data_uri(server)]
    got = at_locations(info, options)
    assert got.equals(on_the_endpoint(client, options, info))  # order too (ORDER BY)


def test_batches_go_out_as_the_scan_makes_them(alice: Any) -> None:
    """Unmerged: one batch per 500-row fragment read (the grpcio port merges fast batches into
    one message; here that would only copy every byte)."""
    client, options = alice
    info = plan(client, options, "SELECT id FROM w.ns.big WHERE id >= 1000")
    assert len(info.endpoints) > 1
    chunks = []
    for endpoint in info.endpoints:
        reader = fl.connect(endpoint.locations[0].uri.decode()).do_get(endpoint.ticket, options)
        chunks += [chunk.data.num_rows for chunk in reader]
    assert chunks == [500] * 6  # the six fragments without deleted rows


def test_scans_come_in_batches_of_scan_batch_rows(lake: tuple[LakeSettings, Catalog], alice: Any) -> None:
    """LAKE_FLIGHT_SCAN_BATCH_ROWS (32768) becomes Lance's scan batch size (fewer, larger
    messages); an operator's own LANCE_DEFAULT_BATCH_SIZE would win."""
    _, catalog = lake
    catalog.tables.create_table("p.w.ns.long", t_rows(40_000).to_reader())
    client, options = alice
    assert wait_until(lambda: plan(client, options, "SELECT id FROM w.ns.long"))  # the snapshot's refresh
    one = fl.FlightCallOptions(headers=[*options.headers, (b"x-lake-endpoints", b"one")])  # one whole scan
    info = plan(client, one, "SELECT id FROM w.ns.long")
    chunks = []
    for endpoint in info.endpoints:
        reader = fl.connect(endpoint.locations[0].uri.decode()).do_get(endpoint.ticket, options)
        chunks += [chunk.data.num_rows for chunk in reader]
    assert os.environ["LANCE_DEFAULT_BATCH_SIZE"] == "32768"
    assert sum(chunks) == 40_000 and max(chunks) > 8192


def test_deleted_rows_stay_deleted(alice: Any) -> None:
    client, options = alice
    ids = at_locations(plan(client, options, "SELECT id FROM w.ns.big"), options).column("id").to_pylist()
    assert sorted(ids) == [i for i in range(4000) if not (i % 7 == 0 and i < 1000)]


def test_spooled_segments_can_be_read_from_the_data_plane(server: Any, alice: Any) -> None:
    """Segment endpoints keep their own locations (the endpoint); their tickets work here too."""
    client, options = alice
    asking = fl.FlightCallOptions(headers=[*options.headers, (b"x-lake-spool", b"true")])
    info = plan(client, asking, "SELECT * FROM w.ns.t")
    data = fl.connect(data_uri(server))
    got = pa.concat_tables([data.do_get(e.ticket, options).read_all() for e in info.endpoints])
    assert rows(got) == rows(on_the_endpoint(client, options, info))
    assert got.num_rows == 1000


def test_tickets_stay_pinned_across_appends_and_deletes(lake: tuple[LakeSettings, Catalog]) -> None:
    settings, _ = lake
    catalog = Catalog(settings)
    try:
        catalog.tables.create_table("p.w.ns.moving", t_rows(600).to_reader())
        for k in range(1, 4):
            catalog.tables.append("p.w.ns.moving", t_rows(600, start=600 * k).to_reader())
        with serving(settings, catalog, **SPLIT, **DATA) as server:
            client, options = login(f"grpc://127.0.0.1:{server.port}")
            split = plan(client, options, "SELECT id FROM w.ns.moving")
            whole = plan(client, options, "SELECT count(*) AS n FROM w.ns.moving")
            assert len(split.endpoints) == 3
            catalog.tables.append("p.w.ns.moving", t_rows(600, start=2400).to_reader())
            catalog.tables.delete_rows("p.w.ns.moving", "id < 1200")
            assert sorted(at_locations(split, options).column("id").to_pylist()) == list(range(2400))
            assert at_locations(whole, options).to_pylist() == [{"n": 2400}]
    finally:
        catalog.close()


def test_catalog_commands_stay_on_the_endpoint(alice: Any) -> None:
    client, options = alice
    descriptor = fl.FlightDescriptor.for_command(proto.pack(proto.CommandGetCatalogs()))
    info = client.get_flight_info(descriptor, options)
    assert info.endpoints[0].locations == []


def test_adbc_follows_the_locations_with_its_bearer(server: Any, alice: Any) -> None:
    import adbc_driver_flightsql.dbapi as fsql

    client, options = alice
    uri = f"grpc://127.0.0.1:{server.port}"
    kwargs = {"username": "alice", "password": PASSWORDS["alice"]}
    for sql, parts in ((BIG, 4), ("SELECT * FROM w.ns.big WHERE id < 100 ORDER BY id", 1)):
        expected = on_the_endpoint(client, options, plan(client, options, sql))
        before = served()
        with fsql.connect(uri, db_kwargs=kwargs, autocommit=True) as conn, conn.cursor() as cur:
            cur.execute(sql)
            got = cur.fetch_arrow_table()
        assert rows(got) == rows(expected)
        assert served() == before + parts  # every part came from the data plane
    # a static service token (no Handshake) is honoured there too
    before = served()
    bearer = {"adbc.flight.sql.authorization_header": f"Bearer {SVC_TOKEN}"}
    with fsql.connect(uri, db_kwargs=bearer, autocommit=True) as conn, conn.cursor() as cur:
        cur.execute(BIG)
        assert cur.fetch_arrow_table().num_rows == 4000 - 143
    assert served() == before + 4


# == refusals ===================================================================================


def test_another_identity_cannot_use_a_ticket(server: Any, alice: Any) -> None:
    client, options = alice
    info = plan(client, options, BIG)
    _, bob_options = login(f"grpc://127.0.0.1:{server.port}", "bob")
    data = fl.connect(data_uri(server))
    before = served("PERMISSION_DENIED")
    with pytest.raises(fl.FlightUnauthorizedError, match="ticket"):
        data.do_get(info.endpoints[0].ticket, bob_options).read_all()
    assert served("PERMISSION_DENIED") == before + 1


def test_no_or_a_bad_bearer_is_unauthenticated(server: Any, alice: Any) -> None:
    client, options = alice
    ticket = plan(client, options, BIG).endpoints[0].ticket
    data = fl.connect(data_uri(server))
    with pytest.raises(fl.FlightUnauthenticatedError):
        data.do_get(ticket).read_all()
    forged = fl.FlightCallOptions(headers=[(b"authorization", b"Bearer lp1.nope")])
    with pytest.raises(fl.FlightUnauthenticatedError, match="invalid credentials"):
        data.do_get(ticket, forged).read_all()


def test_forged_tickets_are_refused(server: Any, alice: Any) -> None:
    client, options = alice
    raw = bytearray(plan(client, options, BIG).endpoints[0].ticket.ticket)
    raw[-5] ^= 0x01
    data = fl.connect(data_uri(server))
    with pytest.raises(fl.FlightUnauthenticatedError, match="invalid ticket"):
        data.do_get(fl.Ticket(bytes(raw)), options).read_all()
    # not a statement ticket at all (a catalog command): typed, no traceback
    with pytest.raises(fl.FlightServerError, match=r"INVALID_ARGUMENT: .*statement tickets only") as err:
        data.do_get(fl.Ticket(proto.pack(proto.CommandGetCatalogs())), options).read_all()
    assert "Traceback" not in str(err.value)


def test_other_calls_are_refused(server: Any, alice: Any) -> None:
    _, options = alice
    data = fl.connect(data_uri(server))
    descriptor = fl.FlightDescriptor.for_command(proto.pack(proto.CommandStatementQuery(query=BIG)))
    with pytest.raises(fl.FlightServerError, match="UNIMPLEMENTED: this is the data plane") as err:
        data.get_flight_info(descriptor, options)
    assert "Traceback" not in str(err.value)


def test_an_expired_ticket_is_refused(lake: tuple[LakeSettings, Catalog]) -> None:
    now = [time.time()]
    with serving(*lake, clock=lambda: now[0], **DATA) as server:
        client, options = login(f"grpc://127.0.0.1:{server.port}")
        info = plan(client, options, "SELECT * FROM w.ns.t")
        now[0] += server.ticket_ttl + 5
        _, fresh = login(f"grpc://127.0.0.1:{server.port}")  # the caller is fine, the ticket is not
        with pytest.raises(fl.FlightServerError, match=r"INVALID_ARGUMENT: the ticket has expired") as err:
            at_locations(info, fresh)
        assert "Traceback" not in str(err.value)


def test_admission_limit_answers_unavailable_naming_the_limit(lake: tuple[LakeSettings, Catalog]) -> None:
    with serving(*lake, max_concurrent_queries=1, admission_wait_seconds=0.2, **DATA) as server:
        client, options = login(f"grpc://127.0.0.1:{server.port}")
        data = fl.connect(data_uri(server))
        with SlowUdf(server, delay=0.15):
            first = data.do_get(plan(client, options, SLOW_SQL).endpoints[0].ticket, options)
            first.read_chunk()
            second = plan(client, options, "SELECT count(*) AS n FROM w.ns.t")
            with pytest.raises(
                fl.FlightUnavailableError,
                match="RESOURCE_EXHAUSTED: too many queries.*LAKE_FLIGHT_MAX_CONCURRENT_QUERIES=1",
            ):
                at_locations(second, options)
            for _ in first:
                pass
        assert wait_until(lambda: streams_of(server) == 0)
        assert at_locations(second, options).to_pylist() == [{"n": 1000}]


def test_cancel_flight_info_stops_a_data_plane_stream(lake: tuple[LakeSettings, Catalog]) -> None:
    with serving(*lake, **DATA) as server:
        client, options = login(f"grpc://127.0.0.1:{server.port}")
        data = fl.connect(data_uri(server))
        with SlowUdf(server, delay=0.3) as slow:
            info = plan(client, options, SLOW_SQL)
            reader = data.do_get(info.endpoints[0].ticket, options)
            reader.read_chunk()
            body = proto.CancelFlightInfoRequest(info=info.serialize()).SerializeToString()
            [result] = list(client.do_action(fl.Action("CancelFlightInfo", body), options))
            status = proto.parse(proto.CancelFlightInfoResult, result.body.to_pybytes()).status
            assert status == proto.CANCEL_STATUS_CANCELLED
            with pytest.raises(fl.FlightCancelledError, match="cancelled"):
                for _ in reader:
                    pass
            assert len(slow.calls) < 5
            with pytest.raises(fl.FlightCancelledError):
                data.do_get(info.endpoints[0].ticket, options).read_all()
        assert wait_until(lambda: streams_of(server) == 0)


def test_time_limit_ends_a_data_plane_stream(lake: tuple[LakeSettings, Catalog]) -> None:
    with serving(*lake, query_timeout_seconds=0.5, **DATA) as server:
        client, options = login(f"grpc://127.0.0.1:{server.port}")
        info = plan(client, options, "SELECT value FROM generate_series(1, 60000000) ORDER BY value DESC")
        started = time.monotonic()
        with pytest.raises(fl.FlightTimedOutError, match="LAKE_FLIGHT_QUERY_TIMEOUT_SECONDS=0.5"):
            at_locations(info, options)
        assert time.monotonic() - started < 2.5
        assert wait_until(lambda: streams_of(server) == 0)


def test_stop_does_not_wait_forever_for_a_client_that_stopped_reading(
    lake: tuple[LakeSettings, Catalog],
) -> None:
    """A stream blocked in its send (the client reads no more) does not hold the server's stop."""
    server = start_server(*lake, **DATA)
    client, options = login(f"grpc://127.0.0.1:{server.port}")
    info = plan(client, options, "SELECT value FROM generate_series(1, 20000000)")
    data = fl.connect(data_uri(server))
    reader = data.do_get(info.endpoints[0].ticket, options)
    reader.read_chunk()  # then never again: the server fills gRPC's window and blocks in its send
    assert wait_until(lambda: streams_of(server) == 1)
    started = time.monotonic()
    server.stop(grace=0)
    assert time.monotonic() - started < 10
    data.close()


def test_a_lance_panic_mid_stream_answers_internal(tmp_path: Path) -> None:
    """A panic is a BaseException: it left ``watched_stream`` as it was, unanswered by a status of
    ours and counted as served OK."""
    panic = lance_panic(tmp_path)

    def batches() -> Iterator[pa.RecordBatch]:
        yield pa.record_batch({"n": [1]})
        raise panic

    before = served("INTERNAL")
    info, token = request_context.begin(SURFACE, "DoGet")
    try:
        stream = watched_stream(batches(), DataCall(ALICE, None, {}), info, time.perf_counter())  # type: ignore[arg-type]
        assert next(stream).num_rows == 1
        with pytest.raises(fl.FlightInternalError, match=r"internal error; see the server log"):
            next(stream)
    finally:
        request_context.end(token)
    assert served("INTERNAL") == before + 1
