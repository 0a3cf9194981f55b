"""The endpoint through the clients analysts use: the ADBC Flight SQL driver (DB-API), pandas, polars."""

from __future__ import annotations

import warnings

import pyarrow as pa
import pytest

from lake_platform.flight import schemas
from lake_platform_tests.flight.conftest import Running

pytestmark = pytest.mark.filterwarnings("ignore:Cannot disable autocommit")


def test_connect_query_and_fetch(running: Running) -> None:
    with running.adbc() as conn, conn.cursor() as cur:
        cur.execute("SELECT count(*) AS n, min(id) AS lo, max(id) AS hi FROM w.ns.t")
        table = cur.fetch_arrow_table()
        assert table.to_pylist() == [{"n": 1000, "lo": 0, "hi": 999}]
        assert table.schema.field("n").nullable is False
        cur.execute("SELECT id, s FROM w.ns.t WHERE id < 3 ORDER BY id")
        assert cur.fetch_arrow_table().to_pylist() == [{"id": i, "s": f"row-{i}"} for i in range(3)]
        # the same text again reuses the prepared handle
        cur.execute("SELECT id, s FROM w.ns.t WHERE id < 3 ORDER BY id")
        assert cur.fetch_arrow_table().num_rows == 3


def test_bound_parameters(running: Running) -> None:
    with running.adbc() as conn, conn.cursor() as cur:
        cur.execute("SELECT id, s FROM w.ns.t WHERE id = ?", (7,))
        assert cur.fetch_arrow_table().to_pylist() == [{"id": 7, "s": "row-7"}]
        cur.execute("SELECT id FROM w.ns.t WHERE id BETWEEN ? AND ? ORDER BY id", (10, 12))
        assert cur.fetch_arrow_table().column("id").to_pylist() == [10, 11, 12]
        cur.execute("SELECT id FROM w.ns.t WHERE s = $1", ("row-42",))
        assert cur.fetch_arrow_table().column("id").to_pylist() == [42]
        # rebinding the same statement
        cur.execute("SELECT id FROM w.ns.t WHERE s = $1", ("row-43",))
        assert cur.fetch_arrow_table().column("id").to_pylist() == [43]


def test_bound_values_of_the_wrong_type_are_invalid_and_say_why(running: Running) -> None:
    import adbc_driver_manager

    with running.adbc() as conn, conn.cursor() as cur:
        for value, why in (
            ("abc", "Cannot cast string 'abc' to value of Int64 type"),
            ([1, 2], "Cannot infer common argument type for comparison operation Int64 = List"),
        ):
            with pytest.raises(adbc_driver_manager.ProgrammingError, match="INVALID_ARGUMENT") as raised:
                cur.execute("SELECT id FROM w.ns.t WHERE id = ?", (value,))
                cur.fetch_arrow_table()
            assert why in str(raised.value) and "simplify_expressions" not in str(raised.value)
        cur.execute("SELECT id FROM w.ns.t WHERE id = ?", (7,))  # the connection still works
        assert cur.fetch_arrow_table().column("id").to_pylist() == [7]


def test_a_placeholder_number_past_the_limit_is_refused_and_the_server_serves_on(running: Running) -> None:
    """``$99999999999999999999`` made CreatePreparedStatement build a parameter schema of that
    many fields: the call never answered and the server grew until memory ran out."""
    import adbc_driver_manager

    from lake_platform.query.sql import MAX_PARAMETERS

    with running.adbc() as conn, conn.cursor() as cur:
        for sql in (
            f"SELECT ${MAX_PARAMETERS + 1} AS v",
            "SELECT $99999999999999999999 AS v",
            "SELECT $" + "9" * 5000,
        ):
            with pytest.raises(adbc_driver_manager.ProgrammingError, match="INVALID_ARGUMENT") as raised:
                cur.adbc_prepare(sql)
            assert f"at most {MAX_PARAMETERS} parameters" in str(raised.value)
        cur.execute("SELECT $2 AS v", (None, 7))
        assert cur.fetch_arrow_table().to_pylist() == [{"v": 7}]


#: One value larger than ADBC's default receive limit (16 MiB): no split makes its message smaller.
WIDE_ROW = "SELECT repeat('x', 20000000) AS v"
#: The ADBC option that raises the client's receive limit (docs/flight-sql.md, "Large values").
MAX_MSG_SIZE = "adbc.flight.sql.client_option.with_max_msg_size"


def test_a_row_past_adbcs_receive_limit_reads_with_its_option(running: Running) -> None:
    import adbc_driver_manager
    import pandas as pd

    from lake_platform_tests.flight.conftest import query

    client, options = running.client()
    assert len(query(client, options, WIDE_ROW).column("v")[0].as_py()) == 20_000_000  # pyarrow: no limit
    with running.adbc() as conn, conn.cursor() as cur:
        with pytest.raises(adbc_driver_manager.Error, match="received message larger than max"):
            cur.execute(WIDE_ROW)
            cur.fetch_arrow_table()
        cur.execute("SELECT 1 AS v")  # the connection and the server serve on
        assert cur.fetchall() == [(1,)]
    with running.adbc(**{MAX_MSG_SIZE: str(64 << 20)}) as conn:
        with conn.cursor() as cur:
            cur.execute(WIDE_ROW)
            assert len(cur.fetch_arrow_table().column("v")[0].as_py()) == 20_000_000
        assert pd.read_sql(WIDE_ROW, conn)["v"].str.len().tolist() == [20_000_000]


