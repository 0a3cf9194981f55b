"""Arrow helpers the catalog needs: schema IPC bytes, counting and conforming streams."""

from __future__ import annotations

from collections.abc import Iterator
from functools import lru_cache

import pyarrow as pa

from lake_platform.errors import InvalidInput, TableSchemaValidationError


def schema_to_ipc(schema: pa.Schema) -> bytes:
    return schema.serialize().to_pybytes()


@lru_cache(maxsize=256)
def schema_from_ipc(ipc: bytes) -> pa.Schema:
    """Decoded once per distinct schema: every append conforms its input to the table's
    (schemas are immutable, so sharing the decoded object is safe)."""
    return pa.ipc.read_schema(pa.py_buffer(ipc))


def as_reader(data: object) -> pa.RecordBatchReader:
    """The stream to write: a RecordBatchReader as given, or an in-memory Table or RecordBatch
    read batch by batch; anything else is bad input, refused before any write."""
    if isinstance(data, pa.RecordBatchReader):
        return data
    if isinstance(data, pa.Table):
        return pa.RecordBatchReader.from_batches(data.schema, data.to_batches())
    if isinstance(data, pa.RecordBatch):
        return pa.RecordBatchReader.from_batches(data.schema, [data])
    raise InvalidInput(
        f"data must be an Arrow RecordBatchReader, Table or RecordBatch, not {type(data).__name__}"
    )


class StreamCounter:
    """Counts rows and bytes as batches flow past; never holds more than one batch."""

    def __init__(self) -> None:
        self.rows = 0
        self.bytes = 0
        #: What broke the input stream, if anything: the engine only sees a wrapped copy.
        self.error: BaseException | None = None

    def totals(self) -> tuple[int, int]:
        return self.rows, self.bytes

    def wrap(self, reader: pa.RecordBatchReader, target: pa.Schema | None = None) -> pa.RecordBatchReader:
        schema = target if target is not None else reader.schema
        cast = target is not None and not reader.schema.equals(target)

        def batches() -> Iterator[pa.RecordBatch]:
            try:
                for batch in reader:
                    if cast:
                        batch = batch.cast(schema)
                    self.rows += batch.num_rows
                    self.bytes += batch.nbytes
                    yield batch
            except Exception as exc:
                self.error = exc
                raise

        return pa.RecordBatchReader.from_batches(schema, batches())


def conform_schema(incoming: pa.Schema, table: pa.Schema, table_name: str) -> pa.Schema | None:
    """Return None if ``incoming`` already matches, the table schema if a safe cast makes it
    match, or raise TableSchemaValidationError saying what differs."""
    if incoming.remove_metadata().equals(table.remove_metadata()):
        return None
    problems = []
    in_names, tb_names = incoming.names, table.names
    missing = [n for n in tb_names if n not in in_names]
    extra = [n for n in in_names if n not in tb_names]
    if missing:
        problems.append(f"missing column(s) {', '.join(missing)}")
    if extra:
        problems.append(f"unknown column(s) {', '.join(extra)}")
    if not problems and in_names != tb_names:
        problems.append("columns are in a different order")
    if not problems:
        for f_in, f_tb in zip(incoming, table, strict=True):
            if f_in.type != f_tb.type and not _safely_castable(f_in.type, f_tb.type):
                problems.append(f"column {f_in.name} is {f_in.type}, the table has {f_tb.type}")
    if problems:
        raise TableSchemaValidationError(
            f"data does not match the schema of {table_name}: " + "; ".join(problems)
        )
    return table


def _safely_castable(src: pa.DataType, dst: pa.DataType) -> bool:
    widening = [
        (pa.types.is_integer, pa.types.is_integer),
        (pa.types.is_floating, pa.types.is_floating),
        (pa.types.is_integer, pa.types.is_floating),
        (pa.types.is_string, pa.types.is_large_string),
        (pa.types.is_large_string, pa.types.is_string),
        (pa.types.is_null, lambda t: True),
    ]
    return any(a(src) and b(dst) for a, b in widening)
