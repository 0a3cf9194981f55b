"""Spooled heavy results: above the threshold (or when the caller asks) the result is written to
the results area as Arrow IPC segments and served from there, one endpoint per segment (the
server here answers several endpoints by default, ``endpoints="many"``; one endpoint for the
whole spool: ``test_spool_whole.py``); it expires, is cancelled (segments deleted), and refuses
tickets that are not exactly its own."""

from __future__ import annotations

import struct
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pyarrow as pa
import pyarrow.flight as fl
import pytest

from lake_platform.catalog.catalog import Catalog
from lake_platform.errors import SettingsError
from lake_platform.flight import proto
from lake_platform.flight.spool import SEGMENT_PREFIX
from lake_platform.settings import LakeSettings
from lake_platform_tests.flight.conftest import ALICE, PASSWORDS, build_catalog, login, plan, serving, t_rows
from lake_platform_tests.flight.helpers import SlowUdf

SPOOL = {"spool_min_rows": 3000, "spool_segment_bytes": 16 << 10, "batch_size": 512, "endpoints": "many"}
BIG_IDS = list(range(4000))


class Clock:
    def __init__(self) -> None:
        import time

        self.now = time.time()

    def __call__(self) -> float:
        return self.now


@pytest.fixture(scope="module")
def lake(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[LakeSettings, Catalog]]:
    home = tmp_path_factory.mktemp("spool") / "home"
    settings, catalog = build_catalog(home, results_ttl_seconds=600)
    catalog.tables.create_table("p.w.ns.big", t_rows(2000).to_reader())
    catalog.tables.append("p.w.ns.big", t_rows(2000, start=2000).to_reader())
    try:
        yield settings, catalog
    finally:
        catalog.close()


@pytest.fixture(scope="module")
def clock() -> Clock:
    return Clock()


@pytest.fixture(scope="module")
def server(lake: tuple[LakeSettings, Catalog], clock: Clock) -> Iterator[Any]:
    with serving(*lake, clock=clock, **SPOOL) as running:
        yield running


@pytest.fixture(scope="module")
def alice(server: Any) -> tuple[fl.FlightClient, fl.FlightCallOptions]:
    return login(f"grpc://127.0.0.1:{server.port}")


def results_root(lake: tuple[LakeSettings, Catalog]) -> Path:
    return Path(lake[0].results_root)


def segment_files(lake: tuple[LakeSettings, Catalog]) -> list[Path]:
    return sorted(results_root(lake).glob("p/*/seg-*.arrows"))


def is_segment(endpoint: fl.FlightEndpoint) -> bool:
    return proto.statement_handle(endpoint.ticket.ticket).startswith(SEGMENT_PREFIX)


def read(client: fl.FlightClient, options: fl.FlightCallOptions, info: fl.FlightInfo) -> pa.Table:
    return pa.concat_tables(client.do_get(e.ticket, options).read_all() for e in info.endpoints)


def test_a_heavy_result_is_spooled_in_segments(lake: Any, server: Any, alice: Any) -> None:
    client, options = alice
    info = plan(client, options, "SELECT id, s FROM w.ns.big")
    assert len(info.endpoints) > 2 and all(is_segment(e) for e in info.endpoints)
    assert info.total_records == 4000
    job = proto.statement_handle(info.endpoints[0].ticket.ticket)
    assert job
    files = segment_files(lake)
    assert len(files) >= len(info.endpoints) and all(f.stat().st_size > 0 for f in files)
    got = read(client, options, info)
    assert got.schema == info.schema
    assert sorted(got.column("id").to_pylist()) == BIG_IDS


def test_a_sorted_result_is_spooled_in_order(server: Any, alice: Any) -> None:
    client, options = alice
    info = plan(client, options, "SELECT id FROM w.ns.big ORDER BY id DESC")
    assert info.ordered and len(info.endpoints) > 1 and all(is_segment(e) for e in info.endpoints)
    assert read(client, options, info).column("id").to_pylist() == BIG_IDS[::-1]


def test_small_or_aggregated_results_are_not_spooled(server: Any, alice: Any) -> None:
    client, options = alice
    for sql in (
        "SELECT count(*) FROM w.ns.big",
        "SELECT s, sum(x) FROM w.ns.big GROUP BY s",
        "SELECT * FROM w.ns.t",
        "SELECT * FROM w.ns.big LIMIT 5",
        "SELECT * FROM w.ns.big ORDER BY x DESC LIMIT 5",  # a top-n: the sort's own limit
        "SELECT * FROM w.ns.big WHERE id = 3",  # a key lookup
        "SELECT * FROM w.ns.big WHERE id IN (3, 4)",
    ):
        info = plan(client, options, sql)
        assert not any(is_segment(e) for e in info.endpoints), sql
    assert server.spooler.running() == 0


