"""Buffered results for QueryTable. The spec answers an Arrow IPC *file*, which cannot stream
(its footer comes last), so a large result must not be built in memory: below the inline
threshold (``LAKE_REST_INLINE_MAX_ROWS`` / ``_BYTES``) the batches are kept and answered
inline; once the result passes it, what was kept and everything after is written to the
warehouse's results area (``<warehouse root>/_results/<project>/<handle>/<n>.arrow``) as Arrow
IPC file segments, each at most the inline size, through a streaming writer; the answer is a
handle and the segment URLs (``GET /v1/results/{handle}/{n}``), each served by streaming the
file. Memory stays bounded by the inline threshold plus one batch.

Results are not expired by the server yet: remove ``_results/`` older than your retention.
"""

from __future__ import annotations

import re
import secrets
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.fs as pafs

from lake_platform.engine import storage
from lake_platform.errors import InvalidInput, NamespaceNotFound

RESULTS_DIR = "_results"
_HANDLE = re.compile(r"^[a-z_][a-z0-9_]{0,62}\.[a-z_][a-z0-9_]{0,62}\.[0-9a-f]{32}$")


def filesystem(root: str, storage_options: dict[str, str]) -> tuple[pafs.FileSystem, str]:
    fs, path = storage.filesystem(root, storage_options)
    return fs, path.rstrip("/")


@dataclass
class Spooled:
    handle: str
    segments: int
    rows: int


@dataclass
class Collector:
    """Keeps batches until a threshold, then spools everything to segment files."""

    schema: pa.Schema
    max_rows: int
    max_bytes: int
    fs: pafs.FileSystem
    folder: str  # <root>/_results/<project>
    project: str
    warehouse: str
    kept: list[pa.RecordBatch] = field(default_factory=list)
    rows: int = 0
    nbytes: int = 0
    handle: str | None = None
    _writer: Any = None
    _sink: Any = None
    _segment_bytes: int = 0
    segments: int = 0

    def add(self, batch: pa.RecordBatch) -> None:
        if self.max_bytes and batch.nbytes > self.max_bytes and batch.num_rows > 1:
            # Bound every segment, whatever size of batch the scan produced (slices share buffers).
            step = max(1, batch.num_rows * self.max_bytes // batch.nbytes)
            for start in range(0, batch.num_rows, step):
                self._add(batch.slice(start, step))
            return
        self._add(batch)

    def _add(self, batch: pa.RecordBatch) -> None:
        self.rows += batch.num_rows
        self.nbytes += batch.nbytes
        if self.handle is None:
            self.kept.append(batch)
            if self.rows > self.max_rows or self.nbytes > self.max_bytes:
                self._spool()
            return
        self._write(batch)

    def _spool(self) -> None:
        self.handle = f"{self.project}.{self.warehouse}.{secrets.token_hex(16)}"
        self.fs.create_dir(f"{self.folder}/{self.handle}", recursive=True)
        kept, self.kept = self.kept, []
        for batch in kept:
            self._write(batch)

    def _write(self, batch: pa.RecordBatch) -> None:
        if self._writer is None or self._segment_bytes >= max(self.max_bytes, 1):
            self._close_segment()
            path = f"{self.folder}/{self.handle}/{self.segments:05d}.arrow"
            self._sink = self.fs.open_output_stream(path)
            self._writer = pa.ipc.new_file(self._sink, self.schema)
            self.segments += 1
            self._segment_bytes = 0
        self._writer.write_batch(batch)
        self._segment_bytes += batch.nbytes

    def _close_segment(self) -> None:
        if self._writer is not None:
            self._writer.close()
            self._sink.close()
            self._writer = self._sink = None

    def finish(self) -> bytes | Spooled:
        if self.handle is None:
            sink = pa.BufferOutputStream()
            with pa.ipc.new_file(sink, self.schema) as writer:
                for batch in self.kept:
                    writer.write_batch(batch)
            return sink.getvalue().to_pybytes()
        self._close_segment()
        return Spooled(self.handle, self.segments, self.rows)

    def abort(self) -> None:
        self._close_segment()
        if self.handle is not None:
            try:
                self.fs.delete_dir(f"{self.folder}/{self.handle}")
            except OSError:
                pass


def parse_handle(handle: str, project: str) -> tuple[str, str]:
    """(project, warehouse) of a handle the caller may fetch; anything else looks missing."""
    if not _HANDLE.fullmatch(handle or ""):
        raise InvalidInput("malformed result handle")
    owner, warehouse, _ = handle.split(".")
    if project not in ("*", owner):
        raise NamespaceNotFound("no such result")
    return owner, warehouse


def read_segment(fs: pafs.FileSystem, path: str, chunk: int = 1 << 20) -> Iterator[bytes]:
    with fs.open_input_stream(path) as stream:
        while True:
            data = stream.read(chunk)
            if not data:
                return
            yield data
