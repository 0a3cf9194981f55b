"""Input files as streams: Parquet, CSV, JSON lines and Arrow IPC, never read whole.

Each opener parses only the header or footer up front, so an unreadable file is refused before
anything is written; the rows are then read batch by batch while the engine writes them.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.csv as pcsv
import pyarrow.json as pjson
import pyarrow.parquet as pq

from lake_platform.errors import InvalidInput, TableSchemaValidationError

FORMATS = {".parquet": "parquet", ".pq": "parquet", ".csv": "csv", ".jsonl": "jsonl", ".ndjson": "jsonl",
           ".json": "jsonl", ".arrow": "arrow", ".feather": "arrow", ".ipc": "arrow", ".arrows": "arrow"}
BLOCK_SIZE = 8 << 20


class SourceError(InvalidInput):
    """An input file cannot be read (missing, unsupported, corrupt)."""


@dataclass(frozen=True)
class Source:
    path: Path
    format: str
    size: int
    mtime_ns: int


def describe(path: str | os.PathLike[str]) -> Source:
    p = Path(path)
    fmt = FORMATS.get(p.suffix.lower())
    if fmt is None:
        raise SourceError(f"cannot read {p.name}: unsupported file type {p.suffix or '(none)'!r} "
                          f"(supported: .parquet, .csv, .jsonl, .arrow)")
    try:
        st = p.stat()
    except OSError as exc:
        raise SourceError(f"cannot read {p.name}: {exc.strerror or exc}") from None
    if not p.is_file():
        raise SourceError(f"cannot read {p.name}: not a regular file")
    return Source(p, fmt, st.st_size, st.st_mtime_ns)


def open_source(source: Source) -> pa.RecordBatchReader:
    """Open one file as a RecordBatchReader (header parsed now, rows streamed later)."""
    try:
        if source.format == "parquet":
            pf = pq.ParquetFile(source.path)
            return pa.RecordBatchReader.from_batches(pf.schema_arrow, _guarded(source, pf.iter_batches(batch_size=65536)))
        if source.format == "csv":
            reader = pcsv.open_csv(source.path, read_options=pcsv.ReadOptions(block_size=BLOCK_SIZE))
            return pa.RecordBatchReader.from_batches(reader.schema, _guarded(source, reader))
        if source.format == "jsonl":
            reader = pjson.open_json(source.path, read_options=pjson.ReadOptions(block_size=BLOCK_SIZE))
            return pa.RecordBatchReader.from_batches(reader.schema, _guarded(source, reader))
        return _open_ipc(source)
    except SourceError:
        raise
    except (pa.ArrowException, OSError, ValueError) as exc:
        raise SourceError(f"cannot read {source.path.name} as {source.format}: {_short(exc)}") from None


def _open_ipc(source: Source) -> pa.RecordBatchReader:
    try:
        file_reader = pa.ipc.open_file(source.path)
    except pa.ArrowInvalid:
        stream = pa.ipc.open_stream(pa.OSFile(str(source.path)))
        return pa.RecordBatchReader.from_batches(stream.schema, _guarded(source, stream))

    def batches() -> Iterator[pa.RecordBatch]:
        for i in range(file_reader.num_record_batches):
            yield file_reader.get_batch(i)

    return pa.RecordBatchReader.from_batches(file_reader.schema, _guarded(source, batches()))


def _guarded(source: Source, batches: Iterator[pa.RecordBatch] | pa.RecordBatchReader) -> Iterator[pa.RecordBatch]:
    """Turn a parse failure halfway through a file into a SourceError naming the file."""
    iterator = iter(batches)
    while True:
        try:
            batch = next(iterator)
        except StopIteration:
            return
        except (pa.ArrowException, OSError, ValueError) as exc:
            raise SourceError(f"cannot read {source.path.name} as {source.format}: {_short(exc)}") from None
        yield batch


def open_many(
    sources: Sequence[Source], schema: pa.Schema | None = None, *, on_batch: Callable[[pa.RecordBatch], None] | None = None
) -> pa.RecordBatchReader:
    """Chain several files into one stream with one schema (the table's, else the first file's).

    Every file is opened (headers checked) before the stream starts.
    """
    if not sources:
        raise InvalidInput("no input files given")
    readers = [open_source(s) for s in sources]
    target = schema if schema is not None else readers[0].schema
    casts = [_cast_plan(r.schema, target, s) for r, s in zip(readers, sources, strict=True)]

    def batches() -> Iterator[pa.RecordBatch]:
        for reader, cast in zip(readers, casts, strict=True):
            for batch in reader:
                if cast:
                    try:
                        batch = batch.select(target.names).cast(target)
                    except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
                        raise TableSchemaValidationError(f"data does not fit the table schema: {_short(exc)}") from None
                if on_batch is not None:
                    on_batch(batch)
                yield batch

    return pa.RecordBatchReader.from_batches(target, batches())


def _cast_plan(schema: pa.Schema, target: pa.Schema, source: Source) -> bool:
    if schema.remove_metadata().equals(target.remove_metadata()):
        return False
    if sorted(schema.names) != sorted(target.names):
        raise TableSchemaValidationError(
            f"{source.path.name} has columns {schema.names}, expected {target.names}"
        )
    return True


def _short(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    return lines[0][:300] if lines else type(exc).__name__
