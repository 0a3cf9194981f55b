"""Result schemas of the Flight SQL metadata commands, exactly as the spec defines them.

ADBC compares these with strict equality (nullability included), so they are spelled out
field by field rather than inferred from data.
"""

from __future__ import annotations

import pyarrow as pa

CATALOGS = pa.schema([pa.field("catalog_name", pa.utf8(), nullable=False)])

DB_SCHEMAS = pa.schema(
    [
        pa.field("catalog_name", pa.utf8()),
        pa.field("db_schema_name", pa.utf8(), nullable=False),
    ]
)

TABLES = pa.schema(
    [
        pa.field("catalog_name", pa.utf8()),
        pa.field("db_schema_name", pa.utf8()),
        pa.field("table_name", pa.utf8(), nullable=False),
        pa.field("table_type", pa.utf8(), nullable=False),
    ]
)

TABLES_WITH_SCHEMA = TABLES.append(pa.field("table_schema", pa.binary(), nullable=False))

TABLE_TYPES = pa.schema([pa.field("table_type", pa.utf8(), nullable=False)])

PRIMARY_KEYS = pa.schema(
    [
        pa.field("catalog_name", pa.utf8()),
        pa.field("db_schema_name", pa.utf8()),
        pa.field("table_name", pa.utf8(), nullable=False),
        pa.field("column_name", pa.utf8(), nullable=False),
        pa.field("key_name", pa.utf8()),
        pa.field("key_sequence", pa.int32(), nullable=False),
    ]
)

FOREIGN_KEYS = pa.schema(
    [
        pa.field("pk_catalog_name", pa.utf8()),
        pa.field("pk_db_schema_name", pa.utf8()),
        pa.field("pk_table_name", pa.utf8(), nullable=False),
        pa.field("pk_column_name", pa.utf8(), nullable=False),
        pa.field("fk_catalog_name", pa.utf8()),
        pa.field("fk_db_schema_name", pa.utf8()),
        pa.field("fk_table_name", pa.utf8(), nullable=False),
        pa.field("fk_column_name", pa.utf8(), nullable=False),
        pa.field("key_sequence", pa.int32(), nullable=False),
        pa.field("fk_key_name", pa.utf8()),
        pa.field("pk_key_name", pa.utf8()),
        pa.field("update_rule", pa.uint8(), nullable=False),
        pa.field("delete_rule", pa.uint8(), nullable=False),
    ]
)

XDBC_TYPE_INFO = pa.schema(
    [
        pa.field("type_name", pa.utf8(), nullable=False),
        pa.field("data_type", pa.int32(), nullable=False),
        pa.field("column_size", pa.int32()),
        pa.field("literal_prefix", pa.utf8()),
        pa.field("literal_suffix", pa.utf8()),
        pa.field("create_params", pa.list_(pa.field("item", pa.utf8(), nullable=False))),
        pa.field("nullable", pa.int32(), nullable=False),
        pa.field("case_sensitive", pa.bool_(), nullable=False),
        pa.field("searchable", pa.int32(), nullable=False),
        pa.field("unsigned_attribute", pa.bool_()),
        pa.field("fixed_prec_scale", pa.bool_(), nullable=False),
        pa.field("auto_increment", pa.bool_()),
        pa.field("local_type_name", pa.utf8()),
        pa.field("minimum_scale", pa.int32()),
        pa.field("maximum_scale", pa.int32()),
        pa.field("sql_data_type", pa.int32(), nullable=False),
        pa.field("datetime_subcode", pa.int32()),
        pa.field("num_prec_radix", pa.int32()),
        pa.field("interval_precision", pa.int32()),
    ]
)

SQL_INFO_VALUE = pa.dense_union(
    [
        pa.field("string_value", pa.utf8(), nullable=False),
        pa.field("bool_value", pa.bool_(), nullable=False),
        pa.field("bigint_value", pa.int64(), nullable=False),
        pa.field("int32_bitmask", pa.int32(), nullable=False),
        pa.field("string_list", pa.list_(pa.utf8()), nullable=False),
        pa.field("int32_to_int32_list_map", pa.map_(pa.int32(), pa.list_(pa.int32())), nullable=False),
    ],
    type_codes=[0, 1, 2, 3, 4, 5],
)

SQL_INFO = pa.schema(
    [
        pa.field("info_name", pa.uint32(), nullable=False),
        pa.field("value", SQL_INFO_VALUE, nullable=False),
    ]
)


def empty(schema: pa.Schema) -> pa.Table:
    return schema.empty_table()
