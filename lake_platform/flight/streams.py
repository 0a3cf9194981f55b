"""Result streams of DoGet: admission, cancellation, and the time limit's watchdog.

At most ``max_concurrent_queries`` streams run at once; a stream waits up to
``admission_wait_seconds`` for a slot. A stream ends early when its query is cancelled
(CancelFlightInfo, on this replica), when the server stops, when the client goes away, or when
the watchdog fires at the query timeout (even while the stream is stalled in gRPC's send).
"""

from __future__ import annotations

import secrets
import threading
import time
from collections.abc import Callable, Iterator

import pyarrow as pa

from lake_platform.errors import Throttling
from lake_platform.flight.settings import FlightSettings
from lake_platform.flight.transport import Call
from lake_platform.flight.watchdog import Watchdog
from lake_platform.query.engine import QueryEngine
from lake_platform.query.errors import QueryCancelled, timed_out
from lake_platform.query.planner import PlannedQuery

#: Cancelled ticket ids remembered (replica-local, advisory; the oldest are forgotten first).
MAX_CANCELLED = 10_000


class Streams:
    """The running result streams of one server. Thread-safe."""

    def __init__(self, engine: QueryEngine, settings: FlightSettings, clock: Callable[[], float]) -> None:
        """``clock``: wall-clock seconds, to forget cancelled tickets once they have expired."""
        self._engine = engine
        self._settings = settings
        self._clock = clock
        self._slots = threading.BoundedSemaphore(settings.max_concurrent_queries)
        self.time_limit = (
            Watchdog(settings.query_timeout_seconds, name="lake-flight-query-timeout")
            if settings.query_timeout_seconds
            else None
        )
        self._running: dict[str, threading.Event] = {}  # "<ticket id>/<random>" -> stop
        self._cancelled: dict[str, float] = {}  # ticket id -> its expiry (epoch seconds)
        self._lock = threading.Lock()
        self._aborting = threading.Event()

    def running(self) -> int:
        with self._lock:
            return len(self._running)

    def refuse_cancelled(self, ticket_id: str) -> None:
        """QueryCancelled if the ticket's query was cancelled on this replica."""
        with self._lock:
            if ticket_id in self._cancelled:
                raise QueryCancelled("the query was cancelled")

    def stream(self, call: Call, planned: PlannedQuery, ticket_id: str) -> Iterator[pa.RecordBatch]:
        """The query's batches, once admitted; the slot is held until the stream ends."""
        # Everything that must be undone happens inside the generator: a generator that is never
        # started (the client went away first) holds no slot.
        if not self._slots.acquire(timeout=self._settings.admission_wait_seconds):
            raise Throttling(
                f"too many queries are running: LAKE_FLIGHT_MAX_CONCURRENT_QUERIES="
                f"{self._settings.max_concurrent_queries} reached and no slot freed within "
                f"LAKE_FLIGHT_ADMISSION_WAIT_SECONDS={self._settings.admission_wait_seconds:g}; retry shortly"
            )
        stop = threading.Event()
        expired = threading.Event()
        key = f"{ticket_id}/{secrets.token_hex(4)}"
        with self._lock:
            self._running[key] = stop
            if self._aborting.is_set():
                stop.set()
        limit = self._arm_time_limit(call, expired)

        def cancelled() -> bool:
            return stop.is_set() or expired.is_set() or call.is_cancelled()

        # A writer that frames each batch in Python (grpcio) gains from fewer, larger messages;
        # the C++ data plane's calls say they do not (``DataCall.coalesce``).
        coalesce = getattr(call, "coalesce", True)
        try:
            yield from self._engine.stream(planned, cancelled, coalesce=coalesce)
            if expired.is_set():
                raise timed_out(self._engine.limits)
            if stop.is_set():
                raise QueryCancelled("the query was cancelled")
        finally:
            if limit is not None and self.time_limit is not None:
                self.time_limit.disarm(limit)
            with self._lock:
                self._running.pop(key, None)
            self._slots.release()

    def _arm_time_limit(self, call: Call, expired: threading.Event) -> int | None:
        """End the stream at the query timeout, whatever it is doing.

        The engine checks the time limit between batches, but a client that stops reading
        stalls the stream inside gRPC's send: no batch is asked for, and the query would hold
        its admission slot as long as the client keeps the connection. The watchdog ends the
        call with DEADLINE_EXCEEDED from outside; gRPC then drops the stream, which closes the
        query (and frees its slot) on the thread that runs it."""
        if self.time_limit is None:
            return None
        limits = self._engine.limits

        def expire() -> None:
            expired.set()
            call.end(timed_out(limits))

        return self.time_limit.arm(expire)

    def cancel(self, ticket_id: str, expires_at: float) -> None:
        """Stop the ticket's running streams on this replica and refuse it from now on (until
        ``expires_at``, when the ticket could not be used anyway)."""
        with self._lock:
            self._cancelled[ticket_id] = expires_at
            now = self._clock()
            for tid in [t for t, exp in self._cancelled.items() if exp < now]:
                del self._cancelled[tid]
            while len(self._cancelled) > MAX_CANCELLED:
                del self._cancelled[next(iter(self._cancelled))]
            for key, event in self._running.items():
                if key.split("/", 1)[0] == ticket_id:
                    event.set()

    def finish(self, grace: float) -> None:
        """Let running streams finish for ``grace`` seconds, then stop them (and any that
        starts later)."""
        deadline = time.monotonic() + grace
        while time.monotonic() < deadline and self.running():
            time.sleep(0.05)
        self._aborting.set()
        with self._lock:
            for event in self._running.values():
                event.set()

    def close(self) -> None:
        if self.time_limit is not None:
            self.time_limit.close()


__all__ = ["MAX_CANCELLED", "Streams"]
