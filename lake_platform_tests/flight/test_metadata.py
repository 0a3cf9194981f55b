"""Typed columns through stock clients: Flight SQL column metadata on result schemas
(GetFlightInfo, GetSchema, a prepared statement's dataset schema, DoGet) and on GetTables'
table schemas, which ADBC's adbc_get_objects reports as xdbc_type_name."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.flight as fl
import pytest

from lake_platform.flight import proto
from lake_platform.query import columns
from lake_platform_tests.flight.conftest import Running

JOIN = (
    'SELECT t.id, t.s, count(*) AS n, u.id AS uid FROM w.ns.t t JOIN w."ns.sub".u u ON t.id = u.id '
    "GROUP BY 1, 2, 4"
)


def _meta(field: object) -> dict[str, str]:
    return {k.decode(): v.decode() for k, v in (field.metadata or {}).items()}  # type: ignore[attr-defined]


def test_result_columns_carry_types_and_their_tables(running: Running) -> None:
    with running.adbc() as conn, conn.cursor() as cur:
        cur.execute(JOIN)
        table = cur.fetch_arrow_table()  # DoGet's batches match the advertised schema exactly
        executed = cur.adbc_execute_schema(JOIN)  # GetSchema
    assert table.num_rows == 3
    client, options = running.client()
    request = proto.pack(proto.ActionCreatePreparedStatementRequest(query=JOIN))
    result = list(client.do_action(fl.Action("CreatePreparedStatement", request), options))[0]
    _, payload = proto.unpack_any(result.body.to_pybytes())
    created = proto.parse(proto.ActionCreatePreparedStatementResult, payload)
    prepared = pa.ipc.read_schema(pa.py_buffer(created.dataset_schema))  # its dataset schema
    for schema in (table.schema, executed, prepared):
        ident, text, count, uid = (_meta(f) for f in schema)
        assert (ident[columns.CATALOG_NAME], ident[columns.SCHEMA_NAME], ident[columns.TABLE_NAME]) == (
            "w",
            "ns",
            "t",
        )
        assert ident[columns.TYPE_NAME] == "BIGINT" and ident[columns.PRECISION] == "19"
        assert text[columns.TYPE_NAME] == "VARCHAR" and text[columns.IS_CASE_SENSITIVE] == "1"
        assert columns.TABLE_NAME not in count and count[columns.TYPE_NAME] == "BIGINT"
        assert (uid[columns.SCHEMA_NAME], uid[columns.TABLE_NAME]) == ("ns.sub", "u")
        assert all(m[columns.IS_READ_ONLY] == "1" for m in (ident, text, count, uid))


def test_flight_info_advertises_the_schema_doget_streams(running: Running) -> None:
    client, options = running.client()
    descriptor = fl.FlightDescriptor.for_command(
        proto.pack(proto.CommandStatementQuery(query="SELECT id, x FROM w.ns.t"))
    )
    info = client.get_flight_info(descriptor, options)
    streamed = client.do_get(info.endpoints[0].ticket, options).read_all()
    assert streamed.schema.equals(info.schema, check_metadata=True)
    assert _meta(info.schema.field("x"))[columns.TYPE_NAME] == "DOUBLE"


def test_get_objects_reports_sql_type_names(running: Running) -> None:
    with running.adbc() as conn:
        objects = conn.adbc_get_objects(depth="all", catalog_filter="w", table_name_filter="t").read_all()
        schema = conn.adbc_get_table_schema("t", catalog_filter="w", db_schema_filter="ns")
    tables = [t for c in objects.to_pylist() for s in c["catalog_db_schemas"] for t in s["db_schema_tables"]]
    cols = {c["column_name"]: c for c in tables[0]["table_columns"]}
    assert {n: c["xdbc_type_name"] for n, c in cols.items()} == {
        "id": "BIGINT",
        "s": "VARCHAR",
        "x": "DOUBLE",
    }
    assert cols["id"]["xdbc_scope_table"] == "t" and cols["id"]["xdbc_scope_schema"] == "ns"
    assert _meta(schema.field("s"))[columns.TYPE_NAME] == "VARCHAR"


@pytest.mark.timeout(120)
def test_like_patterns_cost_at_most_pattern_times_name(running: Running) -> None:
    """A LIKE filter of GetDbSchemas/GetTables is the caller's text: one with hundreds of ``%``
    used to backtrack (a regular expression) for hours, holding the interpreter's lock, so every
    other tenant's calls stopped behind it. Now it answers, and still matches as LIKE does."""
    client, options = running.client()

    def tables(schema: str | None, table: str | None) -> list[str]:
        cmd = proto.CommandGetTables(db_schema_filter_pattern=schema, table_name_filter_pattern=table)
        info = client.get_flight_info(fl.FlightDescriptor.for_command(proto.pack(cmd)), options)
        rows = client.do_get(info.endpoints[0].ticket, options).read_all().to_pylist()
        return sorted(f"{r['db_schema_name']}.{r['table_name']}" for r in rows)

    def schemas(pattern: str) -> list[str]:
        cmd = proto.CommandGetDbSchemas(db_schema_filter_pattern=pattern)
        info = client.get_flight_info(fl.FlightDescriptor.for_command(proto.pack(cmd)), options)
        return sorted(
            r["db_schema_name"]
            for r in client.do_get(info.endpoints[0].ticket, options).read_all().to_pylist()
        )

    hostile = ["%" * 2000 + "#", "%_" * 1000 + "#", "%t" * 500 + "#", "%" + "_%" * 1000]
    for pattern in hostile:
        assert tables(None, pattern) == [] and tables(pattern, None) == []
        assert schemas(pattern) == []
    assert tables(None, "%" * 2000 + "t") == ["ns.t"]
    assert tables("%" * 500 + "s%%", "%u%l%t%") == ["ns.multi"]
    assert schemas("%%.%_%%") == ["ns.sub"]
    with running.adbc() as conn:  # the same filters as a stock client sends them
        objects = conn.adbc_get_objects(depth="tables", table_name_filter="%" * 2000 + "#").read_all()
        assert [s["db_schema_tables"] for c in objects.to_pylist() for s in c["catalog_db_schemas"]] == [
            [],
            [],
        ]
