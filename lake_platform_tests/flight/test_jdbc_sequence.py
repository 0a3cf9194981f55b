"""The Arrow Flight SQL JDBC driver's call sequence, driven without the jar: what it sends at
connect and for ``DatabaseMetaData`` (SqlInfo, catalogs, schemas, table types, tables, columns,
keys, type info) and for ``Statement.executeQuery`` (a prepared statement, every endpoint read,
the statement closed). Each answer must have the schema FlightSql.proto gives it, advertised by
GetFlightInfo and streamed by DoGet alike, since the driver reads columns by position."""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pyarrow.flight as fl

from lake_platform.flight import proto, schemas
from lake_platform.query import columns
from lake_platform_tests.flight.conftest import Running


def command(
    client: fl.FlightClient, options: fl.FlightCallOptions, message: Any, expected: pa.Schema
) -> pa.Table:
    """GetFlightInfo of a metadata command, then DoGet of each endpoint, as the driver does."""
    info = client.get_flight_info(fl.FlightDescriptor.for_command(proto.pack(message)), options)
    assert info.schema.equals(expected), (type(message).__name__, info.schema)
    parts = [client.do_get(e.ticket, options).read_all() for e in info.endpoints]
    for part in parts:
        assert part.schema.equals(expected)
    return pa.concat_tables(parts)


def test_connect_and_database_metadata(running: Running) -> None:
    client, options = running.client()  # Handshake with Basic credentials, then the bearer
    info = command(client, options, proto.CommandGetSqlInfo(), schemas.SQL_INFO)
    values = dict(zip(info.column("info_name").to_pylist(), info.column("value").to_pylist(), strict=True))
    # What the driver's DatabaseMetaData reads, each of the kind the proto gives it.
    assert values[0] == "lake_platform Flight SQL" and isinstance(values[1], str)
    assert values[3] is True  # read-only: the driver answers isReadOnly() from it
    assert values[504] == '"' and values[503] == 3 and values[505] == 0
    assert "select" not in values[508] and "explain" in values[508]  # SQL-92 keywords excluded
    assert all(isinstance(v, list) and v for v in (values[509], values[510], values[511], values[512]))
    assert isinstance(values[517], list) and values[513] == "\\"
    assert all(i < 10_000 for i in values)  # the driver fails on an id outside its enum

    catalogs = command(client, options, proto.CommandGetCatalogs(), schemas.CATALOGS)
    assert catalogs.column("catalog_name").to_pylist() == ["w"]  # alice's project only
    found = command(
        client,
        options,
        proto.CommandGetDbSchemas(catalog="w", db_schema_filter_pattern="%"),
        schemas.DB_SCHEMAS,
    )
    assert set(found.column("db_schema_name").to_pylist()) == {"ns", "ns.sub"}
    types = command(client, options, proto.CommandGetTableTypes(), schemas.TABLE_TYPES)
    assert "TABLE" in types.column("table_type").to_pylist()
    tables = command(
        client,
        options,
        proto.CommandGetTables(
            catalog="w", db_schema_filter_pattern="ns", table_name_filter_pattern="%", table_types=["TABLE"]
        ),
        schemas.TABLES,
    )
    assert sorted(tables.column("table_name").to_pylist()) == ["multi", "t"]

    # getColumns: GetTables with schemas; every column typed, and its type among getTypeInfo's.
    with_schema = command(
        client,
        options,
        proto.CommandGetTables(
            catalog="w", db_schema_filter_pattern="ns", table_name_filter_pattern="t", include_schema=True
        ),
        schemas.TABLES_WITH_SCHEMA,
    )
    [raw] = with_schema.column("table_schema").to_pylist()
    table_schema = pa.ipc.read_schema(pa.py_buffer(raw))
    type_names = {f.name: f.metadata[columns.TYPE_NAME.encode()].decode() for f in table_schema}
    assert type_names == {"id": "BIGINT", "s": "VARCHAR", "x": "DOUBLE"}
    type_info = command(client, options, proto.CommandGetXdbcTypeInfo(), schemas.XDBC_TYPE_INFO)
    assert set(type_names.values()) <= set(type_info.column("type_name").to_pylist())
    bigint = command(client, options, proto.CommandGetXdbcTypeInfo(data_type=-5), schemas.XDBC_TYPE_INFO)
    assert bigint.column("type_name").to_pylist() == ["BIGINT", "BIGINT UNSIGNED"]

    # getPrimaryKeys / getImportedKeys / getExportedKeys / getCrossReference: none, well-formed.
    key = {"catalog": "w", "db_schema": "ns", "table": "t"}
    assert command(client, options, proto.CommandGetPrimaryKeys(**key), schemas.PRIMARY_KEYS).num_rows == 0
    assert command(client, options, proto.CommandGetImportedKeys(**key), schemas.FOREIGN_KEYS).num_rows == 0
    assert command(client, options, proto.CommandGetExportedKeys(**key), schemas.FOREIGN_KEYS).num_rows == 0
    cross = proto.CommandGetCrossReference(pk_catalog="w", pk_db_schema="ns", pk_table="t", fk_table="multi")
    assert command(client, options, cross, schemas.FOREIGN_KEYS).num_rows == 0


def test_execute_query_reads_every_endpoint_and_closes_its_statement(running: Running) -> None:
    """``Statement.executeQuery``: the driver prepares even a plain statement, runs its handle,
    reads every endpoint and closes the statement when the result set closes."""
    client, options = running.client()
    request = proto.ActionCreatePreparedStatementRequest(query="SELECT id FROM w.ns.multi")
    [result] = list(client.do_action(fl.Action("CreatePreparedStatement", proto.pack(request)), options))
    _, payload = proto.unpack_any(result.body.to_pybytes())
    prepared = proto.parse(proto.ActionCreatePreparedStatementResult, payload)
    handle = prepared.prepared_statement_handle
    descriptor = fl.FlightDescriptor.for_command(
        proto.pack(proto.CommandPreparedStatementQuery(prepared_statement_handle=handle))
    )
    info = client.get_flight_info(descriptor, options)
    ids = [
        i
        for e in info.endpoints
        for i in client.do_get(e.ticket, options).read_all().column("id").to_pylist()
    ]
    assert sorted(ids) == list(range(500)) and info.total_records in (-1, 500)
    close = proto.ActionClosePreparedStatementRequest(prepared_statement_handle=handle)
    assert list(client.do_action(fl.Action("ClosePreparedStatement", proto.pack(close)), options)) == []
