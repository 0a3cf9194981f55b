"""The type catalog a SQL client lists at connect (``CommandGetXdbcTypeInfo``): JDBC's
``DatabaseMetaData.getTypeInfo()`` and ODBC's ``SQLGetTypeInfo``. One row per SQL type name a
result column can carry (``query.columns.sql_type_name``), so a client that looks a column's
type up here finds it. Codes are FlightSql.proto's ``XdbcDataType`` (the ODBC/JDBC type codes)
and ``XdbcDatetimeSubcode``; rows are ordered by data type, as JDBC asks."""

from __future__ import annotations

from typing import Any, NamedTuple

import pyarrow as pa

from lake_platform.flight import schemas

SEARCHABLE_FULL, SEARCHABLE_NONE = 3, 0
NULLABLE = 1
DATETIME = 9  # XDBC_DATETIME: the sql_data_type of every date and time type
INTERVAL = 10


class XdbcType(NamedTuple):
    name: str
    data_type: int
    column_size: int | None = None
    literal: tuple[str, str] | None = None
    numeric: bool = False
    subcode: int | None = None  # datetime types: XdbcDatetimeSubcode
    searchable: bool = True
    max_scale: int | None = None


TYPES: tuple[XdbcType, ...] = (
    XdbcType("BOOLEAN", -7, 1),  # BIT
    XdbcType("TINYINT", -6, 3, numeric=True),
    XdbcType("TINYINT UNSIGNED", -6, 3, numeric=True),
    XdbcType("BIGINT", -5, 19, numeric=True),
    XdbcType("BIGINT UNSIGNED", -5, 20, numeric=True),
    XdbcType("VARBINARY", -3, literal=("X'", "'")),
    XdbcType("NULL", 0),
    XdbcType("DECIMAL", 3, 38, numeric=True, max_scale=38),
    XdbcType("INTEGER", 4, 10, numeric=True),
    XdbcType("INTEGER UNSIGNED", 4, 10, numeric=True),
    XdbcType("SMALLINT", 5, 5, numeric=True),
    XdbcType("SMALLINT UNSIGNED", 5, 5, numeric=True),
    XdbcType("HALF", 6, 3, numeric=True),
    XdbcType("FLOAT", 7, 7, numeric=True),  # REAL: single precision, as DataFusion's FLOAT
    XdbcType("DOUBLE", 8, 15, numeric=True),
    XdbcType("INTERVAL", INTERVAL, literal=("INTERVAL '", "'")),
    XdbcType("VARCHAR", 12, literal=("'", "'")),
    XdbcType("DATE", 91, 10, literal=("DATE '", "'"), subcode=1),
    XdbcType("TIME", 92, 15, literal=("TIME '", "'"), subcode=2),
    XdbcType("TIMESTAMP", 93, 29, literal=("TIMESTAMP '", "'"), subcode=3),
    XdbcType("TIMESTAMP WITH TIME ZONE", 93, 35, literal=("TIMESTAMP '", "'"), subcode=5),
    XdbcType("ARRAY", 2003, searchable=False),  # JDBC's ARRAY, STRUCT and the like:
    XdbcType("STRUCT", 2002, searchable=False),  # codes outside ODBC's, as JDBC gives them
    XdbcType("MAP", 2000, searchable=False),  # (JAVA_OBJECT)
)


def _row(t: XdbcType) -> dict[str, Any]:
    prefix, suffix = t.literal or (None, None)
    return {
        "type_name": t.name,
        "data_type": t.data_type,
        "column_size": t.column_size,
        "literal_prefix": prefix,
        "literal_suffix": suffix,
        "create_params": ["precision", "scale"] if t.max_scale is not None else None,
        "nullable": NULLABLE,
        "case_sensitive": t.name == "VARCHAR",
        "searchable": SEARCHABLE_FULL if t.searchable else SEARCHABLE_NONE,
        "unsigned_attribute": t.name.endswith("UNSIGNED") if t.numeric else None,
        "fixed_prec_scale": False,
        "auto_increment": False if t.numeric else None,
        "local_type_name": t.name,
        "minimum_scale": 0 if t.max_scale is not None else None,
        "maximum_scale": t.max_scale,
        "sql_data_type": DATETIME if t.subcode is not None else t.data_type,
        "datetime_subcode": t.subcode,
        "num_prec_radix": 10 if t.numeric else None,
        "interval_precision": None,
    }


def type_info(data_type: int | None = None) -> pa.Table:
    """Every type, or those of one ``data_type`` code, ordered by data type then name."""
    rows = [_row(t) for t in sorted(TYPES, key=lambda t: (t.data_type, t.name))]
    if data_type is not None:
        rows = [r for r in rows if r["data_type"] == data_type]
    return pa.Table.from_pylist(rows, schema=schemas.XDBC_TYPE_INFO)
