"""An asset's value as an Arrow stream, and a table read back as the type an input asks for:
pyarrow Table or RecordBatchReader, pandas or polars DataFrame (polars LazyFrame too). The
libraries are imported only when a value of theirs is met, so a project without polars or
pandas never needs them."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from lake_platform.errors import InvalidInput

if TYPE_CHECKING:
    from lake_platform.defs.partition_rows import PartitionRows


def as_reader(value: object) -> pa.RecordBatchReader:
    """``value`` as a stream of record batches; a reader passes through unread (streamed to the
    table, never held whole)."""
    if isinstance(value, pa.RecordBatchReader):
        return value
    if isinstance(value, pa.Table):
        return value.to_reader()
    if isinstance(value, pa.RecordBatch):
        return pa.RecordBatchReader.from_batches(value.schema, [value])
    module = type(value).__module__.split(".")[0]
    try:
        if module == "pandas":
            return pa.Table.from_pandas(_index_as_columns(value), preserve_index=False).to_reader()
        if module == "polars":
            frame = value.collect() if hasattr(value, "collect") else value
            return frame.to_arrow().to_reader()
    except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError, ValueError) as exc:
        # The message names the column ("Conversion failed for column id ...", "Duplicate column
        # names found: ['id', 'id']"): bad data, which no retry mends.
        raise InvalidInput(f"the asset's {module} frame does not convert to Arrow: {exc}") from None
    raise InvalidInput(
        f"the Lake IO manager writes a pyarrow Table or RecordBatchReader, a pandas or a polars "
        f"DataFrame; the asset returned {type(value).__name__}"
    )


def _index_as_columns(frame: Any) -> Any:
    """A pandas frame with its named index levels as columns (a ``groupby``'s keys are its
    index: dropped, the table would hold the sums without what they sum by); an unnamed index
    (a RangeIndex, a filter's row labels) is no data and stays out. A level named as a column is
    refused by pandas (ValueError: ``cannot insert id, already exists``)."""
    named = [n for n in frame.index.names if n is not None]
    return frame.reset_index(level=named) if named else frame


def conformed(reader: pa.RecordBatchReader, table: pa.Schema) -> pa.RecordBatchReader:
    """``reader`` with each column whose type differs from ``table``'s only in its offsets' width
    or layout (``large_string``/``string_view`` for ``string``, ``large_list`` for ``list``, ...)
    cast to the table's type, batch by batch: pandas and polars frames convert to the large
    types, and the catalog's schema policy rightly never narrows a type on its own. Other
    differences are left for that policy to judge. A batch too big for the table's offsets
    fails the stream (InvalidInput)."""
    fields, changed = [], False
    for field in reader.schema:
        index = table.get_field_index(field.name)
        wanted = table.field(index).type if index >= 0 else field.type
        if wanted != field.type and _layout_free(wanted) == _layout_free(field.type):
            field, changed = field.with_type(wanted), True
        fields.append(field)
    if not changed:
        return reader
    target = pa.schema(fields, metadata=reader.schema.metadata)

    def batches() -> Iterator[pa.RecordBatch]:
        for batch in reader:
            try:
                yield batch.cast(target)
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
                raise InvalidInput(f"the output does not fit the table's column types: {exc}") from None

    return pa.RecordBatchReader.from_batches(target, batches())


def _layout_free(t: pa.DataType) -> object:
    """``t`` with its offsets' width and view layout forgotten (strings, binaries, lists, nested)."""
    if pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_string_view(t):
        return "string"
    if pa.types.is_binary(t) or pa.types.is_large_binary(t) or pa.types.is_binary_view(t):
        return "binary"
    if (
        pa.types.is_list(t)
        or pa.types.is_large_list(t)
        or pa.types.is_list_view(t)
        or pa.types.is_large_list_view(t)
    ):
        return ("list", _layout_free(t.value_type))
    if pa.types.is_struct(t):
        return ("struct", tuple((f.name, _layout_free(f.type)) for f in t))
    return t


@dataclass
class Tally:
    """Rows and bytes of a stream, counted as it is read."""

    rows: int = 0
    bytes: int = 0


def counted(
    reader: pa.RecordBatchReader, tally: Tally, partitions: PartitionRows | None = None
) -> pa.RecordBatchReader:
    """``reader`` counted into ``tally``; with ``partitions``, a batch holding a row of another
    partition fails the stream (InvalidInput) before its rows are written: a partition's
    replacement must not touch another partition's rows."""

    def batches() -> Iterator[pa.RecordBatch]:
        for batch in reader:
            if partitions is not None and batch.num_rows:
                refuse_strays(batch.column(partitions.column), partitions)
            tally.rows += batch.num_rows
            tally.bytes += batch.nbytes
            yield batch

    return pa.RecordBatchReader.from_batches(reader.schema, batches())


def refuse_strays(values: pa.Array | pa.ChunkedArray, partitions: PartitionRows) -> None:
    """InvalidInput when a value of the partition column is outside ``partitions``."""
    bad = partitions.stray(values)
    if bad is not None:
        written = partitions.describe(values.type)
        value = repr(str(bad.as_py())) if bad.is_valid else "null"
        raise InvalidInput(
            f"a row's {partitions.column} is {value}, outside the partitions written ({written})"
        )


def checked_whole(
    value: object, reader: pa.RecordBatchReader, partitions: PartitionRows | None
) -> pa.RecordBatchReader:
    """``reader``, the stream of ``value``; an output held in memory (anything but a
    RecordBatchReader) has its partition column checked whole first, so a stray row is refused
    before anything is created (a write-audit-publish write makes its branch before it
    streams). A stream is checked as it is read (:func:`counted`)."""
    if partitions is None or isinstance(value, pa.RecordBatchReader):
        return reader
    whole = reader.read_all()
    if partitions.column in whole.column_names:  # else the plan refuses the column by name
        refuse_strays(whole.column(partitions.column), partitions)
    return whole.to_reader()


def annotation_kind(typing_type: Any) -> str:
    """What an input's type annotation asks for: ``reader``, ``pandas``, ``polars``,
    ``polars-lazy`` or ``arrow`` (a pyarrow Table; also for no annotation)."""
    if typing_type is pa.RecordBatchReader:
        return "reader"
    if isinstance(typing_type, type):
        module = typing_type.__module__.split(".")[0]
        if module == "pandas":
            return "pandas"
        if module == "polars":
            return "polars-lazy" if typing_type.__name__ == "LazyFrame" else "polars"
    return "arrow"


def as_kind(reader: pa.RecordBatchReader, kind: str) -> object:
    """A scan's stream as ``kind`` (see :func:`annotation_kind`)."""
    if kind == "reader":
        return reader
    table = reader.read_all()
    if kind == "pandas":
        return table.to_pandas()
    if kind in ("polars", "polars-lazy"):
        import polars as pl

        frame = pl.from_arrow(table)
        return frame.lazy() if kind == "polars-lazy" else frame
    return table
