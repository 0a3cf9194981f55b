"""What a result column is, told the way SQL clients read it: the Flight SQL column metadata.

Flight SQL describes each result column with field metadata (FlightSql.proto, "column
metadata"): its SQL type name, precision and scale, whether it is auto-increment, case
sensitive, read-only and searchable, and, for a column read straight from a table, that table's
catalog, schema and name. JDBC's ``ResultSetMetaData``, ADBC's ``adbc_get_objects``
(``xdbc_type_name``) and BI tools read these; without them every column is of unknown type.
Nullability is the Arrow field's own flag.

The table a column comes from is found by walking DataFusion's logical plan from the output
back through projections, aliases, filters, sorts, limits, joins and grouping keys to a table
scan; a computed column (an aggregate, an expression, a union's column) names no table. The
names are the user's own: the warehouse, the namespace path and the table (a time-travel
selector such as ``@v12`` left out), never DataFusion's.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple

import pyarrow as pa
import pyarrow.types as pt

from lake_platform.query import timetravel

PREFIX = "ARROW:FLIGHT:SQL:"
CATALOG_NAME = PREFIX + "CATALOG_NAME"
SCHEMA_NAME = PREFIX + "SCHEMA_NAME"
TABLE_NAME = PREFIX + "TABLE_NAME"
TYPE_NAME = PREFIX + "TYPE_NAME"
PRECISION = PREFIX + "PRECISION"
SCALE = PREFIX + "SCALE"
IS_AUTO_INCREMENT = PREFIX + "IS_AUTO_INCREMENT"
IS_CASE_SENSITIVE = PREFIX + "IS_CASE_SENSITIVE"
IS_READ_ONLY = PREFIX + "IS_READ_ONLY"
IS_SEARCHABLE = PREFIX + "IS_SEARCHABLE"

#: Decimal digits of integer and floating-point types (JDBC's column size for them).
_DIGITS = {
    pa.int8(): 3,
    pa.uint8(): 3,
    pa.int16(): 5,
    pa.uint16(): 5,
    pa.int32(): 10,
    pa.uint32(): 10,
    pa.int64(): 19,
    pa.uint64(): 20,
    pa.float16(): 3,
    pa.float32(): 7,
    pa.float64(): 15,
}


class Origin(NamedTuple):
    """The table a result column is read from, in the user's names."""

    catalog: str  # warehouse
    schema: str  # namespace path, levels joined by "."
    table: str


def sql_type_name(t: pa.DataType) -> str:
    """The SQL name of an Arrow type, as DataFusion's SQL spells it where it has one."""
    if pt.is_dictionary(t):
        return sql_type_name(t.value_type)
    if pt.is_run_end_encoded(t):
        return sql_type_name(t.value_type)
    named = {
        pa.bool_(): "BOOLEAN",
        pa.int8(): "TINYINT",
        pa.int16(): "SMALLINT",
        pa.int32(): "INTEGER",
        pa.int64(): "BIGINT",
        pa.uint8(): "TINYINT UNSIGNED",
        pa.uint16(): "SMALLINT UNSIGNED",
        pa.uint32(): "INTEGER UNSIGNED",
        pa.uint64(): "BIGINT UNSIGNED",
        pa.float16(): "HALF",
        pa.float32(): "FLOAT",
        pa.float64(): "DOUBLE",
        pa.date32(): "DATE",
        pa.date64(): "DATE",
        pa.null(): "NULL",
    }
    if t in named:
        return named[t]
    if pt.is_string(t) or pt.is_large_string(t) or pt.is_string_view(t):
        return "VARCHAR"
    if pt.is_binary(t) or pt.is_large_binary(t) or pt.is_binary_view(t) or pt.is_fixed_size_binary(t):
        return "VARBINARY"
    if pt.is_decimal(t):
        return "DECIMAL"
    if pt.is_timestamp(t):
        return "TIMESTAMP WITH TIME ZONE" if t.tz else "TIMESTAMP"
    if pt.is_time(t):
        return "TIME"
    if pt.is_duration(t) or pt.is_interval(t):
        return "INTERVAL"
    if pt.is_list(t) or pt.is_large_list(t) or pt.is_fixed_size_list(t) or pt.is_list_view(t):
        return "ARRAY"
    if pt.is_struct(t):
        return "STRUCT"
    if pt.is_map(t):
        return "MAP"
    return str(t).upper()


