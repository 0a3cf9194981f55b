"""Arrow helpers the catalog needs: schema IPC bytes, counting and conforming streams."""

from __future__ import annotations

from collections.abc import Iterator
from functools import lru_cache

import pyarrow as pa

from lake_platform.catalog.conform import conform_batch
from lake_platform.errors import InvalidInput


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


def read_small(
    reader: pa.RecordBatchReader, max_bytes: int, max_batches: int
) -> tuple[list[pa.RecordBatch] | None, pa.RecordBatchReader]:
    """The whole stream as batches if it ends within ``max_batches`` batches and ``max_bytes``
    (what a small append can write twice), else None; and a reader of the same stream either
    way (what was read ahead, then the rest; an error of the input is raised by it, where the
    write path expects input errors). Reads ahead at most one batch past either limit."""
    batches: list[pa.RecordBatch] = []
    size = 0
    error: BaseException | None = None
    ended = False
    try:
        while len(batches) <= max_batches and size <= max_bytes:
            try:
                batch = reader.read_next_batch()
            except StopIteration:
                ended = True
                break
            batches.append(batch)
            size += batch.nbytes
    except Exception as exc:  # noqa: BLE001 - raised again by the returned reader
        error = exc
    if ended and len(batches) <= max_batches and size <= max_bytes:
        return batches, pa.RecordBatchReader.from_batches(reader.schema, batches)

    def rest() -> Iterator[pa.RecordBatch]:
        yield from batches
        if error is not None:
            raise error
        if not ended:
            yield from reader

    return None, pa.RecordBatchReader.from_batches(reader.schema, rest())


def holds_rows(reader: pa.RecordBatchReader) -> tuple[bool, pa.RecordBatchReader]:
    """Whether the stream holds a row, read ahead to its first non-empty batch (empty ones
    passed over), and a reader of the same stream either way. An error of the input counts as
    rows (the write path raises it where it expects input errors)."""
    skipped: list[pa.RecordBatch] = []
    try:
        while True:
            try:
                batch = reader.read_next_batch()
            except StopIteration:
                return False, pa.RecordBatchReader.from_batches(reader.schema, skipped)
            skipped.append(batch)
            if batch.num_rows:
                break
    except Exception as exc:  # noqa: BLE001 - raised again by the returned reader
        error: BaseException | None = exc
    else:
        error = None

    def rest() -> Iterator[pa.RecordBatch]:
        yield from skipped
        if error is not None:
            raise error
        yield from reader

    return True, pa.RecordBatchReader.from_batches(reader.schema, rest())


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
        """``reader`` as a stream of ``target`` (by column name; see ``conform_batch``)."""
        schema = target if target is not None else reader.schema
        cast = target is not None and not reader.schema.equals(target)

        def batches() -> Iterator[pa.RecordBatch]:
            try:
                for batch in reader:
                    if cast:
                        batch = conform_batch(batch, schema)
                    self.rows += batch.num_rows
                    self.bytes += batch.nbytes
                    yield batch
            except Exception as exc:
                self.error = exc
                raise

        return pa.RecordBatchReader.from_batches(schema, batches())
