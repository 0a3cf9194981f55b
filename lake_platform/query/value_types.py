"""How wide one value of an Arrow type named in a cast is, when the type has a fixed-size part.

``arrow_cast(NULL, 'FixedSizeList(1000000, Int64)')`` is a NULL of a type whose every value,
NULL or not, holds its whole width: Arrow stores a fixed-size list's or binary's children for
each row, so the cast builds 8 MB a row from nothing (a query over a table: gigabytes a batch),
outside DataFusion's memory pool. ``value_bounds`` checks that width against the cap like what
``lpad`` builds. DataFusion itself reads the type's text (planning a cast of NULL to it, which
builds nothing), so every spelling it takes is understood as it understands it. A fixed-size
list counts its length times its element's width, a fixed-size binary its length, any other type
with parts the sum of its parts' (a list counted as one element), a scalar its Arrow width (a
string's offset or view: 16), anything else :data:`SCALAR_BYTES` (the widest scalar's).
"""

from __future__ import annotations

import pyarrow as pa
from datafusion import SessionContext

#: What a type with no fixed width of its own counts as: Decimal256, the widest scalar.
SCALAR_BYTES = 32
#: An element of a variable-size type: its offset or view.
VARIABLE_BYTES = 16


def fixed_width(type_text: str) -> int | None:
    """The most bytes one value of the type ``type_text`` holds; None when it has no fixed-size
    part (its values are as large as what is cast) or is no type DataFusion knows (the query's
    own planning refuses it then)."""
    named = _parsed(type_text)
    if named is None or not _has_fixed_part(named):
        return None
    return _width(named)


def _parsed(type_text: str) -> pa.DataType | None:
    # A context of its own: nothing registered in it, so the text can reach no data; quotes
    # doubled, so it stays one literal.
    quoted = type_text.replace("'", "''")
    try:
        return SessionContext().sql(f"SELECT arrow_cast(NULL, '{quoted}') AS v").schema().field(0).type
    except Exception:  # noqa: BLE001 - not a type: not this check's to report
        return None


def _parts(kind: pa.DataType) -> list[pa.DataType]:
    if pa.types.is_dictionary(kind):
        return [kind.index_type, kind.value_type]
    if pa.types.is_map(kind):
        return [kind.key_type, kind.item_type]
    if pa.types.is_struct(kind) or pa.types.is_union(kind):
        return [kind.field(i).type for i in range(kind.num_fields)]
    if isinstance(kind, (pa.ListType, pa.LargeListType, pa.FixedSizeListType, pa.ListViewType)):
        return [kind.value_type]
    return []


def _has_fixed_part(kind: pa.DataType) -> bool:
    return isinstance(kind, (pa.FixedSizeListType, pa.FixedSizeBinaryType)) or any(
        _has_fixed_part(part) for part in _parts(kind)
    )


def _width(kind: pa.DataType) -> int:
    if isinstance(kind, pa.FixedSizeListType):
        return kind.list_size * _width(kind.value_type)
    if isinstance(kind, pa.FixedSizeBinaryType):
        return kind.byte_width
    parts = _parts(kind)
    if parts:
        return sum(_width(part) for part in parts) or SCALAR_BYTES
    if pa.types.is_string(kind) or pa.types.is_binary(kind) or pa.types.is_large_string(kind):
        return VARIABLE_BYTES
    if pa.types.is_large_binary(kind) or pa.types.is_string_view(kind) or pa.types.is_binary_view(kind):
        return VARIABLE_BYTES
    try:
        return max(1, kind.bit_width // 8)
    except ValueError:  # no fixed width (a decimal256's is 32: counted above)
        return SCALAR_BYTES


__all__ = ["SCALAR_BYTES", "fixed_width"]
