"""Input files as streams: Parquet, CSV, JSON lines and Arrow IPC, never read whole.

Each opener parses only the header or footer up front, so an unreadable file is refused before
anything is written; the rows are then read batch by batch while the engine writes them.

Two rules keep a file's content out of every error (a producer may point a link at a file it
cannot read itself, and errors reach logs, run metadata and quarantine notes):

- A symbolic link is followed only when its target stays in the folder that holds the link
  (``within``, by default the named path's own folder). Anything else is refused by name.
- Errors name the file (the name it was given, never a link's target), the kind of problem
  and a position (row, column count, type). Reader messages are never passed through: Arrow
  quotes the offending line, value or column name.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.csv as pcsv
import pyarrow.json as pjson
import pyarrow.parquet as pq

from lake_platform.catalog.conform import check_input, conform_batch
from lake_platform.errors import InvalidInput, TableSchemaValidationError

FORMATS = {
    ".parquet": "parquet",
    ".pq": "parquet",
    ".csv": "csv",
    ".jsonl": "jsonl",
    ".ndjson": "jsonl",
    ".json": "jsonl",
    ".arrow": "arrow",
    ".feather": "arrow",
    ".ipc": "arrow",
    ".arrows": "arrow",
}
BLOCK_SIZE = 8 << 20


class SourceError(InvalidInput):
    """An input file cannot be read (missing, unsupported, corrupt)."""


@dataclass(frozen=True)
class Source:
    path: Path  # resolved: no link left to follow
    format: str
    size: int
    mtime_ns: int
    name: str = ""  # the name the file was given (a link's own name), for messages

    @property
    def label(self) -> str:
        return self.name or self.path.name


def confined(path: str | os.PathLike[str], within: Path | None = None, *, name: str | None = None) -> Path:
    """``path`` resolved, or SourceError when it resolves outside ``within``.

    ``within`` defaults to the resolved folder the path names: links in the folder's own path
    are the caller's choice; only the file itself (and links it leads through) must stay inside.
    """
    p = Path(path).absolute()
    label = name or p.name
    folder = within if within is not None else p.parent.resolve()
    real = p.resolve()
    if not real.is_relative_to(folder):
        raise SourceError(f"refused {label}: it is a symbolic link that leads outside its folder")
    return real


def describe(path: str | os.PathLike[str], *, within: Path | None = None, name: str | None = None) -> Source:
    p = Path(path)
    label = name or p.name
    fmt = FORMATS.get(p.suffix.lower())
    if fmt is None:
        raise SourceError(
            f"cannot read {label}: unsupported file type {p.suffix or '(none)'!r} "
            f"(supported: .parquet, .csv, .jsonl, .arrow)"
        )
    real = confined(p, within, name=label)
    try:
        st = real.stat()
    except OSError as exc:
        raise SourceError(f"cannot read {label}: {exc.strerror or 'not readable'}") from None
    if not real.is_file():
        raise SourceError(f"cannot read {label}: not a regular file")
    return Source(real, fmt, st.st_size, st.st_mtime_ns, label)


def open_source(
    source: Source, types: pa.Schema | None = None, *, block_size: int = BLOCK_SIZE
) -> pa.RecordBatchReader:
    """Open one file as a RecordBatchReader (header parsed now, rows streamed later; CSV and
    JSON lines parsed ``block_size`` bytes at a time, their types inferred from the first).

    ``types`` (the table's schema) is how text formats read the table's columns: CSV and JSON
    lines carry no types, so their values are parsed straight into the table's type (a value
    that does not fit fails the file, naming the column and position, never truncated) instead
    of a guess (every integer column would be int64, and a column of whole numbers would not be
    a double). Columns the table lacks are inferred. A JSON line that omits a key reads as null
    there, as JSON lines do. Parquet and Arrow IPC declare their types: ``types`` is not used.
    """
    try:
        if source.format == "parquet":
            pf = pq.ParquetFile(source.path)
            return pa.RecordBatchReader.from_batches(
                pf.schema_arrow, _guarded(source, pf.iter_batches(batch_size=65536))
            )
        if source.format == "csv":
            convert = pcsv.ConvertOptions(column_types={f.name: f.type for f in types} if types else None)
            reader = pcsv.open_csv(
                source.path, read_options=pcsv.ReadOptions(block_size=block_size), convert_options=convert
            )
            return pa.RecordBatchReader.from_batches(reader.schema, _guarded(source, reader, bool(types)))
        if source.format == "jsonl":
            parse = (
                pjson.ParseOptions(explicit_schema=types, unexpected_field_behavior="infer")
                if types
                else None
            )
            reader = pjson.open_json(
                source.path, read_options=pjson.ReadOptions(block_size=block_size), parse_options=parse
            )
            return pa.RecordBatchReader.from_batches(reader.schema, _guarded(source, reader, bool(types)))
        return _open_ipc(source)
    except SourceError:
        raise
    except (pa.ArrowException, OSError, ValueError) as exc:
        raise _unreadable(source, exc, None, bool(types) and source.format in ("csv", "jsonl")) from None


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


def _guarded(
    source: Source, batches: Iterator[pa.RecordBatch] | pa.RecordBatchReader, typed: bool = False
) -> Iterator[pa.RecordBatch]:
    """Turn a parse failure halfway through a file into a SourceError naming the file and the
    rows read before the failing block (readers do not track the exact row)."""
    iterator = iter(batches)
    rows = 0
    while True:
        try:
            batch = next(iterator)
        except StopIteration:
            return
        except (pa.ArrowException, OSError, ValueError) as exc:
            raise _unreadable(source, exc, rows, typed) from None
        rows += batch.num_rows
        yield batch


def open_many(
    sources: Sequence[Source],
    schema: pa.Schema | None = None,
    *,
    on_batch: Callable[[pa.RecordBatch], None] | None = None,
    optional: frozenset[str] = frozenset(),
) -> pa.RecordBatchReader:
    """Chain several files into one stream with one schema (the table's, else the first file's).

    Every file is opened (headers checked) before the stream starts.
    """
    readers = open_all(sources, schema)
    return chain(sources, readers, schema if schema is not None else readers[0].schema, optional, on_batch)


def open_all(sources: Sequence[Source], types: pa.Schema | None = None) -> list[pa.RecordBatchReader]:
    """Open every file (headers parsed, nothing read yet); SourceError on the first that fails.
    ``types``: the table's schema, for text formats (``open_source``)."""
    if not sources:
        raise InvalidInput("no input files given")
    return [open_source(s, types) for s in sources]