def test_the_caller_may_ask_for_spooling(server: Any, alice: Any) -> None:
    client, options = alice
    asking = fl.FlightCallOptions(headers=[*options.headers, (b"x-lake-spool", b"true")])
    info = plan(client, asking, "SELECT * FROM w.ns.t")
    assert all(is_segment(e) for e in info.endpoints)
    assert read(client, options, info).num_rows == 1000


def test_adbc_pandas_and_polars_read_spooled_results(server: Any) -> None:
    import adbc_driver_flightsql.dbapi as fsql
    import polars as pl

    kwargs = {"username": "alice", "password": PASSWORDS["alice"]}
    with fsql.connect(f"grpc://127.0.0.1:{server.port}", db_kwargs=kwargs, autocommit=True) as conn:
        with conn.cursor() as cur:
            cur.execute("SELECT id, s FROM w.ns.big")
            assert sorted(cur.fetch_arrow_table().column("id").to_pylist()) == BIG_IDS
            cur.execute("SELECT id, s FROM w.ns.big")
            assert sorted(cur.fetch_df()["id"].tolist()) == BIG_IDS
            cur.execute("SELECT id FROM w.ns.big ORDER BY id")
            frame = pl.from_arrow(cur.fetch_arrow_table())
            assert isinstance(frame, pl.DataFrame) and frame["id"].to_list() == BIG_IDS


def cancel(client: fl.FlightClient, options: fl.FlightCallOptions, info: fl.FlightInfo) -> int:
    body = proto.CancelFlightInfoRequest(info=info.serialize()).SerializeToString()
    [result] = list(client.do_action(fl.Action("CancelFlightInfo", body), options))
    return proto.parse(proto.CancelFlightInfoResult, result.body.to_pybytes()).status


def test_cancel_deletes_the_segments(lake: Any, server: Any, alice: Any) -> None:
    client, options = alice
    info = plan(client, options, "SELECT id, x FROM w.ns.big")
    job = _job_of(server, info)
    assert (results_root(lake) / "p" / job).is_dir()
    assert cancel(client, options, info) == proto.CANCEL_STATUS_CANCELLED
    assert not (results_root(lake) / "p" / job).exists()
    with pytest.raises(pa.ArrowKeyError, match="spooled result is gone"):  # NOT_FOUND
        client.do_get(info.endpoints[0].ticket, options).read_all()


def test_a_segment_deleted_under_a_reader_is_a_typed_error(lake: Any, server: Any, alice: Any) -> None:
    client, options = alice
    info = plan(client, options, "SELECT id, x FROM w.ns.big")
    first = client.do_get(info.endpoints[0].ticket, options).read_all()
    assert first.num_rows
    for f in (results_root(lake) / "p" / _job_of(server, info)).glob("seg-*"):
        f.unlink()
    with pytest.raises(pa.ArrowKeyError, match="segment of the spooled result is gone"):
        client.do_get(info.endpoints[1].ticket, options).read_all()


def test_tampered_foreign_and_expired_segment_tickets_are_refused(
    server: Any, alice: Any, clock: Clock
) -> None:
    client, options = alice
    info = plan(client, options, "SELECT id FROM w.ns.big")
    raw = bytearray(info.endpoints[0].ticket.ticket)
    raw[-3] ^= 1
    with pytest.raises(fl.FlightUnauthenticatedError, match="invalid ticket"):
        client.do_get(fl.Ticket(bytes(raw)), options).read_all()
    bob, bob_options = login(f"grpc://127.0.0.1:{server.port}", "bob")
    with pytest.raises(fl.FlightUnauthorizedError, match="ticket"):
        bob.do_get(info.endpoints[0].ticket, bob_options).read_all()
    clock.now += 601
    try:
        with pytest.raises(pa.ArrowInvalid, match="spooled result has expired"):
            client.do_get(info.endpoints[0].ticket, options).read_all()
    finally:
        clock.now -= 601


