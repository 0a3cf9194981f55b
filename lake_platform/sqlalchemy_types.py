"""SQLAlchemy types of the lake's Arrow column types, for the ``lake+flightsql`` dialect.

Every type the platform stores has one (reflection never answers NullType, which tools such as
Superset and pandas treat as untyped). Values come back as ADBC converts them (pyarrow's
``as_py``), so the types here that SQLAlchemy would otherwise emulate (``Interval`` as a
datetime offset from the epoch) or has no name for (struct, map) pass values through unchanged.
A client, like the dialect: it imports nothing of the platform's.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

import pyarrow as pa
import pyarrow.types as pt
from sqlalchemy import types as sqltypes
from sqlalchemy.sql import type_api


class INTERVAL(type_api.NativeForEmulated, sqltypes.TypeEngine[dt.timedelta]):
    """An Arrow duration: a ``timedelta`` both ways. ``sa.Interval`` on this dialect adapts to
    it; its default (emulated) form adds the epoch to bind values and subtracts it from
    results, which broke every duration the driver returned (``timedelta - datetime``)."""

    __visit_name__ = "INTERVAL"
    native = True

    @classmethod
    def adapt_emulated_to_native(cls, impl: Any, **kw: Any) -> INTERVAL:
        return cls()

    def as_generic(self, allow_nulltype: bool = False) -> sqltypes.TypeEngine[Any]:
        return sqltypes.Interval(native=True)

    @property
    def python_type(self) -> type:
        return dt.timedelta


class STRUCT(sqltypes.TypeEngine[dict[str, Any]]):
    """An Arrow struct: each value a ``dict`` of its fields. ``fields``: name to SQLAlchemy type."""

    __visit_name__ = "STRUCT"

    def __init__(self, fields: dict[str, sqltypes.TypeEngine[Any]] | None = None) -> None:
        self.fields = dict(fields or {})

    @property
    def python_type(self) -> type:
        return dict


class MAP(sqltypes.TypeEngine[list[Any]]):
    """An Arrow map: each value a list of ``(key, value)`` pairs, in the stored order."""

    __visit_name__ = "MAP"

    def __init__(
        self,
        key_type: sqltypes.TypeEngine[Any] | None = None,
        value_type: sqltypes.TypeEngine[Any] | None = None,
    ) -> None:
        self.key_type = key_type
        self.value_type = value_type

    @property
    def python_type(self) -> type:
        return list


def sqlalchemy_type(t: pa.DataType) -> sqltypes.TypeEngine[Any]:
    """The SQLAlchemy type of an Arrow column type (NullType only for the null type itself)."""
    if pt.is_dictionary(t):
        return sqlalchemy_type(t.value_type)
    if pt.is_boolean(t):
        return sqltypes.Boolean()
    if pt.is_int8(t) or pt.is_int16(t) or pt.is_uint8(t):
        return sqltypes.SmallInteger()
    if pt.is_int32(t) or pt.is_uint16(t):
        return sqltypes.Integer()
    if pt.is_integer(t):
        return sqltypes.BigInteger()
    if pt.is_float16(t) or pt.is_float32(t):
        return sqltypes.REAL()
    if pt.is_float64(t):
        return sqltypes.DOUBLE()
    if pt.is_decimal(t):
        return sqltypes.Numeric(precision=t.precision, scale=t.scale)
    if pt.is_string(t) or pt.is_large_string(t) or pt.is_string_view(t):
        return sqltypes.String()
    if pt.is_binary(t) or pt.is_large_binary(t) or pt.is_binary_view(t) or pt.is_fixed_size_binary(t):
        return sqltypes.LargeBinary()
    if pt.is_date(t):
        return sqltypes.Date()
    if pt.is_timestamp(t):
        return sqltypes.DateTime(timezone=t.tz is not None)
    if pt.is_time(t):
        return sqltypes.Time()
    if pt.is_duration(t):
        return INTERVAL()
    if pt.is_map(t):  # before lists: a map is a list of entries to pyarrow
        return MAP(sqlalchemy_type(t.key_type), sqlalchemy_type(t.item_type))
    if pt.is_list(t) or pt.is_large_list(t) or pt.is_fixed_size_list(t) or pt.is_list_view(t):
        item = sqlalchemy_type(t.value_type)
        return sqltypes.ARRAY(item)
    if pt.is_struct(t):
        return STRUCT({f.name: sqlalchemy_type(f.type) for f in t})
    return sqltypes.NullType()


__all__ = ["INTERVAL", "MAP", "STRUCT", "sqlalchemy_type"]
