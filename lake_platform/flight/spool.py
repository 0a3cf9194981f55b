"""Spooled heavy results: DataFusion's stream written off the heap into Arrow IPC segments in the
results area, then served (by any replica) from there, one endpoint per segment.

When: the caller asks (the ``x-lake-spool: true`` call header; with ADBC the option
``adbc.flight.sql.rpc.call_header.x-lake-spool``), or the query's result is as big as its
tables (``PlanFacts.table_rows``: no aggregate, distinct, limit, top-n or key lookup) and they
hold ``LAKE_FLIGHT_SPOOL_MIN_ROWS`` rows or ``LAKE_FLIGHT_SPOOL_MIN_BYTES`` bytes (0: off).

How: a job thread on the planning replica streams the planned query (pinned, with the query
time limit and the process's memory pool, so memory stays bounded as when streaming) into
segments in result order; the first is small (``FIRST_SEGMENT_BYTES``) and each next one twice
as big, up to ``LAKE_FLIGHT_SPOOL_SEGMENT_BYTES``, so the first rows are readable at once.
A call that asked for several endpoints (``x-lake-spool``, or ``x-lake-endpoints: many``)
gets one endpoint per segment: GetFlightInfo waits for the job; PollFlightInfo answers at once
with progress, the endpoints of the segments written so far and a retry descriptor. Any other
call gets **one** endpoint at once (``whole_info``), whose DoGet streams every segment in
order, each as soon as it is written: a client that reads only the first endpoint gets the
whole answer, and its first batch does not wait for the spool to end.
Segment tickets are sealed (purpose "segment") with the caller's identity and the job's expiry
(``LAKE_RESULTS_TTL_SECONDS``); after that the server's own sweep (``LAKE_RESULTS_SWEEP_SECONDS``),
``lake results expire`` or the ``reclaimed_results`` asset deletes the job.
CancelFlightInfo stops the job and deletes its segments.

A job that fails closes its files and deletes its job: a full results area is RESOURCE_EXHAUSTED
(``ResultsAreaFull``), a result past ``LAKE_RESULTS_MAX_BYTES`` INVALID_ARGUMENT
(``ResultTooLarge``); the next job finds the space back.
"""

from __future__ import annotations

import logging
import secrets
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.flight as fl
from google.protobuf.timestamp_pb2 import Timestamp

from lake_platform.auth.tokens import ENVELOPE_CLAIMS, Expired, Identity, Sealer, check_owner, claim_names
from lake_platform.engine.results import ResultsArea, SegmentWriter, full_error, schema_of
from lake_platform.errors import InvalidInput, LakeError, ResultNotFound, Throttling, Unauthenticated
from lake_platform.flight import framing, proto
from lake_platform.flight.spool_follow import written_segments
from lake_platform.query.batches import split_batch
from lake_platform.query.errors import QueryCancelled, QueryTimeout, ResultTooLarge
from lake_platform.query.planner import PlannedQuery

log = logging.getLogger(__name__)

SPOOL_HEADER = "x-lake-spool"
#: The location that means "redeem the ticket on this connection" (Flight.proto).
REUSE_CONNECTION = "arrow-flight-reuse-connection://?"
#: Marks a segment ticket's handle (a statement ticket's is a JWE: it starts with "eyJ").
SEGMENT_PREFIX = b"S"
#: Marks a PollFlightInfo retry descriptor's command (not an Any: only this server reads it).
POLL_PREFIX = b"lake-poll:"
_IDENTITY = ("sub", "knd", "prj", "rol")
_SEGMENT_KEYS = frozenset({*_IDENTITY, "job", "seg", "id"}) | ENVELOPE_CLAIMS
_POLL_KEYS = frozenset({*_IDENTITY, "job", "ord"}) | ENVELOPE_CLAIMS
_JOB = "lake-results-job-"
_KEEP_FINISHED = 300.0  # seconds a finished job's state stays in memory
#: The first segment's size; each next one doubles, up to the segment setting.
FIRST_SEGMENT_BYTES = 1 << 20
#: A segment ticket's ``seg`` meaning "every segment, in order" (segment names are seg-NNNNN.arrows).
WHOLE = "all"