def column_metadata(t: pa.DataType, origin: Origin | None) -> dict[str, str]:
    """The Flight SQL metadata of a column of type ``t`` (read from ``origin``, if known)."""
    base = t.value_type if pt.is_dictionary(t) or pt.is_run_end_encoded(t) else t
    meta: dict[str, str] = {}
    if origin is not None:
        meta.update({CATALOG_NAME: origin.catalog, SCHEMA_NAME: origin.schema, TABLE_NAME: origin.table})
    meta[TYPE_NAME] = sql_type_name(t)
    if pt.is_decimal(base):
        meta[PRECISION], meta[SCALE] = str(base.precision), str(base.scale)
    elif base in _DIGITS:
        meta[PRECISION] = str(_DIGITS[base])
        if pt.is_integer(base):
            meta[SCALE] = "0"
    nested = pt.is_nested(base)
    stringish = pt.is_string(base) or pt.is_large_string(base) or pt.is_string_view(base)
    meta[IS_AUTO_INCREMENT] = "0"
    meta[IS_CASE_SENSITIVE] = "1" if stringish else "0"
    meta[IS_READ_ONLY] = "1"  # a read-only endpoint
    meta[IS_SEARCHABLE] = "0" if nested else "1"
    return meta


def typed_schema(schema: pa.Schema, origins: Sequence[Origin | None] | None = None) -> pa.Schema:
    """``schema`` with each field's Flight SQL column metadata (its other metadata replaced)."""
    if origins is None or len(origins) != len(schema):
        origins = [None] * len(schema)
    return pa.schema(
        [f.with_metadata(column_metadata(f.type, o)) for f, o in zip(schema, origins, strict=True)]
    )


def table_schema(schema: pa.Schema, origin: Origin) -> pa.Schema:
    """A table's schema as GetTables(include_schema) reports it: every column from ``origin``."""
    return typed_schema(schema, [origin] * len(schema))


# -- where each output column of a plan comes from -------------------------------------------

_PASS_THROUGH = frozenset(
    {"Filter", "Sort", "Limit", "SubqueryAlias", "Repartition", "Distinct", "Subquery", "Analyze"}
)


def origins(df: Any, catalog: str | None, schema: str | None) -> list[Origin | None] | None:
    """The origin of each output column of DataFusion DataFrame ``df`` (None: computed), or
    None if the plan's shape could not be followed. ``catalog``, ``schema``: the defaults a
    name the query wrote shorter was completed with."""
    try:
        return _origins(df.logical_plan(), catalog, schema)
    except Exception:  # noqa: BLE001 - descriptive only: an unknown plan shape names no tables
        return None


def _origins(plan: Any, catalog: str | None, schema: str | None) -> list[Origin | None]:
    node = plan.to_variant()
    kind = type(node).__name__
    names = list(node.schema().field_names()) if hasattr(node, "schema") else []
    if kind == "TableScan":
        return [_scan_origin(node, catalog, schema)] * len(names)
    inputs = plan.inputs()
    if kind in _PASS_THROUGH and len(inputs) == 1:
        below = _origins(inputs[0], catalog, schema)
        return below if len(below) == len(names) else [None] * len(names)
    if kind == "Join" and len(inputs) == 2:
        both = _origins(inputs[0], catalog, schema) + _origins(inputs[1], catalog, schema)
        return both if len(both) == len(names) else [None] * len(names)
    if kind == "Projection" and len(inputs) == 1:
        return _through(node.projections(), inputs[0], catalog, schema)
    if kind == "Aggregate" and len(inputs) == 1:
        keys = _through(node.group_by_exprs(), inputs[0], catalog, schema)
        return (keys + [None] * len(names))[: len(names)]
    if kind == "Window" and len(inputs) == 1:
        below = _origins(inputs[0], catalog, schema)
        return (below + [None] * len(names))[: len(names)]
    return [None] * len(names)


def _through(exprs: Any, below_plan: Any, catalog: str | None, schema: str | None) -> list[Origin | None]:
    """The origins of expressions over ``below_plan``: a plain (or renamed) column keeps its
    origin, anything computed has none."""
    below = _origins(below_plan, catalog, schema)
    below_names = list(below_plan.to_variant().schema().field_names())
    out: list[Origin | None] = []
    for expr in exprs:
        while expr.variant_name() == "Alias":
            expr = expr.to_variant().expr()
        origin = None
        if expr.variant_name() == "Column":
            name = expr.to_variant().qualified_name()
            if name in below_names and len(below) == len(below_names):
                origin = below[below_names.index(name)]
        out.append(origin)
    return out


def _scan_origin(scan: Any, catalog: str | None, schema: str | None) -> Origin | None:
    cat, sch, table = scan.fqn()
    cat, sch = cat or catalog, sch or schema
    if not cat or not sch or not table:
        return None
    return Origin(cat, sch, timetravel.split(table)[0])


__all__ = [
    "CATALOG_NAME",
    "IS_AUTO_INCREMENT",
    "IS_CASE_SENSITIVE",
    "IS_READ_ONLY",
    "IS_SEARCHABLE",
    "Origin",
    "PRECISION",
    "SCALE",
    "SCHEMA_NAME",
    "TABLE_NAME",
    "TYPE_NAME",
    "column_metadata",
    "origins",
    "sql_type_name",
    "table_schema",
    "typed_schema",
]
