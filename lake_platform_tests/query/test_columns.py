"""Result columns described for SQL clients: Flight SQL column metadata, and which table each
output column is read from, found in DataFusion's logical plan."""

from __future__ import annotations

import pyarrow as pa
from datafusion import SessionContext

from lake_platform.query import columns
from lake_platform.query.columns import Origin


def _ctx() -> SessionContext:
    ctx = SessionContext()
    orders = pa.record_batch({"id": pa.array([1], pa.int64()), "v": pa.array([1.5]), "s": pa.array(["a"])})
    ctx.register_record_batches("orders", [[orders]])
    ctx.register_record_batches("items", [[pa.record_batch({"oid": pa.array([1], pa.int64())})]])
    return ctx


def _origins(sql: str) -> list[Origin | None] | None:
    return columns.origins(_ctx().sql(sql), "w", "ns")


ORDERS = Origin("w", "ns", "orders")
ITEMS = Origin("w", "ns", "items")


def test_a_plain_column_names_its_table_and_a_computed_one_none() -> None:
    assert _origins("SELECT * FROM orders") == [ORDERS] * 3
    assert _origins(
        "SELECT o.id AS key, v * 2 AS twice, s FROM orders o WHERE id > 0 ORDER BY 1 LIMIT 3"
    ) == [
        ORDERS,
        None,
        ORDERS,
    ]


def test_origins_follow_joins_grouping_keys_and_ctes() -> None:
    assert _origins("SELECT o.id, i.oid FROM orders o JOIN items i ON o.id = i.oid") == [ORDERS, ITEMS]
    assert _origins("SELECT s, count(*) AS n FROM orders GROUP BY s") == [ORDERS, None]
    assert _origins("WITH x AS (SELECT id FROM orders) SELECT id FROM x") == [ORDERS]
    assert _origins("SELECT id FROM orders UNION ALL SELECT oid FROM items") == [None]


def test_a_time_travel_read_names_the_table_itself() -> None:
    ctx = SessionContext()
    ctx.register_record_batches("orders@v3", [[pa.record_batch({"id": pa.array([1], pa.int64())})]])
    assert columns.origins(ctx.sql('SELECT id FROM "orders@v3"'), "w", "ns") == [ORDERS]


def test_metadata_follows_the_spec_keys_and_encodings() -> None:
    meta = columns.column_metadata(pa.decimal128(12, 3), ORDERS)
    assert meta == {
        "ARROW:FLIGHT:SQL:CATALOG_NAME": "w",
        "ARROW:FLIGHT:SQL:SCHEMA_NAME": "ns",
        "ARROW:FLIGHT:SQL:TABLE_NAME": "orders",
        "ARROW:FLIGHT:SQL:TYPE_NAME": "DECIMAL",
        "ARROW:FLIGHT:SQL:PRECISION": "12",
        "ARROW:FLIGHT:SQL:SCALE": "3",
        "ARROW:FLIGHT:SQL:IS_AUTO_INCREMENT": "0",
        "ARROW:FLIGHT:SQL:IS_CASE_SENSITIVE": "0",
        "ARROW:FLIGHT:SQL:IS_READ_ONLY": "1",
        "ARROW:FLIGHT:SQL:IS_SEARCHABLE": "1",
    }
    text = columns.column_metadata(pa.string(), None)
    assert columns.CATALOG_NAME not in text and text[columns.TYPE_NAME] == "VARCHAR"
    assert text[columns.IS_CASE_SENSITIVE] == "1" and columns.PRECISION not in text
    assert columns.column_metadata(pa.list_(pa.int64()), None)[columns.IS_SEARCHABLE] == "0"
    names = {
        pa.int64(): "BIGINT",
        pa.int32(): "INTEGER",
        pa.float64(): "DOUBLE",
        pa.bool_(): "BOOLEAN",
        pa.date32(): "DATE",
        pa.timestamp("us"): "TIMESTAMP",
        pa.timestamp("us", tz="UTC"): "TIMESTAMP WITH TIME ZONE",
        pa.dictionary(pa.int32(), pa.string()): "VARCHAR",
    }
    assert {t: columns.sql_type_name(t) for t in names} == names


def test_typed_schema_keeps_names_types_and_nullability() -> None:
    schema = pa.schema([pa.field("id", pa.int64(), nullable=False), pa.field("s", pa.string())])
    typed = columns.typed_schema(schema, [ORDERS, None])
    assert [(f.name, f.type, f.nullable) for f in typed] == [(f.name, f.type, f.nullable) for f in schema]
    assert typed.field("id").metadata[b"ARROW:FLIGHT:SQL:TABLE_NAME"] == b"orders"
    assert b"ARROW:FLIGHT:SQL:TABLE_NAME" not in typed.field("s").metadata
    # Origins that do not line up with the columns name no tables rather than wrong ones.
    assert all(columns.TABLE_NAME.encode() not in f.metadata for f in columns.typed_schema(schema, [ORDERS]))