@dataclass
class Job:
    id: str
    identity: Identity
    expires_at: float
    ordered: bool
    estimate: int  # rows the query's tables hold (progress is rows written over this)
    rows: int = 0
    state: str = "running"  # running, done, failed, cancelled
    error: LakeError | None = None
    done: threading.Event = field(default_factory=threading.Event)
    stop: threading.Event = field(default_factory=threading.Event)
    finished_at: float = 0.0  # monotonic
    closed: list[str] = field(default_factory=list)  # segments written whole, in order
    changed: threading.Condition = field(default_factory=threading.Condition)

    def closed_one(self, name: str) -> None:
        with self.changed:
            self.closed.append(name)
            self.changed.notify_all()

    def ended(self) -> None:
        with self.changed:
            self.done.set()
            self.changed.notify_all()


@dataclass(frozen=True)
class SpoolSettings:
    min_rows: int
    min_bytes: int
    segment_bytes: int
    ttl: float
    max_jobs: int
    timeout: float  # the query time limit (0: none)
    presign: bool = False  # on S3, each endpoint also names a pre-signed HTTPS URL of its segment


class Spooler:
    """Runs spool jobs on this replica and serves any replica's segments. Thread-safe."""

    def __init__(
        self,
        area: ResultsArea,
        sealer: Sealer,
        settings: SpoolSettings,
        stream: Callable[[PlannedQuery, Callable[[], bool]], Iterator[pa.RecordBatch]],
        sizes: Callable[[Any], Any],
    ) -> None:
        """``stream``: the engine's result stream; ``sizes``: a ref's fragment sizes."""
        self.area = area
        self.sealer = sealer
        self.settings = settings
        self._stream = stream
        self._sizes = sizes
        self._jobs: dict[str, Job] = {}
        self._lock = threading.Lock()
        self._slots = threading.BoundedSemaphore(settings.max_jobs)

    # -- deciding ----------------------------------------------------------------------------

    def wanted(self, planned: PlannedQuery, asked: bool) -> bool:
        """Whether ``planned``'s result is spooled: the caller asks, or its result is as big
        as its tables (``PlanFacts.table_rows``: never a key lookup, limit, top-n or
        aggregate) and they are as big as the settings say."""
        if asked:
            return True
        s = self.settings
        if not (s.min_rows or s.min_bytes) or not planned.refs:
            return False
        rows, size = self._scanned(planned)
        if not ((s.min_rows and rows >= s.min_rows) or (s.min_bytes and size >= s.min_bytes)):
            return False
        return planned.facts.table_rows

    def _scanned(self, planned: PlannedQuery) -> tuple[int, int]:
        rows = size = 0
        for ref in planned.refs:
            for frag in self._sizes(ref):
                rows += frag.rows
                size += frag.bytes
        return rows, size

    # -- running -----------------------------------------------------------------------------

    def start(self, identity: Identity, planned: PlannedQuery, ordered: bool) -> Job:
        self._forget_finished()
        if not self._slots.acquire(blocking=False):
            raise Throttling(
                f"too many results are being spooled (LAKE_FLIGHT_SPOOL_MAX_JOBS={self.settings.max_jobs}); "
                "retry shortly"
            )
        try:
            job = Job(
                id=secrets.token_hex(12),
                identity=identity,
                expires_at=self.sealer.now() + self.settings.ttl,
                ordered=ordered,
                estimate=self._scanned(planned)[0],
            )
            self.area.create_job(identity.project, job.id, job.expires_at, planned.schema)
        except BaseException:
            self._slots.release()
            raise
        with self._lock:
            self._jobs[job.id] = job
        threading.Thread(target=self._run, args=(job, planned), name=_JOB + job.id[:8], daemon=True).start()
        return job

    def _run(self, job: Job, planned: PlannedQuery) -> None:
        project = job.identity.project
        deadline = time.monotonic() + self.settings.timeout if self.settings.timeout else None
        segments: list[dict[str, Any]] = []
        segment: SegmentWriter | None = None
        written = 0  # bytes of the closed segments

        def cancelled() -> bool:
            return job.stop.is_set() or (deadline is not None and time.monotonic() >= deadline)

        def open_segment() -> SegmentWriter:
            name = f"seg-{len(segments):05d}.arrows"
            segments.append({"name": name, "rows": 0, "bytes": 0})
            return SegmentWriter(self.area, project, job.id, name, planned.schema, ipc_file=False)

        try:
            for whole in self._stream(planned, cancelled):
                # The open segment's size (or the next one's): the first small, each next twice
                # as big up to the setting, so the first rows are readable early (``WHOLE``).
                index = len(segments) - (segment is not None)
                limit = min(self.settings.segment_bytes, FIRST_SEGMENT_BYTES << min(index, 30))
                for batch in split_batch(whole, limit):
                    if segment is None:
                        segment = open_segment()
                    segment.write(batch)
                    segments[-1]["rows"] += batch.num_rows
                    job.rows += batch.num_rows
                    size = segment.tell()
                    too_large = self.area.over_cap(written + size)
                    if too_large:
                        raise ResultTooLarge(too_large)
                    if size >= limit:
                        segment, closing = None, segment
                        segments[-1]["bytes"] = closing.close()
                        written += segments[-1]["bytes"]
                        job.closed_one(segments[-1]["name"])
            # The engine's stream ends quietly when ``cancelled()`` says so: a stop or the time
            # limit must fail the job, never leave a truncated result marked done.
            if job.stop.is_set():
                raise QueryCancelled("the query was cancelled")
            if deadline is not None and time.monotonic() >= deadline:
                raise QueryTimeout(
                    f"spooling the result ran longer than LAKE_FLIGHT_QUERY_TIMEOUT_SECONDS="
                    f"{self.settings.timeout:g} and was stopped"
                )
            if segment is None and not segments:  # an empty result is one empty segment (the schema)
                segment = open_segment()
            if segment is not None:
                segment, closing = None, segment
                segments[-1]["bytes"] = closing.close()
                job.closed_one(segments[-1]["name"])
            self.area.finish_job(project, job.id, planned.schema, segments, ordered=job.ordered)
            job.state = "done"
        except BaseException as exc:  # noqa: BLE001 - every failure ends the job and its files
            job.state = "cancelled" if job.stop.is_set() else "failed"
            error = full_error(exc)
            job.error = error if isinstance(error, LakeError) else None
            if not isinstance(error, LakeError):
                log.warning("spooling job %s failed: %s", job.id, exc)
            if segment is not None:  # closed before the delete: an open file keeps its space
                segment.discard()
            self.area.remove_job(project, job.id)
        finally:
            self._slots.release()
            job.finished_at = time.monotonic()
            job.ended()

    def wait(self, job: Job, timeout: float | None) -> None:
        """Until the job is done; raises its error (or a timeout, and stops it)."""
        if not job.done.wait(timeout):
            self.cancel_job(job.identity.project, job.id)
            raise QueryTimeout(
                "spooling the result ran longer than LAKE_FLIGHT_QUERY_TIMEOUT_SECONDS and was stopped"
            )
        if job.state != "done":
            raise job.error or QueryCancelled("spooling the result failed")

    def cancel_job(self, project: str, job_id: str) -> bool:
        with self._lock:
            job = self._jobs.get(job_id)
        if job is not None and job.identity.project == project:
            job.stop.set()
            job.done.wait(30)
        self.area.remove_job(project, job_id)
        return True

    def _forget_finished(self) -> None:
        """Drop jobs finished a while ago (a poll then reads their state from storage)."""
        cutoff = time.monotonic() - _KEEP_FINISHED
        with self._lock:
            for jid in [j for j, job in self._jobs.items() if job.done.is_set() and job.finished_at < cutoff]:
                del self._jobs[jid]

    def stop_all(self, wait: float = 5.0) -> None:
        """Stop every running job (server shutdown); their files are deleted."""
        with self._lock:
            jobs = list(self._jobs.values())
        for job in jobs:
            job.stop.set()
        deadline = time.monotonic() + wait
        for job in jobs:
            job.done.wait(max(0.0, deadline - time.monotonic()))

    def running(self) -> int:
        with self._lock:
            return sum(1 for job in self._jobs.values() if not job.done.is_set())

    # -- answering ---------------------------------------------------------------------------

    def flight_info(self, job_id: str, identity: Identity, descriptor: fl.FlightDescriptor) -> fl.FlightInfo:
        """The finished job's FlightInfo: one endpoint per segment."""
        done = self.area.done(identity.project, job_id)
        if done is None:
            raise InvalidInput("the result is still being spooled")
        expires = float(self.area.job(identity.project, job_id)["expires_at"])
        endpoints = [self._endpoint(identity, job_id, seg["name"], expires) for seg in done["segments"]]
        ordered = bool(done.get("ordered", False))
        return fl.FlightInfo(schema_of(done), descriptor, endpoints, int(done["rows"]), -1, ordered)

    def whole_info(self, job: Job, planned: PlannedQuery, descriptor: fl.FlightDescriptor) -> fl.FlightInfo:
        """A running job's FlightInfo for a client that may read only the first endpoint: one
        endpoint, whose DoGet streams every segment in order as each is written."""
        endpoint = self._endpoint(job.identity, job.id, WHOLE, job.expires_at, presign=False)
        return fl.FlightInfo(planned.schema, descriptor, [endpoint], -1, -1, job.ordered)

    def _endpoint(
        self, identity: Identity, job_id: str, name: str, expires: float, presign: bool = True
    ) -> fl.FlightEndpoint:
        ttl = max(1.0, expires - self.sealer.now())
        claims = {**identity.claims(), "job": job_id, "seg": name, "id": job_id}
        blob = SEGMENT_PREFIX + self.sealer.seal("segment", claims, ttl)
        ticket = proto.pack(proto.TicketStatementQuery(statement_handle=blob))
        url = (
            self.area.presign(identity.project, job_id, name, int(ttl))
            if presign and self.settings.presign
            else None
        )
        # The ticket first (this connection), then the bytes over HTTPS for clients that
        # fetch them themselves; a Flight client never needs the second location.
        where = [REUSE_CONNECTION, url] if url else []
        return framing.endpoint(ticket, int(expires), where)

    def open_segment(self, handle: bytes, caller: Identity | None) -> tuple[str, str, str]:
        """(project, job, segment) of a segment ticket, checked: sealed, not expired, the caller's."""
        try:
            claims = self.sealer.open("segment", handle[len(SEGMENT_PREFIX) :], what="ticket")
        except Expired:
            raise InvalidInput("the spooled result has expired; run the query again") from None
        names = claim_names(claims)
        if names != _SEGMENT_KEYS or not all(isinstance(claims[k], str) for k in ("job", "seg", "id")):
            raise Unauthenticated("invalid ticket")
        if caller is not None:
            check_owner(claims, caller, "ticket")
        if not _safe_name(claims["job"]) or not _safe_name(claims["seg"]):
            raise Unauthenticated("invalid ticket")
        return claims["prj"], claims["job"], claims["seg"]

    def read(self, project: str, job: str, seg: str) -> tuple[pa.Schema, Iterator[pa.RecordBatch]]:
        """DoGet of a segment ticket: that segment, or (``WHOLE``) every segment in order."""
        if seg == WHOLE:
            return schema_of(self.area.job(project, job)), self._whole(project, job)
        return self.read_segment(project, job, seg)

    def _whole(self, project: str, job_id: str) -> Iterator[pa.RecordBatch]:
        """Every segment of a job in order, each once it is written (``spool_follow``)."""
        job = self.local(job_id)
        try:
            for name in written_segments(self.area, project, job_id, job, self.settings.timeout or None):
                yield from self.read_segment(project, job_id, name)[1]
        except ResultNotFound:  # a failed job deletes its segments: say why it failed
            if job is not None and job.done.wait(5) and job.state != "done":  # its files go first
                raise job.error or QueryCancelled("spooling the result failed") from None
            raise

    def read_segment(self, project: str, job: str, seg: str) -> tuple[pa.Schema, Iterator[pa.RecordBatch]]:
        reader = self.area.open_segment(project, job, seg)

        def batches() -> Iterator[pa.RecordBatch]:
            try:
                while True:
                    try:
                        batch = reader.read_next_batch()
                    except StopIteration:
                        return
                    except OSError:
                        raise ResultNotFound(
                            "this segment of the spooled result was deleted while it was read "
                            "(expired, cancelled or reclaimed); run the query again"
                        ) from None
                    yield batch
            finally:
                reader.close()

        return reader.schema, batches()

    # -- polling -----------------------------------------------------------------------------

    def poll_descriptor(self, job: Job) -> fl.FlightDescriptor:
        claims = {**job.identity.claims(), "job": job.id, "ord": job.ordered}
        blob = self.sealer.seal("segment", claims, max(1.0, job.expires_at - self.sealer.now()))
        return fl.FlightDescriptor.for_command(POLL_PREFIX + blob)

    def open_poll(self, command: bytes, caller: Identity) -> tuple[str, bool]:
        try:
            claims = self.sealer.open("segment", command[len(POLL_PREFIX) :], what="poll descriptor")
        except Expired:
            raise InvalidInput("the spooled result has expired; run the query again") from None
        names = claim_names(claims)
        if names != _POLL_KEYS or not isinstance(claims["job"], str) or not _safe_name(claims["job"]):
            raise Unauthenticated("invalid poll descriptor")
        check_owner(claims, caller, "poll descriptor")
        return claims["job"], bool(claims["ord"])

    def poll(self, job_id: str, identity: Identity, retry: fl.FlightDescriptor, is_ordered: bool) -> bytes:
        """PollFlightInfo's answer for a job: the complete FlightInfo once its segments are
        ready, else the schema, progress, expiry and ``retry`` (from any replica: what is not
        known here is read from the results area)."""
        job = self.local(job_id)
        if job is not None and job.done.is_set() and job.state != "done":
            raise job.error or QueryCancelled("spooling the result failed")
        if self.area.done(identity.project, job_id) is not None:
            return poll_info(self.flight_info(job_id, identity, retry), None, 1.0, None)
        record = self.area.job(identity.project, job_id)
        expires = float(record["expires_at"])
        # The segments written so far can be read already (a later answer lists them again).
        written = list(job.closed) if job is not None else []
        endpoints = [self._endpoint(identity, job_id, name, expires) for name in written]
        pending = fl.FlightInfo(schema_of(record), retry, endpoints, -1, -1, is_ordered)
        return poll_info(pending, retry, self.progress(job_id), expires)

    def progress(self, job_id: str) -> float | None:
        with self._lock:
            job = self._jobs.get(job_id)
        return None if job is None or not job.estimate else min(0.99, job.rows / job.estimate)

    def local(self, job_id: str) -> Job | None:
        with self._lock:
            return self._jobs.get(job_id)


def poll_info(
    info: fl.FlightInfo, descriptor: fl.FlightDescriptor | None, progress: float | None, expires: float | None
) -> bytes:
    """A serialized ``PollInfo``: ``info``, and while the result is not ready, the descriptor to
    poll again with, the progress and the expiry."""
    poll = proto.PollInfo(info=info.serialize())
    if descriptor is not None:
        poll.flight_descriptor = descriptor.serialize()
    if progress is not None:
        poll.progress = progress
    if expires is not None:
        poll.expiration_time = Timestamp(seconds=int(expires)).SerializeToString()
    return poll.SerializeToString()  # type: ignore[no-any-return]


def _safe_name(name: str) -> bool:
    return 0 < len(name) <= 64 and all(c.isalnum() or c in "-._" for c in name) and not name.startswith(".")


__all__ = [
    "FIRST_SEGMENT_BYTES",
    "POLL_PREFIX",
    "SEGMENT_PREFIX",
    "SPOOL_HEADER",
    "WHOLE",
    "Job",
    "SpoolSettings",
    "Spooler",
    "poll_info",
]
