"""An Arrow schema as the spec's ``JsonArrowSchema`` (DescribeTable's ``schema``).

The spec's type object has only a name, child fields and a length, so some detail cannot travel:
as the reference server (pylance's ``RestAdapter``) answers, a timestamp, time or duration is
named without its unit or zone, a decimal's ``length`` is ``precision * 1000 + scale``, and a
dictionary column is its value type. Empty metadata is left out.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pyarrow.types as t

#: Types named by a test alone, in the spec's spelling.
_NAMED: list[tuple[Any, str]] = [
    (t.is_null, "null"),
    (t.is_boolean, "bool"),
    (t.is_int8, "int8"),
    (t.is_int16, "int16"),
    (t.is_int32, "int32"),
    (t.is_int64, "int64"),
    (t.is_uint8, "uint8"),
    (t.is_uint16, "uint16"),
    (t.is_uint32, "uint32"),
    (t.is_uint64, "uint64"),
    (t.is_float16, "float16"),
    (t.is_float32, "float32"),
    (t.is_float64, "float64"),
    (t.is_date32, "date32"),
    (t.is_date64, "date64"),
    (t.is_time32, "time32"),
    (t.is_time64, "time64"),
    (t.is_timestamp, "timestamp"),
    (t.is_duration, "duration"),
    (t.is_interval, "interval"),
    (t.is_string, "utf8"),
    (t.is_large_string, "large_utf8"),
    (t.is_string_view, "utf8_view"),
    (t.is_binary, "binary"),
    (t.is_large_binary, "large_binary"),
    (t.is_binary_view, "binary_view"),
    (t.is_union, "union"),
]
_LISTS = [(t.is_list, "list"), (t.is_large_list, "large_list")]


def _metadata(meta: dict[bytes, bytes] | None) -> dict[str, str] | None:
    if not meta:
        return None
    return {k.decode("utf-8", "replace"): v.decode("utf-8", "replace") for k, v in meta.items()}


def json_field(field: pa.Field) -> dict[str, Any]:
    out: dict[str, Any] = {"name": field.name, "nullable": field.nullable, "type": json_type(field.type)}
    meta = _metadata(field.metadata)
    if meta is not None:
        out["metadata"] = meta
    return out


def json_type(dtype: pa.DataType) -> dict[str, Any]:
    if t.is_dictionary(dtype):
        return json_type(dtype.value_type)
    if t.is_decimal(dtype):
        return {"type": f"decimal{dtype.bit_width}", "length": dtype.precision * 1000 + dtype.scale}
    if t.is_fixed_size_binary(dtype):
        return {"type": "fixed_size_binary", "length": dtype.byte_width}
    if t.is_fixed_size_list(dtype):
        return {
            "type": "fixed_size_list",
            "fields": [json_field(dtype.value_field)],
            "length": dtype.list_size,
        }
    for test, name in _LISTS:
        if test(dtype):
            return {"type": name, "fields": [json_field(dtype.value_field)]}
    if t.is_map(dtype):
        entries = pa.field("entries", pa.struct([dtype.key_field, dtype.item_field]), nullable=False)
        return {"type": "map", "fields": [json_field(entries)]}
    if t.is_struct(dtype):
        return {"type": "struct", "fields": [json_field(dtype.field(i)) for i in range(dtype.num_fields)]}
    for test, name in _NAMED:
        if test(dtype):
            return {"type": name}
    return {"type": str(dtype)}  # a type newer than this table: its Arrow name


def json_schema(schema: pa.Schema) -> dict[str, Any]:
    """``schema`` in the spec's ``JsonArrowSchema`` shape."""
    out: dict[str, Any] = {"fields": [json_field(f) for f in schema]}
    meta = _metadata(schema.metadata)
    if meta is not None:
        out["metadata"] = meta
    return out