def test_nested_namespace_and_cte(running: Running) -> None:
    with running.adbc() as conn, conn.cursor() as cur:
        cur.execute('WITH a AS (SELECT id FROM w."ns.sub".u) SELECT sum(id) AS total FROM a')
        assert cur.fetch_arrow_table().to_pylist() == [{"total": 6}]
        cur.execute("SELECT u.id FROM w.ns.sub.u AS u WHERE w.ns.sub.u.id > 1 ORDER BY 1")  # no quotes needed
        assert cur.fetch_arrow_table().column("id").to_pylist() == [2, 3]
        cur.execute("EXPLAIN SELECT * FROM w.ns.t")
        assert cur.fetch_arrow_table().num_rows >= 1


def test_schema_is_the_same_everywhere(running: Running) -> None:
    """FlightInfo.schema == GetSchema == the DoGet stream, for aggregates over Lance too."""
    import pyarrow.flight as fl

    from lake_platform.flight import proto

    client, options = running.client()
    for sql in [
        "SELECT min(id), max(id), count(*) FROM w.ns.t",
        "SELECT * FROM w.ns.multi",
        "SELECT s, sum(x) FROM w.ns.t GROUP BY s",
        'SELECT id + 1 AS k, NULL AS nothing FROM w."ns.sub".u',
        "SELECT max(id) FROM w.ns.t WHERE id > 5000",
    ]:
        descriptor = fl.FlightDescriptor.for_command(proto.pack(proto.CommandStatementQuery(query=sql)))
        info = client.get_flight_info(descriptor, options)
        schema = client.get_schema(descriptor, options).schema
        stream = client.do_get(info.endpoints[0].ticket, options).read_all()
        assert info.schema == schema == stream.schema, sql


def test_get_objects_at_every_depth(running: Running) -> None:
    with running.adbc() as conn:
        catalogs = conn.adbc_get_objects(depth="catalogs").read_all().to_pylist()
        assert [c["catalog_name"] for c in catalogs] == ["w"]
        dbs = conn.adbc_get_objects(depth="db_schemas").read_all().to_pylist()
        assert sorted(s["db_schema_name"] for s in dbs[0]["catalog_db_schemas"]) == ["ns", "ns.sub"]
        tables = conn.adbc_get_objects(depth="tables").read_all().to_pylist()
        found = {
            (s["db_schema_name"], t["table_name"])
            for s in tables[0]["catalog_db_schemas"]
            for t in s["db_schema_tables"] or []
        }
        assert found == {("ns", "t"), ("ns", "multi"), ("ns.sub", "u")}
        everything = conn.adbc_get_objects(depth="all").read_all().to_pylist()
        ns = next(s for s in everything[0]["catalog_db_schemas"] if s["db_schema_name"] == "ns")
        t = next(x for x in ns["db_schema_tables"] if x["table_name"] == "t")
        assert [c["column_name"] for c in t["table_columns"]] == ["id", "s", "x"]
        filtered = conn.adbc_get_objects(depth="tables", table_name_filter="mul%").read_all().to_pylist()
        names = [
            t["table_name"] for s in filtered[0]["catalog_db_schemas"] for t in s["db_schema_tables"] or []
        ]
        assert names == ["multi"]


def test_table_schema_info_and_types(running: Running) -> None:
    with running.adbc() as conn:
        schema = conn.adbc_get_table_schema("t", catalog_filter="w", db_schema_filter="ns")
        assert schema.names == ["id", "s", "x"] and schema.field("id").type == pa.int64()
        info = conn.adbc_get_info()
        assert info["vendor_name"] == "lake_platform Flight SQL"
        assert info["vendor_arrow_version"] == pa.__version__
        assert conn.adbc_get_table_types() == ["TABLE"]


def test_pandas_and_polars(running: Running) -> None:
    import pandas as pd
    import polars as pl

    with running.adbc() as conn:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)  # pandas asks for SQLAlchemy
            frame = pd.read_sql("SELECT id, s FROM w.ns.t WHERE id < 5 ORDER BY id", conn)
        assert list(frame["id"]) == [0, 1, 2, 3, 4]
        pframe = pl.read_database("SELECT id, x FROM w.ns.t WHERE id >= 995 ORDER BY id", connection=conn)
        assert pframe["id"].to_list() == [995, 996, 997, 998, 999]


def test_service_token_as_bearer(running: Running) -> None:
    from lake_platform_tests.flight.conftest import SVC_TOKEN

    with running.adbc_bearer(SVC_TOKEN) as conn, conn.cursor() as cur:
        cur.execute("SELECT count(*) AS n FROM w.ns.t")
        assert cur.fetch_arrow_table().to_pylist() == [{"n": 1000}]