def chain(
    sources: Sequence[Source],
    readers: Sequence[pa.RecordBatchReader],
    target: pa.Schema,
    optional: frozenset[str] = frozenset(),
    on_batch: Callable[[pa.RecordBatch], None] | None = None,
) -> pa.RecordBatchReader:
    """One stream of ``target`` from opened files. Each file is checked against ``target`` before
    the stream starts: its columns by name, each type converting losslessly (never parsed, never
    narrowed); it may lack only the ``optional`` columns (ones its write adds), read as null."""
    casts = [check_input(target, r.schema, optional, s.label) for r, s in zip(readers, sources, strict=True)]

    def batches() -> Iterator[pa.RecordBatch]:
        for reader, cast in zip(readers, casts, strict=True):
            for batch in reader:
                if cast:
                    batch = conform_batch(batch, target)
                if on_batch is not None:
                    on_batch(batch)
                yield batch

    return pa.RecordBatchReader.from_batches(target, batches())


#: What a reader's message may contribute: fixed phrases and numbers, never quoted text.
_FACTS: list[tuple[re.Pattern[str], Callable[..., str]]] = [
    (re.compile(r"Expected (\d+) columns?, got (\d+)"), "expected {} columns, got {}".format),
    (re.compile(r"In CSV column #(\d+)"), lambda n: f"in column {int(n) + 1}"),
    (re.compile(r"conversion error to ([\w\[\]]+)"), "a value does not convert to {}".format),
    (
        re.compile(
            r"changed from (number|string|boolean|null|object|array) to "
            r"(number|string|boolean|null|object|array)"
        ),
        "a field changed from {} to {}".format,
    ),
    (re.compile(r"JSON parse error"), lambda: "malformed JSON"),
    (re.compile(r"CSV parse error"), lambda: "malformed CSV"),
    (re.compile(r"magic bytes not found|not a parquet file", re.IGNORECASE), lambda: "not a Parquet file"),
    (
        re.compile(r"Not an Arrow file|metadata bytes|Invalid IPC|IPC stream", re.IGNORECASE),
        lambda: "not an Arrow IPC file or stream",
    ),
    (re.compile(r"Unexpected end of|premature end|truncated", re.IGNORECASE), lambda: "the file ends early"),
]
_POSITION = re.compile(r"\bin row (\d+)\b|\bRow #(\d+)\b")


#: How far the failure path re-reads a CSV to find the line whose field count is wrong.
LOCATE_MAX_BYTES = 256 << 20


def _bad_csv_line(path: Path, expected: int) -> int | None:
    """The 1-based line of the first record without ``expected`` fields (Arrow's streaming reader
    does not track it), or None past ``LOCATE_MAX_BYTES``. Reads, counts, and keeps nothing."""
    import csv

    read = 0

    def lines(f: Iterator[str]) -> Iterator[str]:
        nonlocal read
        for text in f:
            read += len(text)
            yield text

    try:
        with path.open(newline="", encoding="utf-8", errors="replace") as f:
            reader = csv.reader(lines(f))
            for record in reader:
                if record and len(record) != expected:
                    return reader.line_num
                if read > LOCATE_MAX_BYTES:
                    return None
    except (OSError, csv.Error):
        return None
    return None


def _unreadable(
    source: Source, exc: BaseException, rows_before: int | None, typed: bool = False
) -> SourceError | TableSchemaValidationError:
    """A SourceError naming the file, the kind of problem and a position, and nothing it read.

    ``typed``: the text was being parsed into the table's types, so a value that does not
    convert is a value that does not fit the table (TableSchemaValidationError, same text)."""
    if isinstance(exc, OSError) and not isinstance(exc, pa.ArrowException):
        return SourceError(f"cannot read {source.label}: {exc.strerror or 'I/O error'}")
    first = (str(exc).strip().splitlines() or [""])[0]
    kinds = [say(*found.groups()) for pattern, say in _FACTS if (found := pattern.search(first))]
    if len(kinds) > 1:  # "malformed CSV" says less than "expected 2 columns, got 3"
        kinds = [k for k in kinds if not k.startswith("malformed ")] or kinds
    facts = kinds or [f"malformed {source.format} data ({type(exc).__name__})"]
    where = _POSITION.search(first)
    columns = re.search(r"Expected (\d+) columns?, got (\d+)", first)
    line = _bad_csv_line(source.path, int(columns.group(1))) if source.format == "csv" and columns else None
    if line is not None:
        facts.append(f"at line {line}")
    elif where:
        facts.append(f"at row {(rows_before or 0) + int(where.group(1) or where.group(2)) + 1}")
    elif rows_before is not None:
        facts.append(f"after row {rows_before}")
    message = f"cannot read {source.label} as {source.format}: {', '.join(facts)}"
    if typed and "conversion error" in first:
        return TableSchemaValidationError(message + " (the table's type for that column)")
    return SourceError(message)
