"""A result spooled by size under the default settings is one endpoint: its DoGet streams
every segment in order, each as soon as it is written, so a client reading only the first
endpoint gets the whole answer and its first batch does not wait for the spool to end. Key
lookups, limits, top-n and aggregates over a table above the threshold are never spooled."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pyarrow as pa
import pyarrow.flight as fl
import pytest

from lake_platform.catalog.catalog import Catalog
from lake_platform.flight import proto
from lake_platform.flight.spool import WHOLE, Spooler, SpoolSettings
from lake_platform.query.planner import PlannedQuery
from lake_platform.query.snapshot import load_snapshot
from lake_platform.settings import LakeSettings
from lake_platform_tests.flight.conftest import ALICE, PASSWORDS, build_catalog, login, plan, serving, t_rows
from lake_platform_tests.flight.test_spool import is_segment, parse_poll

SPOOL = {"spool_min_rows": 3000, "spool_segment_bytes": 16 << 10, "batch_size": 512}


@pytest.fixture(scope="module")
def lake(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[LakeSettings, Catalog]]:
    settings, catalog = build_catalog(tmp_path_factory.mktemp("whole") / "home", results_ttl_seconds=600)
    catalog.tables.create_table("p.w.ns.big", t_rows(2000).to_reader())
    catalog.tables.append("p.w.ns.big", t_rows(2000, start=2000).to_reader())
    try:
        yield settings, catalog
    finally:
        catalog.close()


@pytest.fixture(scope="module")
def server(lake: tuple[LakeSettings, Catalog]) -> Iterator[Any]:
    with serving(*lake, **SPOOL) as running:
        yield running


@pytest.fixture(scope="module")
def alice(server: Any) -> tuple[fl.FlightClient, fl.FlightCallOptions]:
    return login(f"grpc://127.0.0.1:{server.port}")


def test_a_spooled_result_is_one_endpoint_with_the_whole_answer(server: Any, alice: Any) -> None:
    client, options = alice
    info = plan(client, options, "SELECT id, s FROM w.ns.big ORDER BY id")
    assert len(info.endpoints) == 1 and is_segment(info.endpoints[0]) and info.ordered
    handle = proto.statement_handle(info.endpoints[0].ticket.ticket)
    assert server.spooler.open_segment(handle, None)[2] == WHOLE
    got = client.do_get(info.endpoints[0].ticket, options).read_all()  # the first endpoint only
    assert got.column("id").to_pylist() == list(range(4000))
    job = server.spooler.local(server.spooler.open_segment(handle, None)[1])
    assert job is not None and len(job.closed) > 1  # the answer came from several segments


def test_adbc_reads_a_spooled_result_whole_by_default(server: Any) -> None:
    import adbc_driver_flightsql.dbapi as fsql

    kwargs = {"username": "alice", "password": PASSWORDS["alice"]}
    with fsql.connect(f"grpc://127.0.0.1:{server.port}", db_kwargs=kwargs, autocommit=True) as conn:
        with conn.cursor() as cur:
            cur.execute("SELECT id, x FROM w.ns.big")
            got = cur.fetch_arrow_table()
    assert sorted(got.column("id").to_pylist()) == list(range(4000))


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT * FROM w.ns.big WHERE id = 3",  # a point query
        "SELECT count(*), sum(x) FROM w.ns.big",  # an aggregate
        "SELECT * FROM w.ns.big ORDER BY x DESC LIMIT 10",  # a top-n
    ],
)
def test_few_rows_over_a_big_table_are_not_spooled(server: Any, alice: Any, sql: str) -> None:
    client, options = alice
    info = plan(client, options, sql)
    assert len(info.endpoints) == 1 and not is_segment(info.endpoints[0])
    assert server.spooler.running() == 0


class Gate:
    """A result stream that yields its first batch, then waits for ``release`` before the rest:
    the spool cannot end before the test releases it."""

    def __init__(self, engine: Any) -> None:
        self.engine = engine
        self.released = threading.Event()

    def __call__(self, planned: PlannedQuery, cancelled: Any) -> Iterator[pa.RecordBatch]:
        batches = self.engine.stream(planned, cancelled)
        yield next(batches)
        if not self.released.wait(60):
            raise TimeoutError("the test never released the spool")
        yield from batches


def test_the_first_batch_is_served_before_the_spool_ends(lake: Any, server: Any) -> None:
    gate = Gate(server.engine)
    settings = SpoolSettings(min_rows=0, min_bytes=0, segment_bytes=4 << 10, ttl=600, max_jobs=1, timeout=0)
    spooler = Spooler(server.spooler.area, server.spooler.sealer, settings, gate, server.fragment_sizes)
    planned = server.engine.plan("SELECT id, s FROM w.ns.big", load_snapshot(lake[1].store).project("p"))
    job = spooler.start(ALICE, planned, ordered=False)
    descriptor = fl.FlightDescriptor.for_command(b"SELECT id, s FROM w.ns.big")
    info = spooler.whole_info(job, planned, descriptor)
    assert len(info.endpoints) == 1 and info.schema == planned.schema
    handle = proto.statement_handle(info.endpoints[0].ticket.ticket)
    schema, batches = spooler.read(*spooler.open_segment(handle, ALICE))
    first = next(batches)
    assert first.num_rows and schema == planned.schema
    assert not job.done.is_set()  # the spool is held at the gate: nothing after its first batch
    poll = parse_poll(spooler.poll(job.id, ALICE, spooler.poll_descriptor(job), False))
    assert poll["descriptor"] is not None and poll["progress"] < 1
    assert 1 <= len(poll["info"].endpoints) <= len(job.closed)  # written segments readable already
    gate.released.set()
    rest = list(batches)
    ids = pa.Table.from_batches([first, *rest]).column("id").to_pylist()
    assert sorted(ids) == list(range(4000)) and job.state == "done"


def test_a_failed_spool_fails_its_reader(lake: Any, server: Any) -> None:
    gate = Gate(server.engine)
    settings = SpoolSettings(min_rows=0, min_bytes=0, segment_bytes=4 << 10, ttl=600, max_jobs=1, timeout=0)
    spooler = Spooler(server.spooler.area, server.spooler.sealer, settings, gate, server.fragment_sizes)
    planned = server.engine.plan("SELECT id, s FROM w.ns.big", load_snapshot(lake[1].store).project("p"))
    job = spooler.start(ALICE, planned, ordered=False)
    info = spooler.whole_info(job, planned, fl.FlightDescriptor.for_command(b"q"))
    _, batches = spooler.read(
        *spooler.open_segment(proto.statement_handle(info.endpoints[0].ticket.ticket), ALICE)
    )
    next(batches)
    cancel = threading.Thread(target=spooler.cancel_job, args=("p", job.id))
    cancel.start()  # stops the job held at the gate, and waits for it
    assert job.stop.wait(10)
    gate.released.set()
    cancel.join(10)
    assert job.state == "cancelled"
    with pytest.raises(Exception, match="cancelled|gone"):
        list(batches)


def test_another_replica_streams_the_whole_result_once_it_is_done(lake: Any) -> None:
    keys = "k1:" + "cd" * 32
    with serving(*lake, keys=keys, **SPOOL) as a, serving(*lake, keys=keys, **SPOOL) as b:
        client_a, options_a = login(f"grpc://127.0.0.1:{a.port}")
        info = plan(client_a, options_a, "SELECT id FROM w.ns.big ORDER BY id")
        assert len(info.endpoints) == 1 and is_segment(info.endpoints[0])
        client_b = fl.connect(f"grpc://127.0.0.1:{b.port}")
        got = client_b.do_get(info.endpoints[0].ticket, options_a).read_all()
        assert got.column("id").to_pylist() == list(range(4000))


def test_a_replica_waits_for_another_ones_spool_at_most_the_time_limit(lake: Any, server: Any) -> None:
    from lake_platform.flight.spool_follow import written_segments
    from lake_platform.query.errors import QueryTimeout

    gate = Gate(server.engine)
    settings = SpoolSettings(min_rows=0, min_bytes=0, segment_bytes=4 << 10, ttl=600, max_jobs=1, timeout=0)
    spooler = Spooler(server.spooler.area, server.spooler.sealer, settings, gate, server.fragment_sizes)
    planned = server.engine.plan("SELECT id, s FROM w.ns.big", load_snapshot(lake[1].store).project("p"))
    job = spooler.start(ALICE, planned, ordered=False)
    try:  # as another replica sees it: the job's folder, no done.json while it is held
        with pytest.raises(QueryTimeout, match="not finished within"):
            list(written_segments(spooler.area, "p", job.id, None, timeout=0.5))
    finally:
        gate.released.set()
    assert job.done.wait(30) and job.state == "done"
    assert list(written_segments(spooler.area, "p", job.id, None, timeout=0.5)) == job.closed
