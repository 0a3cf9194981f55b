"""QueryTable's handle protocol, for a client that asks for it (``X-Lake-Result: handle`` or
``?result=handle``; everyone else gets the streamed Arrow file of ``rest/arrow_file.py``). Below
the inline threshold (``LAKE_REST_INLINE_MAX_ROWS`` / ``_BYTES``) the batches are kept and
answered inline as an Arrow IPC file; once the result passes it, what was kept and everything
after is written as a job of the lake's one results area (``LAKE_RESULTS_ROOT``, shared with
Flight SQL's spool: ``engine/results.py``) as Arrow IPC file segments, each at most the inline
size, through a streaming writer; the answer is a handle and the segment URLs
(``GET /v1/results/{handle}/{n}``), each served by streaming the file. Memory stays bounded by
the inline threshold plus one batch.

The job has Flight's layout and metadata: ``job.json`` (its expiry, ``LAKE_RESULTS_TTL_SECONDS``
from the spool's start) is written before any segment, ``done.json`` last, so the
``reclaimed_results`` asset reclaims REST results exactly as it reclaims Flight's. Segments are
named ``seg-NNNNN.arrow`` (IPC files; Flight's ``.arrows`` are IPC streams).

The handle is ``<project>.<job id>``: 128 random bits, fetchable only by principals of its
project (any other caller sees it missing) and only until its expiry.

A spool that fails (a full disk: ``ResultsAreaFull``, 503 with Retry-After; a result past
``LAKE_RESULTS_MAX_BYTES``: ``ResultTooLarge``, 400) closes its files and deletes its job before
it raises, so the space is back for the next query.
"""

from __future__ import annotations

import re
import secrets
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from lake_platform.engine.results import ResultsArea, SegmentWriter, full_error
from lake_platform.errors import InvalidInput, NamespaceNotFound, ResultNotFound
from lake_platform.query.errors import ResultTooLarge
from lake_platform.rest.arrow_file import whole_file
from lake_platform.settings import LakeSettings

_HANDLE = re.compile(r"^(?P<project>[a-z_][a-z0-9_]{0,62})\.(?P<job>[0-9a-f]{32})$")
_AREAS: dict[tuple[str, tuple[tuple[str, str], ...], int], ResultsArea] = {}


def area(settings: LakeSettings) -> ResultsArea:
    """The results area of these settings (one per root, options and cap: its filesystem is reused)."""
    options = settings.storage_options(settings.results_root)
    key = (settings.results_root, tuple(sorted(options.items())), settings.results_max_bytes)
    found = _AREAS.get(key)
    if found is None:
        found = _AREAS.setdefault(key, ResultsArea.of(settings))
    return found


def segment_name(n: int) -> str:
    return f"seg-{n:05d}.arrow"


@dataclass
class Spooled:
    handle: str
    segments: int
    rows: int
    expires_at: float


