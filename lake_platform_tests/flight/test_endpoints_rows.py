"""No silent partial answers, and parts cut by rows: under the default settings every result
is one endpoint holding the whole answer (what a client reading only the first endpoint, like
flightsql-dbapi or an older JDBC driver, reads); a call that asks (``x-lake-endpoints: many``,
ADBC's ``adbc.flight.sql.rpc.call_header.x-lake-endpoints``) gets ``ceil(rows / target)`` parts
even of a table written by one ingest (one fragment), each exact and pinned.

``p.w.ns.million``: 1,000,000 rows in one fragment (``id`` 0..999999, ``x`` = id / 2); the
server's target is 200,000 rows per endpoint, at most 8.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.flight as fl
import pytest

from lake_platform.catalog.catalog import Catalog
from lake_platform.settings import LakeSettings
from lake_platform_tests.flight.conftest import PASSWORDS, build_catalog, built_lake, login, plan, serving

ROWS = 1_000_000
TARGET = {"endpoint_target_rows": 200_000, "max_endpoints": 8}
ID_SUM = ROWS * (ROWS - 1) // 2
X_SUM = ID_SUM / 2
MANY = "adbc.flight.sql.rpc.call_header.x-lake-endpoints"
SPOOL = "adbc.flight.sql.rpc.call_header.x-lake-spool"


def build(home: Path) -> tuple[LakeSettings, Catalog]:
    settings, catalog = build_catalog(home)
    ids = np.arange(ROWS, dtype=np.int64)
    table = pa.table({"id": pa.array(ids), "x": pa.array(ids / 2)})
    catalog.tables.create_table("p.w.ns.million", table.to_reader())
    return settings, catalog


@pytest.fixture(scope="module")
def lake(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[LakeSettings, Catalog]]:
    yield from built_lake(tmp_path_factory, build, "rows")


@pytest.fixture(scope="module")
def server(lake: tuple[LakeSettings, Catalog]) -> Iterator[Any]:
    with serving(*lake, **TARGET) as running:
        yield running


@pytest.fixture(scope="module")
def alice(server: Any) -> tuple[fl.FlightClient, fl.FlightCallOptions]:
    return login(f"grpc://127.0.0.1:{server.port}")


def asking(options: fl.FlightCallOptions, value: str = "many") -> fl.FlightCallOptions:
    return fl.FlightCallOptions(headers=[*options.headers, (b"x-lake-endpoints", value.encode())])


def sums(table: pa.Table) -> tuple[int, int, float]:
    return table.num_rows, pc.sum(table.column("id")).as_py(), pc.sum(table.column("x")).as_py()


def adbc(server: Any, **options: str) -> Any:
    import adbc_driver_flightsql.dbapi as fsql

    kwargs = {"username": "alice", "password": PASSWORDS["alice"], **options}
    return fsql.connect(f"grpc://127.0.0.1:{server.port}", db_kwargs=kwargs, autocommit=True)


def test_the_table_is_one_fragment(lake: tuple[LakeSettings, Catalog], server: Any) -> None:
    from lake_platform.query.snapshot import load_snapshot

    planned = server.engine.plan("SELECT * FROM w.ns.million", load_snapshot(lake[1].store).project("p"))
    assert [f.rows for f in server.fragment_sizes(planned.refs[0])] == [ROWS]


def test_by_default_the_first_endpoint_is_the_whole_answer(alice: Any) -> None:
    client, options = alice
    info = plan(client, options, "SELECT * FROM w.ns.million")
    assert len(info.endpoints) == 1
    first = client.do_get(info.endpoints[0].ticket, options).read_all()  # all a first-endpoint client reads
    assert sums(first) == (ROWS, ID_SUM, X_SUM)


def test_adbc_pandas_and_polars_get_the_whole_answer_by_default(server: Any) -> None:
    import polars as pl

    with adbc(server) as conn, conn.cursor() as cur:
        cur.execute("SELECT * FROM w.ns.million")
        assert sums(cur.fetch_arrow_table()) == (ROWS, ID_SUM, X_SUM)
        cur.execute("SELECT id, x FROM w.ns.million")
        frame = cur.fetch_df()
        assert (len(frame), int(frame["id"].sum()), float(frame["x"].sum())) == (ROWS, ID_SUM, X_SUM)
        polars = pl.read_database("SELECT id, x FROM w.ns.million", connection=conn)
        assert (polars.height, polars["id"].sum(), polars["x"].sum()) == (ROWS, ID_SUM, X_SUM)


def test_asking_splits_one_fragment_into_ceil_rows_over_target_parts(server: Any, alice: Any) -> None:
    client, options = alice
    served = len(server.parts)
    info = plan(client, asking(options), "SELECT * FROM w.ns.million")
    assert len(info.endpoints) == -(-ROWS // TARGET["endpoint_target_rows"]) == 5
    parts = [client.do_get(e.ticket, options).read_all() for e in info.endpoints]
    assert len(server.parts) - served == 5  # each DoGet planned one part
    ranges = [(pc.min(p.column("id")).as_py(), pc.max(p.column("id")).as_py(), p.num_rows) for p in parts]
    assert ranges == [(k * 200_000, k * 200_000 + 199_999, 200_000) for k in range(5)]
    assert all(p.schema == info.schema for p in parts)
    assert sums(pa.concat_tables(parts)) == (ROWS, ID_SUM, X_SUM)


def test_a_filtered_split_is_exact(alice: Any) -> None:
    client, options = alice
    info = plan(client, asking(options), "SELECT id, x * 2 AS y FROM w.ns.million WHERE id % 3 = 1")
    assert len(info.endpoints) == 5
    got = pa.concat_tables(client.do_get(e.ticket, options).read_all() for e in info.endpoints)
    expected = np.arange(1, ROWS, 3)
    assert got.num_rows == len(expected)
    assert pc.sum(got.column("id")).as_py() == int(expected.sum())
    assert pc.sum(got.column("y")).as_py() == float(expected.sum())


def test_adbc_asking_for_endpoints_or_spooling_reads_exactly(server: Any) -> None:
    served = len(server.parts)
    with adbc(server, **{MANY: "many"}) as conn, conn.cursor() as cur:
        cur.execute("SELECT id, x FROM w.ns.million")
        assert sums(cur.fetch_arrow_table()) == (ROWS, ID_SUM, X_SUM)
    assert len(server.parts) - served == 5  # read as five parts
    with adbc(server, **{SPOOL: "true"}) as conn, conn.cursor() as cur:
        cur.execute("SELECT id, x FROM w.ns.million")
        assert sums(cur.fetch_arrow_table()) == (ROWS, ID_SUM, X_SUM)


def test_a_spooled_answer_asked_for_is_one_endpoint_per_segment(alice: Any) -> None:
    client, options = alice
    spool = fl.FlightCallOptions(headers=[*options.headers, (b"x-lake-spool", b"true")])
    info = plan(client, spool, "SELECT id, x FROM w.ns.million")
    assert len(info.endpoints) > 1 and info.total_records == ROWS
    got = pa.concat_tables(client.do_get(e.ticket, options).read_all() for e in info.endpoints)
    assert sums(got) == (ROWS, ID_SUM, X_SUM)


def test_a_server_set_to_many_splits_unless_the_call_says_one(lake: tuple[LakeSettings, Catalog]) -> None:
    with serving(*lake, endpoints="many", **TARGET) as many:
        client, options = login(f"grpc://127.0.0.1:{many.port}")
        assert len(plan(client, options, "SELECT id FROM w.ns.million").endpoints) == 5
        info = plan(client, asking(options, "one"), "SELECT id FROM w.ns.million")
        assert len(info.endpoints) == 1
        assert client.do_get(info.endpoints[0].ticket, options).read_all().num_rows == ROWS


def test_an_unknown_endpoints_header_is_refused(alice: Any) -> None:
    client, options = alice
    with pytest.raises(pa.ArrowInvalid, match="x-lake-endpoints must be 'one' or 'many'"):
        plan(client, asking(options, "all"), "SELECT id FROM w.ns.million")


def test_cut_parts_skip_deleted_rows_exactly(lake: tuple[LakeSettings, Catalog]) -> None:
    """Offsets count live rows: the parts cutting a fragment with deletions tile what is left."""
    from lake_platform_tests.flight.conftest import t_rows

    _, catalog = lake
    catalog.tables.create_table("p.w.ns.holey", t_rows(10_000).to_reader())
    catalog.tables.delete_rows("p.w.ns.holey", "id % 7 = 0 OR (id > 3000 AND id < 5000)")
    live = [i for i in range(10_000) if i % 7 and not 3000 < i < 5000]
    with serving(*lake, endpoint_target_rows=2000, max_endpoints=8) as server:
        client, options = login(f"grpc://127.0.0.1:{server.port}")
        info = plan(client, asking(options), "SELECT id, s FROM w.ns.holey")
        assert len(info.endpoints) == -(-len(live) // 2000)
        parts = [client.do_get(e.ticket, options).read_all().column("id").to_pylist() for e in info.endpoints]
    assert all(parts) and sorted(i for p in parts for i in p) == live