def test_metadata_schemas_are_exact(running: Running) -> None:
    import pyarrow.flight as fl

    from lake_platform.flight import proto

    client, options = running.client()
    cases = [
        (proto.CommandGetCatalogs(), schemas.CATALOGS),
        (proto.CommandGetDbSchemas(), schemas.DB_SCHEMAS),
        (proto.CommandGetTables(), schemas.TABLES),
        (proto.CommandGetTables(include_schema=True), schemas.TABLES_WITH_SCHEMA),
        (proto.CommandGetTableTypes(), schemas.TABLE_TYPES),
        (proto.CommandGetSqlInfo(), schemas.SQL_INFO),
        (proto.CommandGetPrimaryKeys(table="t"), schemas.PRIMARY_KEYS),
        (proto.CommandGetExportedKeys(table="t"), schemas.FOREIGN_KEYS),
        (proto.CommandGetImportedKeys(table="t"), schemas.FOREIGN_KEYS),
        (proto.CommandGetCrossReference(pk_table="t", fk_table="u"), schemas.FOREIGN_KEYS),
    ]
    for command, expected in cases:
        descriptor = fl.FlightDescriptor.for_command(proto.pack(command))
        info = client.get_flight_info(descriptor, options)
        data = client.do_get(info.endpoints[0].ticket, options).read_all()
        assert info.schema.equals(expected) and data.schema.equals(expected), type(command).__name__
    keys = client.do_get(
        client.get_flight_info(
            fl.FlightDescriptor.for_command(proto.pack(proto.CommandGetPrimaryKeys(table="t"))), options
        )
        .endpoints[0]
        .ticket,
        options,
    ).read_all()
    assert keys.num_rows == 0


def test_get_tables_filters(running: Running) -> None:
    import pyarrow.flight as fl

    from lake_platform.flight import proto

    client, options = running.client()

    def tables(**kw: object) -> list[tuple[str, str, str]]:
        descriptor = fl.FlightDescriptor.for_command(proto.pack(proto.CommandGetTables(**kw)))
        info = client.get_flight_info(descriptor, options)
        rows = client.do_get(info.endpoints[0].ticket, options).read_all().to_pylist()
        return [(r["catalog_name"], r["db_schema_name"], r["table_name"]) for r in rows]

    assert tables() == [("w", "ns", "multi"), ("w", "ns", "t"), ("w", "ns.sub", "u")]
    assert tables(db_schema_filter_pattern="ns.%") == [("w", "ns.sub", "u")]
    assert tables(table_name_filter_pattern="_") == [("w", "ns", "t"), ("w", "ns.sub", "u")]
    assert tables(catalog="nope") == []
    assert tables(table_types=["VIEW"]) == []
    assert tables(table_types=["TABLE"], table_name_filter_pattern="t") == [("w", "ns", "t")]
    with_schema = client.do_get(
        client.get_flight_info(
            fl.FlightDescriptor.for_command(
                proto.pack(proto.CommandGetTables(table_name_filter_pattern="u", include_schema=True))
            ),
            options,
        )
        .endpoints[0]
        .ticket,
        options,
    ).read_all()
    ipc = with_schema.column("table_schema")[0].as_py()
    assert pa.ipc.read_schema(pa.py_buffer(ipc)).names == ["id"]


def test_sql_info_all_and_selected(running: Running) -> None:
    import pyarrow.flight as fl

    from lake_platform.flight import proto

    client, options = running.client()

    def info(ids: list[int]) -> dict[int, object]:
        descriptor = fl.FlightDescriptor.for_command(proto.pack(proto.CommandGetSqlInfo(info=ids)))
        fi = client.get_flight_info(descriptor, options)
        rows = client.do_get(fi.endpoints[0].ticket, options).read_all().to_pylist()
        return {r["info_name"]: r["value"] for r in rows}

    everything = info([])
    assert all(i < 10_000 for i in everything)
    assert everything[3] is True and everything[8] == 0 and everything[504] == '"'
    assert all(i in everything for i in (508, 509, 510, 511, 512, 517))
    assert info([8, 0]) == {8: 0, 0: "lake_platform Flight SQL"}
    assert info([99_999]) == {}


def test_large_result_streams_in_small_messages(running: Running) -> None:
    """Batches above the message cap are split, and the client reads them one by one. The wide
    values are stored, not built by the query (building them is capped: ``value_copies``)."""
    wide = pa.table({"id": pa.array(range(3000), pa.int64()), "big": ["x" * 4000] * 3000})
    running.catalog.tables.create_table("p.w.ns.wide", wide.to_reader())
    with running.adbc() as conn, conn.cursor() as cur:
        cur.execute("SELECT id, big FROM w.ns.wide")
        reader = cur.fetch_record_batch()
        rows = 0
        biggest = 0
        for batch in reader:
            rows += batch.num_rows
            biggest = max(biggest, batch.nbytes)
        assert rows == 3000
        assert wide.nbytes > running.server.settings.max_message_bytes >= biggest