@dataclass
class Collector:
    """Keeps batches until a threshold, then spools everything to segment files of a job."""

    schema: pa.Schema
    max_rows: int
    max_bytes: int
    area: ResultsArea
    project: str
    ttl: float
    kept: list[pa.RecordBatch] = field(default_factory=list)
    rows: int = 0
    nbytes: int = 0
    job: str | None = None
    expires_at: float = 0.0
    _segment: SegmentWriter | None = None
    _written: int = 0  # bytes of the closed segments
    _segments: list[dict[str, Any]] = field(default_factory=list)

    def add(self, batch: pa.RecordBatch) -> None:
        try:
            if self.max_bytes and batch.nbytes > self.max_bytes and batch.num_rows > 1:
                # Bound every segment, whatever size of batch the scan produced (slices share buffers).
                step = max(1, batch.num_rows * self.max_bytes // batch.nbytes)
                for start in range(0, batch.num_rows, step):
                    self._add(batch.slice(start, step))
                return
            self._add(batch)
        except BaseException as exc:
            self.abort()
            if full_error(exc) is exc:
                raise
            raise full_error(exc) from exc

    def _add(self, batch: pa.RecordBatch) -> None:
        self.rows += batch.num_rows
        self.nbytes += batch.nbytes
        if self.job is None:
            self.kept.append(batch)
            if self.rows > self.max_rows or self.nbytes > self.max_bytes:
                self._spool()
            return
        self._write(batch)

    def _spool(self) -> None:
        self.job = secrets.token_hex(16)
        self.expires_at = time.time() + self.ttl
        # job.json first: the job is never without its expiry, so reclaim can always judge it.
        self.area.create_job(self.project, self.job, self.expires_at, self.schema)
        kept, self.kept = self.kept, []
        for batch in kept:
            self._write(batch)

    def _write(self, batch: pa.RecordBatch) -> None:
        assert self.job is not None
        if self._segment is not None and self._segment.tell() >= max(self.max_bytes, 1):
            self._close_segment()
        if self._segment is None:
            name = segment_name(len(self._segments))
            self._segment = SegmentWriter(self.area, self.project, self.job, name, self.schema, ipc_file=True)
            self._segments.append({"name": name, "rows": 0, "bytes": 0})
        self._segment.write(batch)
        self._segments[-1]["rows"] += batch.num_rows
        self._segments[-1]["bytes"] += batch.nbytes
        too_large = self.area.over_cap(self._written + self._segment.tell())
        if too_large:
            raise ResultTooLarge(too_large)

    def _close_segment(self) -> None:
        if self._segment is not None:
            segment, self._segment = self._segment, None
            self._written += segment.close()

    def finish(self) -> bytes | Spooled:
        if self.job is None:
            return whole_file(self.schema, self.kept)
        try:
            self._close_segment()
            self.area.finish_job(self.project, self.job, self.schema, self._segments, ordered=False)
        except BaseException as exc:
            self.abort()
            if full_error(exc) is exc:
                raise
            raise full_error(exc) from exc
        return Spooled(f"{self.project}.{self.job}", len(self._segments), self.rows, self.expires_at)

    def abort(self) -> None:
        """Close every file and delete the job (idempotent: a failed add or finish did already)."""
        if self._segment is not None:
            segment, self._segment = self._segment, None
            segment.discard()
        if self.job is not None:
            self.area.remove_job(self.project, self.job)


def parse_handle(handle: str, project: str) -> tuple[str, str]:
    """(project, job) of a handle the caller may fetch; another project's looks missing."""
    match = _HANDLE.fullmatch(handle or "")
    if match is None:
        raise InvalidInput("malformed result handle")
    if project not in ("*", match["project"]):
        raise NamespaceNotFound("no such result")
    return match["project"], match["job"]


def segment_path(results: ResultsArea, project: str, job: str, n: int, now: float) -> str:
    """The path of segment ``n`` of a finished, unexpired job; ResultNotFound otherwise."""
    done = results.done(project, job)
    if done is None:
        raise ResultNotFound("no such result")
    expires = float(results.job(project, job)["expires_at"])
    if expires <= now:
        raise ResultNotFound("the spooled result has expired; run the query again")
    segments = done.get("segments", [])
    if not 0 <= n < len(segments):
        raise ResultNotFound(f"the result has {len(segments)} segments; there is no segment {n}")
    return f"{results.job_dir(project, job)}/{segments[n]['name']}"


def read_segment(results: ResultsArea, path: str, chunk: int = 1 << 20) -> Iterator[bytes]:
    """The segment's bytes; opened now, so a segment reclaimed since is a 404, not a cut body."""
    try:
        stream = results.fs.open_input_stream(path)
    except FileNotFoundError:
        raise ResultNotFound(
            "the spooled result is gone (expired or reclaimed); run the query again"
        ) from None

    def chunks() -> Iterator[bytes]:
        with stream:
            while True:
                data = stream.read(chunk)
                if not data:
                    return
                yield data

    return chunks()
