"""The lossless conversions every write path applies on its own, and conforming batches.

Shared by the input files (``sources``) and the catalog's write path (``catalog.evolution``):
one rule for what converts without loss. Never a parse (a string into a number), never a
narrowing (int64 into int32): those are refused before anything is written.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from lake_platform.errors import TableSchemaValidationError

if TYPE_CHECKING:
    import pyarrow as pa


def int_bits(t: pa.DataType) -> tuple[bool, int] | None:
    import pyarrow as pa

    if pa.types.is_integer(t):
        return pa.types.is_signed_integer(t), t.bit_width
    return None


def widens(src: pa.DataType, dst: pa.DataType) -> bool:
    """Whether every ``src`` value converts to ``dst`` exactly, without parsing: the casts a
    write may apply on its own."""
    import pyarrow as pa

    if src == dst or pa.types.is_null(src):
        return True
    s, d = int_bits(src), int_bits(dst)
    if s and d:
        (s_signed, s_bits), (d_signed, d_bits) = s, d
        if s_signed == d_signed:
            return d_bits >= s_bits
        return d_signed and d_bits > s_bits  # unsigned into a wider signed integer
    if s and pa.types.is_floating(dst):
        mantissa = {16: 11, 32: 24, 64: 53}[dst.bit_width]
        return s[1] < mantissa  # every integer of that width is exact
    if pa.types.is_floating(src) and pa.types.is_floating(dst):
        return dst.bit_width >= src.bit_width
    pairs = [
        (pa.types.is_string, pa.types.is_large_string),
        (pa.types.is_binary, pa.types.is_large_binary),
    ]
    return any(a(src) and b(dst) for a, b in pairs)


def conform_batch(batch: pa.RecordBatch, target: pa.Schema) -> pa.RecordBatch:
    """``batch`` with ``target``'s columns, by name: a column the batch lacks (one its write adds
    to the table) is all null; the others are cast. The caller checked every cast widens
    losslessly up front (``check_input``), so a cast here never fails on a value. A null in a
    column ``target`` declares non-nullable is TableSchemaValidationError: only values show it,
    and Lance would refuse the write with an untyped error."""
    import pyarrow as pa

    n = batch.num_rows
    names = batch.schema.names
    columns = []
    for f in target:
        if f.name not in names:
            columns.append(pa.nulls(n, f.type))
            continue
        col = batch.column(names.index(f.name))
        if not f.nullable and col.null_count:
            raise TableSchemaValidationError(f"column {f.name} is not nullable, but the data has nulls in it")
        columns.append(col if col.type == f.type else col.cast(f.type))
    return pa.RecordBatch.from_arrays(columns, schema=target)


def check_input(target: pa.Schema, incoming: pa.Schema, optional: frozenset[str], label: str) -> bool:
    """Whether one input of a planned write needs conforming to ``target`` (False: it already
    matches); TableSchemaValidationError naming ``label`` when it cannot be: a column the target
    lacks, a target column it lacks that its write does not add (``optional``), or a type that
    does not widen losslessly into the target's."""
    if incoming.remove_metadata().equals(target.remove_metadata()):
        return False
    if len(set(incoming.names)) != len(incoming.names):
        raise TableSchemaValidationError(f"{label} has duplicate column names")
    problems: list[str] = []
    missing = [n for n in target.names if n not in incoming.names and n not in optional]
    extra = [n for n in incoming.names if n not in target.names]
    if missing:
        problems.append(f"missing column(s) {', '.join(missing)}")
    if extra:
        problems.append(f"{len(extra)} column(s) the table does not have")
    for f in target:
        if f.name in incoming.names and not widens(incoming.field(f.name).type, f.type):
            src = incoming.field(f.name).type
            problems.append(f"column {f.name} is {src}, the table has {f.type} (never narrowed or parsed)")
    if problems:
        raise TableSchemaValidationError(
            f"{label} does not fit the table: "
            + "; ".join(problems)
            + f" (the table has {', '.join(target.names)})"
        )
    return True