def test_poll_reports_progress_until_ready(server: Any, alice: Any) -> None:
    client, options = alice
    header = [(k.decode().lower(), v.decode()) for k, v in options.headers]
    channel = grpc.insecure_channel(f"127.0.0.1:{server.port}")
    poll = channel.unary_unary("/arrow.flight.protocol.FlightService/PollFlightInfo")
    command = proto.pack(proto.CommandStatementQuery(query="SELECT slow(id) AS id FROM w.ns.multi"))
    descriptor = fl.FlightDescriptor.for_command(command)
    seen_pending = 0
    listed: list[str] = []  # the segments each pending answer named: they only grow
    try:
        with SlowUdf(server, 0.3):
            answer = parse_poll(poll(descriptor.serialize(), metadata=[*header, ("x-lake-spool", "true")]))
            while answer["descriptor"] is not None:
                seen_pending += 1
                assert answer["expires"] is not None
                assert answer["progress"] is None or 0 <= answer["progress"] < 1
                names = [segment_of(server, e) for e in answer["info"].endpoints]
                assert names[: len(listed)] == listed
                listed = names
                answer = parse_poll(poll(answer["descriptor"].serialize(), metadata=header))
    finally:
        channel.close()
    assert seen_pending >= 1
    assert answer["progress"] == 1.0
    info = answer["info"]
    assert info.endpoints and all(is_segment(e) for e in info.endpoints)
    assert [segment_of(server, e) for e in info.endpoints][: len(listed)] == listed
    assert sorted(read(client, options, info).column("id").to_pylist()) == list(range(500))


def test_poll_of_a_light_query_answers_at_once(server: Any, alice: Any) -> None:
    client, options = alice
    header = [(k.decode().lower(), v.decode()) for k, v in options.headers]
    with grpc.insecure_channel(f"127.0.0.1:{server.port}") as channel:
        poll = channel.unary_unary("/arrow.flight.protocol.FlightService/PollFlightInfo")
        command = proto.pack(proto.CommandStatementQuery(query="SELECT count(*) AS n FROM w.ns.t"))
        answer = parse_poll(poll(fl.FlightDescriptor.for_command(command).serialize(), metadata=header))
    assert answer["descriptor"] is None and answer["progress"] == 1.0
    assert read(client, options, answer["info"]).to_pylist() == [{"n": 1000}]


def test_a_results_root_that_cannot_be_written_stops_the_server(
    lake: tuple[LakeSettings, Catalog], tmp_path: Path
) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    settings = lake[0].model_copy(update={"results_root": str(blocker / "results")})
    with pytest.raises(SettingsError, match="LAKE_RESULTS_ROOT: cannot write"):
        with serving(settings, lake[1]):
            pass
    with serving(settings, lake[1], spool=False) as server:  # spooling off: no check, no spooling
        client, options = login(f"grpc://127.0.0.1:{server.port}")
        asking = fl.FlightCallOptions(headers=[*options.headers, (b"x-lake-spool", b"true")])
        with pytest.raises(pa.ArrowNotImplementedError, match="does not spool"):
            plan(client, asking, "SELECT * FROM w.ns.t")


def segment_of(server: Any, endpoint: fl.FlightEndpoint) -> str:
    return str(server.spooler.open_segment(proto.statement_handle(endpoint.ticket.ticket), None)[2])


def _job_of(server: Any, info: fl.FlightInfo) -> str:
    handle = proto.statement_handle(info.endpoints[0].ticket.ticket)
    return server.spooler.open_segment(handle, None)[1]


def parse_poll(data: bytes) -> dict[str, Any]:
    """PollInfo{info = 1, flight_descriptor = 2, progress = 3, expiration_time = 4}."""
    out: dict[str, Any] = {"info": None, "descriptor": None, "progress": None, "expires": None}
    pos = 0
    while pos < len(data):
        key, pos = _varint(data, pos)
        field, wire = key >> 3, key & 7
        if wire == 1:
            out["progress"] = struct.unpack("<d", data[pos : pos + 8])[0]
            pos += 8
            continue
        length, pos = _varint(data, pos)
        body = data[pos : pos + length]
        pos += length
        if field == 1:
            out["info"] = fl.FlightInfo.deserialize(body)
        elif field == 2:
            out["descriptor"] = fl.FlightDescriptor.deserialize(body)
        elif field == 4:
            out["expires"] = _varint(body, 1)[0] if body else 0
    return out


