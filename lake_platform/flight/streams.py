"""Result streams of DoGet: admission, cancellation, and the time limit's watchdog.

At most ``max_concurrent_queries`` streams run at once; a stream waits up to
``admission_wait_seconds`` for a slot. A stream ends early when its query is cancelled
(CancelFlightInfo, on this replica), when the server stops, when the client goes away, or when
the watchdog fires at the query timeout (even while the stream is stalled in gRPC's send).

Early starts: GetFlightInfo of a single-endpoint statement (its plan kept for the DoGet) may
start the query as soon as it has answered (``start_early``) when the plan's last run was quick
to its first batch (``early_first_batch``, default ``EARLY_FIRST_BATCH``) or, not run yet, it is
a key lookup on a scalar index, on a free slot and never on more than half of them, so
DataFusion or Lance is computing while the client asks for the ticket: the round trip between
the two calls (~0.9 ms through ADBC) overlaps the query instead of preceding it. Begun before
the answer is sent, its thread would take the GIL from the thread sending it (``Call.on_done``).
The DoGet of exactly that ticket, by the same principal, for the same kept plan, on this
replica, takes the started stream over (``stream``); anything else runs as before. A start
nobody claims within ``LAKE_FLIGHT_EARLY_START_SECONDS`` is stopped and frees its slot; a
cancelled ticket stops it at once. The result is the same stream either way: same plan, same
pinned snapshots, same batches.
"""

from __future__ import annotations

import secrets
import threading
import time
from collections.abc import Callable, Hashable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import pyarrow as pa

from lake_platform.errors import ServiceUnavailable, Throttling
from lake_platform.flight.transport import Call
from lake_platform.flight.watchdog import Watchdog
from lake_platform.observability.metrics import observe_early_start
from lake_platform.query.engine import QueryEngine
from lake_platform.query.errors import QueryCancelled, timed_out
from lake_platform.query.planner import PlannedQuery
from lake_platform.settings.flight import FlightSettings

#: Cancelled ticket ids remembered (replica-local, advisory; the oldest are forgotten first).
MAX_CANCELLED = 10_000


def _running_key(ticket_id: str) -> str:
    """A stream's key in ``Streams._running``: its ticket id (what a cancel names), made unique
    per stream (a ticket may be read more than once)."""
    return f"{ticket_id}/{secrets.token_hex(4)}"


#: How often a DoGet waiting for an early start's first batch looks at its call (seconds).
_CLAIM_POLL = 0.1
#: Only a kept plan whose last run had its first batch within this many seconds starts early.
#: The overlap gains at most the round trip between GetFlightInfo and DoGet (~1 ms), while a
#: query that keeps every core busy (a hot GROUP BY: measured 17.3 -> 18.7 ms on 2 cores) delays
#: the very RPCs it overlaps; a key lookup (~1 ms, one core) gains ~0.5 ms of its ~4.5.
EARLY_FIRST_BATCH = 0.005


@dataclass(eq=False)
class _Early:
    """A query started at GetFlightInfo, waiting for its ticket's DoGet (``Streams.start_early``).

    Owned by the starting thread until ``ready``; after that by whoever claims or drops it
    (under ``Streams._lock``), so its stream is closed and its slot released exactly once."""

    ticket_id: str
    identity: Hashable
    planned: PlannedQuery
    coalesce: bool
    key: str  # in Streams._running
    stop: threading.Event = field(default_factory=threading.Event)
    expired: threading.Event = field(default_factory=threading.Event)  # the claiming call's time limit
    ready: threading.Event = field(default_factory=threading.Event)
    call: Call | None = None  # the DoGet that claimed it
    batches: Iterator[pa.RecordBatch] | None = None
    first: pa.RecordBatch | None = None  # None: the stream ended (or stopped) before any batch
    error: BaseException | None = None
    claimed: bool = False
    dropped: bool = False
    expiry: int | None = None  # its key in Streams._early_window

    def cancelled(self) -> bool:
        call = self.call
        return self.stop.is_set() or self.expired.is_set() or (call is not None and call.is_cancelled())


class Streams:
    """The running result streams of one server. Thread-safe."""

    def __init__(
        self,
        engine: QueryEngine,
        settings: FlightSettings,
        clock: Callable[[], float],
        *,
        early_first_batch: float = EARLY_FIRST_BATCH,
    ) -> None:
        """``clock``: wall-clock seconds, to forget cancelled tickets once they have expired.
        ``early_first_batch``: a kept plan starts early only if its last run had its first
        batch within this many seconds."""
        self._engine = engine
        self.early_first_batch = early_first_batch
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
        self._early: dict[str, _Early] = {}  # ticket id -> its early start, until claimed
        self._early_max = max(1, settings.max_concurrent_queries // 2)
        self._early_window = (
            Watchdog(settings.early_start_seconds, name="lake-flight-early-start")
            if settings.early_start_seconds
            else None
        )
        self._early_pool = (
            ThreadPoolExecutor(self._early_max, thread_name_prefix="lake-flight-early")
            if self._early_window is not None
            else None
        )
        #: Early starts begun, and taken over by their DoGet (the rest were stopped unclaimed).
        self.early_started = 0
        self.early_claimed = 0

    def running(self) -> int:
        with self._lock:
            return len(self._running)

    def refuse_cancelled(self, ticket_id: str) -> None:
        """QueryCancelled if the ticket's query was cancelled on this replica."""
        with self._lock:
            if ticket_id in self._cancelled:
                raise QueryCancelled("the query was cancelled")

    def stream(
        self, call: Call, planned: PlannedQuery, ticket_id: str, identity: Hashable | None = None
    ) -> Iterator[pa.RecordBatch]:
        """The query's batches, once admitted; the slot is held until the stream ends. The
        ticket's early start (``start_early``) is taken over when ``identity`` and ``planned``
        are the ones it started for."""
        # Everything that must be undone happens inside the generator: a generator that is never
        # started (the client went away first) holds no slot, and claims no early start.
        # A writer that frames each batch in Python (grpcio) gains from fewer, larger messages;
        # the C++ data plane's calls say they do not (``DataCall.coalesce``).
        coalesce = getattr(call, "coalesce", True)
        early = self._claim_early(ticket_id, identity, planned, coalesce, call)
        if early is None:
            if not self._slots.acquire(timeout=self._settings.admission_wait_seconds):
                raise Throttling(
                    f"too many queries are running: LAKE_FLIGHT_MAX_CONCURRENT_QUERIES="
                    f"{self._settings.max_concurrent_queries} reached and no slot freed within "
                    "LAKE_FLIGHT_ADMISSION_WAIT_SECONDS="
                    f"{self._settings.admission_wait_seconds:g}; retry shortly"
                )
            stop, expired = threading.Event(), threading.Event()
            key = _running_key(ticket_id)
            with self._lock:
                self._running[key] = stop
                if self._aborting.is_set():
                    stop.set()
        else:  # admitted at GetFlightInfo: its slot and its place in _running pass to this call
            stop, expired, key = early.stop, early.expired, early.key
        limit = self._arm_time_limit(call, expired)

        def cancelled() -> bool:
            return stop.is_set() or expired.is_set() or call.is_cancelled()

        try:
            if early is None:
                yield from self._engine.stream(planned, cancelled, coalesce=coalesce, scope=identity)
            else:
                yield from self._continue(early)
            if expired.is_set():
                raise timed_out(self._engine.limits)
            if stop.is_set():
                raise QueryCancelled("the query was cancelled")
        finally:
            if limit is not None and self.time_limit is not None:
                self.time_limit.disarm(limit)
            if early is not None and early.batches is not None:
                early.batches.close()  # its engine stream: the query stops if it has not ended
            with self._lock:
                self._running.pop(key, None)
            self._slots.release()

    # -- early starts ------------------------------------------------------------------------

    def start_early(
        self,
        identity: Hashable,
        planned: PlannedQuery,
        ticket_id: str,
        *,
        coalesce: bool,
        after: Callable[[Callable[[], None]], bool] | None = None,
    ) -> None:
        """Start ``planned`` for the DoGet of ``ticket_id``, if early starts are on, the plan
        is quick (its last run had its first batch within ``early_first_batch``, or, not run
        yet, it is a key lookup on a scalar index), and a slot is free without waiting (fewer
        than half of them early starts). Never blocks, never fails: without a start the DoGet
        runs the query as before.

        ``after``: the calling RPC's ``Call.on_done``. The start is registered at once (its
        DoGet finds it), and its query begins once the RPC has sent its answer: begun
        earlier, its thread takes the GIL from the thread sending the answer the client
        waits for."""
        if self._early_window is None or self._early_pool is None or not self._quick(planned):
            return
        with self._lock:
            if (
                self._aborting.is_set()
                or len(self._early) >= self._early_max
                or ticket_id in self._early
                or not self._slots.acquire(blocking=False)
            ):
                return
            early = _Early(ticket_id, identity, planned, coalesce, _running_key(ticket_id))
            self._early[ticket_id] = early
            self._running[early.key] = early.stop
            self.early_started += 1
        early.expiry = self._early_window.arm(lambda: self._drop_early(early))
        pool = self._early_pool

        def begin() -> None:
            try:
                pool.submit(self._run_early, early)
            except RuntimeError:  # the pool is shut down: the server is closing
                early.error = ServiceUnavailable("the server is shutting down; retry on another replica")
                if self._ended(early, None):
                    self._drop_early(early)

        # Registered, so it must begin: at once unless ``after`` promises to call it.
        if after is None or not after(begin):
            begin()

    def _quick(self, planned: PlannedQuery) -> bool:
        """Known quick to its first batch: its last run was, or (never run) it is a key lookup
        Lance answers from a scalar index."""
        first = self._engine.first_batch_seconds(planned)
        if first is not None:
            return first < self.early_first_batch
        return planned.lookup is not None

    def _run_early(self, early: _Early) -> None:
        """The start's first batch (on a pool thread); then the stream waits for its DoGet."""
        batches = self._engine.stream(
            early.planned, early.cancelled, coalesce=early.coalesce, scope=early.identity
        )
        try:
            early.first = next(batches)
        except StopIteration:
            pass
        except BaseException as exc:  # noqa: BLE001 - reported by the DoGet, as if it had run it
            early.error = exc.with_traceback(None)  # its frames would keep the stream alive
        self._ended(early, batches)

    def _ended(self, early: _Early, batches: Iterator[pa.RecordBatch] | None) -> bool:
        """The start's first batch (or error) is in: it is ready. Released here if it was
        dropped meanwhile (its dropper left that to the starting thread); True: not dropped,
        its claimer or dropper releases it."""
        with self._lock:
            early.batches = batches
            early.ready.set()
            if not early.dropped:
                return True
        self._release_early(early)
        return False

    def _claim_early(
        self, ticket_id: str, identity: Hashable | None, planned: PlannedQuery, coalesce: bool, call: Call
    ) -> _Early | None:
        if self._early_window is None:
            return None
        with self._lock:
            early = self._early.get(ticket_id)
            if early is None:
                return None
            if early.identity != identity or early.planned is not planned or early.coalesce != coalesce:
                mismatch = early  # not what this call would run: stop it, run the query afresh
            else:
                del self._early[ticket_id]
                early.claimed, early.call = True, call
                self.early_claimed += 1
                mismatch = None
        if mismatch is not None:
            self._drop_early(mismatch)
            return None
        observe_early_start("claimed")
        if early.expiry is not None:
            self._early_window.disarm(early.expiry)
        return early

    def _continue(self, early: _Early) -> Iterator[pa.RecordBatch]:
        """The claimed start's batches: its first one (waited for), then the rest of its stream."""
        while not early.ready.wait(_CLAIM_POLL):
            if early.cancelled():
                early.stop.set()  # the start sees it within the engine's own poll and ends
        if early.error is not None:
            raise early.error
        if early.first is None:
            return
        yield early.first
        assert early.batches is not None
        yield from early.batches

    def _drop_early(self, early: _Early) -> None:
        """Stop an unclaimed start (its window passed, its ticket was cancelled, another plan
        or principal asked, or the server is closing); a no-op once claimed or dropped."""
        with self._lock:
            if early.claimed or early.dropped:
                return
            early.dropped = True
            early.stop.set()
            observe_early_start("dropped")
            if self._early.get(early.ticket_id) is early:
                del self._early[early.ticket_id]
            if not early.ready.is_set():
                return  # its thread releases it when the first batch (or the stop) comes
        self._release_early(early)

    def _drop_waiting(self) -> None:
        """Stop every start not claimed yet."""
        with self._lock:
            waiting = list(self._early.values())
        for early in waiting:
            self._drop_early(early)

    def _release_early(self, early: _Early) -> None:
        if self._early_window is not None and early.expiry is not None:
            self._early_window.disarm(early.expiry)
        if early.batches is not None:
            early.batches.close()
        with self._lock:
            self._running.pop(early.key, None)
        self._slots.release()

    def early_stats(self) -> dict[str, int]:
        """Early starts begun, taken over by their DoGet, and waiting for it now."""
        with self._lock:
            waiting = len(self._early)
            return {"started": self.early_started, "claimed": self.early_claimed, "waiting": waiting}

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
            early = self._early.get(ticket_id)
        if early is not None:
            self._drop_early(early)

    def finish(self, grace: float) -> None:
        """Let running streams finish for ``grace`` seconds, then stop them (and any that
        starts later). Early starts nobody claimed yet are stopped at once: a draining server
        refuses the DoGets that would claim them."""
        self._drop_waiting()
        deadline = time.monotonic() + grace
        while time.monotonic() < deadline and self.running():
            time.sleep(0.05)
        self._aborting.set()
        with self._lock:
            for event in self._running.values():
                event.set()

    def close(self) -> None:
        self._aborting.set()
        self._drop_waiting()
        if self._early_pool is not None:
            # Not cancel_futures: a start that never ran would never be ready, and a DoGet that
            # claimed it would wait for it; run, each sees its stop and ends at once.
            self._early_pool.shutdown(wait=True)
        if self._early_window is not None:
            self._early_window.close()
        if self.time_limit is not None:
            self.time_limit.close()


__all__ = ["EARLY_FIRST_BATCH", "MAX_CANCELLED", "Streams"]