def _varint(buf: bytes, pos: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return result, pos
        shift += 7


def test_cancel_of_a_running_spool_stops_it_and_deletes_it(lake: Any, server: Any, alice: Any) -> None:
    client, options = alice
    header = [(k.decode().lower(), v.decode()) for k, v in options.headers]
    command = proto.pack(proto.CommandStatementQuery(query="SELECT slow(id) AS id FROM w.ns.multi"))
    with grpc.insecure_channel(f"127.0.0.1:{server.port}") as channel, SlowUdf(server, 0.5) as slow:
        poll = channel.unary_unary("/arrow.flight.protocol.FlightService/PollFlightInfo")
        descriptor = fl.FlightDescriptor.for_command(command)
        answer = parse_poll(poll(descriptor.serialize(), metadata=[*header, ("x-lake-spool", "true")]))
        pending = answer["info"]
        assert answer["descriptor"] is not None and pending.endpoints == []
        job, _ = server.spooler.open_poll(answer["descriptor"].command, ALICE)
        assert (results_root(lake) / "p" / job).is_dir()
        assert cancel(client, options, pending) == proto.CANCEL_STATUS_CANCELLED
        assert server.spooler.local(job).state == "cancelled"
        calls = len(slow.calls)
        assert calls < 5  # stopped before the last batch
        assert not (results_root(lake) / "p" / job).exists()
        with pytest.raises(grpc.RpcError) as err:
            poll(answer["descriptor"].serialize(), metadata=header)
        assert err.value.code() in (grpc.StatusCode.NOT_FOUND, grpc.StatusCode.CANCELLED)


def test_adbc_incremental_execution_polls_a_spooled_result(server: Any) -> None:
    """ADBC's ``adbc.statement.exec.incremental`` runs on PollFlightInfo: partitions arrive with
    progress, then an empty call says the result is complete."""
    import adbc_driver_flightsql.dbapi as fsql

    kwargs = {"username": "alice", "password": PASSWORDS["alice"]}
    with fsql.connect(f"grpc://127.0.0.1:{server.port}", db_kwargs=kwargs, autocommit=True) as conn:
        with conn.cursor() as cur:
            cur.adbc_statement.set_options(**{"adbc.statement.exec.incremental": "true"})
            partitions: list[bytes] = []
            for _ in range(100):
                new, schema = cur.adbc_execute_partitions("SELECT id FROM w.ns.big")
                if not new:
                    break
                partitions += new
            assert len(partitions) > 1 and schema.names == ["id"]
            ids: list[int] = []
            for partition in partitions:
                cur.adbc_read_partition(partition)
                ids += cur.fetch_arrow_table().column("id").to_pylist()
    assert sorted(ids) == BIG_IDS


def test_another_replica_serves_the_segments(lake: Any) -> None:
    """Segments live in the shared results area: a replica sharing the keys serves them."""
    keys = "k1:" + "ab" * 32
    with serving(*lake, keys=keys, **SPOOL) as a, serving(*lake, keys=keys, **SPOOL) as b:
        client_a, options_a = login(f"grpc://127.0.0.1:{a.port}")
        info = plan(client_a, options_a, "SELECT id FROM w.ns.big ORDER BY id")
        assert info.ordered and len(info.endpoints) > 1
        client_b = fl.connect(f"grpc://127.0.0.1:{b.port}")
        got = pa.concat_tables(client_b.do_get(e.ticket, options_a).read_all() for e in info.endpoints)
        assert got.column("id").to_pylist() == BIG_IDS


def test_a_spool_past_the_time_limit_fails_and_leaves_nothing(lake: Any) -> None:
    with serving(*lake, query_timeout_seconds=1, **SPOOL) as server, SlowUdf(server, 0.4):
        client, options = login(f"grpc://127.0.0.1:{server.port}")
        asking = fl.FlightCallOptions(headers=[*options.headers, (b"x-lake-spool", b"true")])
        before = set((results_root(lake) / "p").glob("*"))
        with pytest.raises(fl.FlightTimedOutError, match="LAKE_FLIGHT_QUERY_TIMEOUT_SECONDS"):
            plan(client, asking, "SELECT slow(id) AS id FROM w.ns.multi")
        assert set((results_root(lake) / "p").glob("*")) == before  # no truncated result left


def test_a_server_without_spooling_refuses_segment_tickets(lake: Any, alice: Any) -> None:
    client, options = alice
    info = plan(client, options, "SELECT id FROM w.ns.big")
    assert is_segment(info.endpoints[0])
    with serving(*lake, spool=False) as plain:
        other, other_options = login(f"grpc://127.0.0.1:{plain.port}")
        with pytest.raises(pa.ArrowNotImplementedError, match="does not serve spooled results"):
            other.do_get(info.endpoints[0].ticket, other_options).read_all()
