"""Early starts (``Streams.start_early``): a query started at GetFlightInfo is taken over by
exactly its ticket's DoGet, or stopped with its slot freed; it never takes a slot a DoGet is
waiting for, and its errors reach the DoGet as if the DoGet had run the query.

The engine here is a stand-in that yields a few batches and records what happened to its
stream; the real path (a server, ADBC) is in ``test_early_start``."""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable, Hashable, Iterator
from typing import Any

import pyarrow as pa
import pytest

from lake_platform.auth.tokens import Identity
from lake_platform.errors import InvalidInput, ServiceUnavailable, SettingsError, Throttling
from lake_platform.flight.streams import EARLY_FIRST_BATCH, Streams
from lake_platform.observability.metrics import REGISTRY
from lake_platform.query.errors import QueryCancelled
from lake_platform.query.facts import PlanFacts
from lake_platform.query.limits import QueryLimits
from lake_platform.query.planner import PlannedQuery
from lake_platform.settings.flight import flight_settings
from lake_platform_tests.flight.conftest import wait_until

ALICE = Identity("alice", "user", "p", "reader")
BOB = Identity("bob", "user", "p", "reader")
SCHEMA = pa.schema([("v", pa.int64())])


def _batch(v: int) -> pa.RecordBatch:
    return pa.record_batch([pa.array([v])], schema=SCHEMA)


class _Engine:
    """Streams ``batches`` (then raises ``error``), recording each stream's start and end."""

    def __init__(self, batches: int = 3, error: Exception | None = None) -> None:
        self.limits = QueryLimits()
        self.batches = batches
        self.error = error
        self.started: list[str] = []  # the thread each stream started on
        self.closed = 0
        self._count = threading.Lock()  # streams close on many threads at once
        self.hold = threading.Event()  # set: the first batch waits for it (until cancelled)
        self.hold.set()

    def first_batch_seconds(self, planned: PlannedQuery) -> float | None:
        return _FIRST_BATCH.get(planned)

    def stream(
        self,
        planned: PlannedQuery,
        cancelled: Callable[[], bool],
        *,
        coalesce: bool = True,
        scope: Hashable | None = None,
    ) -> Iterator[pa.RecordBatch]:
        self.started.append(threading.current_thread().name)
        try:
            while not self.hold.wait(0.01):
                if cancelled():
                    return
            for v in range(self.batches):
                if cancelled():
                    return
                yield _batch(v)
            if self.error is not None:
                raise self.error
        finally:
            with self._count:
                self.closed += 1


class _Call:
    def __init__(self) -> None:
        self.cancelled = False

    def is_cancelled(self) -> bool:
        return self.cancelled

    def end(self, error: BaseException) -> None:
        self.cancelled = True


#: What each plan's last run took to its first batch, as the engine would remember it.
_FIRST_BATCH: weakref.WeakKeyDictionary[PlannedQuery, float] = weakref.WeakKeyDictionary()
#: Stands for the scalar-index lookup of a plan Lance answers (``PlannedQuery.lookup``).
_KEY_LOOKUP: Any = object()


def _planned(first_batch: float | None = 0.001, sql: str = "SELECT v", lookup: bool = False) -> PlannedQuery:
    planned = PlannedQuery(
        sql=sql,
        df=None,
        schema=SCHEMA,
        refs=(),
        parameters=0,
        facts=PlanFacts(None),
        lookup=_KEY_LOOKUP if lookup else None,
    )
    if first_batch is not None:
        _FIRST_BATCH[planned] = first_batch
    return planned


def _streams(engine: _Engine, **settings: Any) -> Streams:
    values: dict[str, Any] = {
        "early_start_seconds": 5.0,
        "max_concurrent_queries": 4,
        "admission_wait_seconds": 0,
    }
    values.update(settings)
    return Streams(engine, flight_settings(**values), clock=lambda: 0.0)  # type: ignore[arg-type]


def _values(batches: Iterator[pa.RecordBatch]) -> list[int]:
    return [v for b in batches for v in b.column(0).to_pylist()]


@pytest.fixture
def engine() -> _Engine:
    return _Engine()


def _early_metric(outcome: str) -> float:
    return REGISTRY.get_sample_value("lake_early_starts_total", {"outcome": outcome}) or 0.0


def test_the_tickets_doget_takes_over_the_started_query(engine: _Engine) -> None:
    claimed = _early_metric("claimed")
    streams = _streams(engine)
    planned = _planned()
    streams.start_early(ALICE, planned, "t1", coalesce=True)
    assert wait_until(lambda: engine.started)
    assert engine.started[0].startswith("lake-flight-early")  # started before any DoGet
    assert streams.running() == 1
    assert _values(streams.stream(_Call(), planned, "t1", ALICE)) == [0, 1, 2]
    assert len(engine.started) == 1  # the DoGet ran no query of its own
    assert streams.early_stats() == {"started": 1, "claimed": 1, "waiting": 0}
    assert streams.running() == 0 and engine.closed == 1
    assert _early_metric("claimed") == claimed + 1
    streams.close()


@pytest.mark.parametrize(
    "identity, same_plan, coalesce",
    [(BOB, True, True), (ALICE, False, True), (ALICE, True, False)],
    ids=["another principal", "another plan", "another transport"],
)
def test_a_doget_that_would_run_something_else_stops_the_start_and_runs_its_own(
    engine: _Engine, identity: Identity, same_plan: bool, coalesce: bool
) -> None:
    streams = _streams(engine)
    planned = _planned()
    streams.start_early(ALICE, planned, "t1", coalesce=coalesce)
    call = _Call()
    asked = planned if same_plan else _planned()
    assert _values(streams.stream(call, asked, "t1", identity)) == [0, 1, 2]
    assert len(engine.started) == 2
    assert wait_until(lambda: streams.running() == 0 and engine.closed == 2)
    assert streams.early_stats()["claimed"] == 0
    streams.close()


def test_an_unclaimed_start_is_stopped_after_its_window_and_frees_its_slot(engine: _Engine) -> None:
    dropped = _early_metric("dropped")
    streams = _streams(engine, early_start_seconds=0.2, max_concurrent_queries=2)
    streams.start_early(ALICE, _planned(), "t1", coalesce=True)
    assert streams.running() == 1
    assert wait_until(lambda: streams.running() == 0)
    assert engine.closed == 1 and streams.early_stats()["waiting"] == 0
    assert _early_metric("dropped") == dropped + 1
    # Both slots are free again: two DoGets run at once.
    first, second = (
        streams.stream(_Call(), _planned(), "a", ALICE),
        streams.stream(_Call(), _planned(), "b", ALICE),
    )
    assert next(first).num_rows == 1 and next(second).num_rows == 1
    first.close(), second.close()
    streams.close()


def test_a_cancelled_ticket_stops_its_start_even_before_the_first_batch(engine: _Engine) -> None:
    engine.hold.clear()  # the first batch never comes by itself
    streams = _streams(engine)
    streams.start_early(ALICE, _planned(), "t1", coalesce=True)
    assert wait_until(lambda: engine.started)
    streams.cancel("t1", expires_at=60.0)
    assert wait_until(lambda: streams.running() == 0)
    assert engine.closed == 1
    with pytest.raises(QueryCancelled):
        streams.refuse_cancelled("t1")
    streams.close()


def test_a_doget_waits_for_the_first_batch_and_its_client_going_away_stops_the_start(engine: _Engine) -> None:
    engine.hold.clear()
    streams = _streams(engine)
    planned = _planned()
    streams.start_early(ALICE, planned, "t1", coalesce=True)
    call = _Call()
    got: list[Any] = []
    reader = threading.Thread(
        target=lambda: got.append(_try(lambda: _values(streams.stream(call, planned, "t1", ALICE))))
    )
    reader.start()
    assert wait_until(lambda: streams.early_stats()["claimed"] == 1)
    call.cancelled = True  # the client goes away while the query has produced nothing
    reader.join(10)
    assert not reader.is_alive()
    assert got == [[]]  # ended quietly, as any stream whose client went away (no one to tell)
    assert streams.running() == 0 and engine.closed == 1
    streams.close()


def test_an_error_of_the_started_query_reaches_its_doget() -> None:
    engine = _Engine(batches=0, error=InvalidInput("division by zero"))
    streams = _streams(engine)
    planned = _planned()
    streams.start_early(ALICE, planned, "t1", coalesce=True)
    with pytest.raises(InvalidInput, match="division by zero"):
        list(streams.stream(_Call(), planned, "t1", ALICE))
    assert streams.running() == 0 and len(engine.started) == 1
    streams.close()


def test_early_starts_take_free_slots_only_and_at_most_half_of_them(engine: _Engine) -> None:
    streams = _streams(engine, max_concurrent_queries=4)
    for n in range(4):
        streams.start_early(ALICE, _planned(), f"t{n}", coalesce=True)
    assert streams.early_stats()["started"] == 2 and streams.running() == 2
    # The two free slots are the DoGets': a third running DoGet waits (here: refused at once).
    a, b = streams.stream(_Call(), _planned(), "a", ALICE), streams.stream(_Call(), _planned(), "b", ALICE)
    next(a), next(b)
    with pytest.raises(Throttling):
        next(streams.stream(_Call(), _planned(), "c", ALICE))
    # With every slot taken, no query starts early.
    streams.start_early(ALICE, _planned(), "t9", coalesce=True)
    assert streams.early_stats()["started"] == 2
    a.close(), b.close()
    streams.close()


@pytest.mark.parametrize(
    "first_batch", [None, EARLY_FIRST_BATCH, 1.0], ids=["unknown", "at the bound", "slow"]
)
def test_only_a_plan_known_to_be_quick_starts_early(engine: _Engine, first_batch: float | None) -> None:
    streams = _streams(engine)
    streams.start_early(ALICE, _planned(first_batch), "t1", coalesce=True)
    assert streams.early_stats()["started"] == 0 and streams.running() == 0
    streams.close()


def test_off_when_the_window_is_zero(engine: _Engine) -> None:
    streams = _streams(engine, early_start_seconds=0)
    streams.start_early(ALICE, _planned(), "t1", coalesce=True)
    assert streams.early_stats()["started"] == 0 and not engine.started
    streams.close()


def test_draining_stops_unclaimed_starts_at_once(engine: _Engine) -> None:
    streams = _streams(engine)
    streams.start_early(ALICE, _planned(), "t1", coalesce=True)
    assert wait_until(lambda: engine.started)
    streams.finish(grace=30)  # returns at once: nothing but the unclaimed start was running
    assert streams.running() == 0 and engine.closed == 1
    streams.start_early(ALICE, _planned(), "t2", coalesce=True)  # the server is stopping
    assert streams.early_stats()["started"] == 1
    streams.close()


def _try(fn: Callable[[], Any]) -> Any:
    try:
        return fn()
    except Exception as exc:  # noqa: BLE001
        return exc


@pytest.mark.parametrize("bad", [-1, 61, "soon", "nan"])
def test_a_bad_window_is_refused_naming_the_variable(bad: Any) -> None:
    with pytest.raises(SettingsError, match="LAKE_FLIGHT_EARLY_START_SECONDS"):
        flight_settings(early_start_seconds=bad)


def test_a_key_lookup_starts_early_before_any_run_of_it_was_timed(engine: _Engine) -> None:
    streams = _streams(engine)
    lookup, slow_lookup = _planned(None, lookup=True), _planned(1.0, lookup=True)
    streams.start_early(ALICE, lookup, "t1", coalesce=True)
    streams.start_early(ALICE, slow_lookup, "t2", coalesce=True)  # timed: its history decides
    assert streams.early_stats()["started"] == 1
    assert _values(streams.stream(_Call(), lookup, "t1", ALICE)) == [0, 1, 2]
    assert streams.early_stats()["claimed"] == 1
    streams.close()


def test_many_starts_claims_cancels_and_expiries_at_once_leak_no_slot(engine: _Engine) -> None:
    """Every path at once from 8 threads: claimed, cancelled, never fetched (expired), fetched
    by someone else, closed after one batch. Afterwards nothing runs and every slot is free."""
    streams = _streams(engine, early_start_seconds=0.3, max_concurrent_queries=8, admission_wait_seconds=30)
    errors: list[BaseException] = []

    def worker(w: int) -> None:
        try:
            for n in range(40):
                tid, planned = f"w{w}-{n}", _planned()
                streams.start_early(ALICE, planned, tid, coalesce=True)
                kind = (w + n) % 5
                if kind == 0:
                    assert _values(streams.stream(_Call(), planned, tid, ALICE)) == [0, 1, 2]
                elif kind == 1:
                    streams.cancel(tid, expires_at=60.0)
                elif kind == 2:
                    pass  # never fetched: its window runs out
                elif kind == 3:
                    assert _values(streams.stream(_Call(), planned, tid, BOB)) == [0, 1, 2]
                else:
                    batches = streams.stream(_Call(), planned, tid, ALICE)
                    next(batches)
                    batches.close()  # the client went away after one batch
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(w,)) for w in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors
    assert wait_until(lambda: streams.running() == 0 and streams.early_stats()["waiting"] == 0)
    assert engine.closed == len(engine.started)  # every stream started was closed
    # Every slot is free again: 8 DoGets run at once.
    held = [streams.stream(_Call(), _planned(), f"x{n}", ALICE) for n in range(8)]
    for batches in held:
        next(batches)
    for batches in held:
        batches.close()
    streams.close()


def _deferred(pending: list[Callable[[], None]]) -> Callable[[Callable[[], None]], bool]:
    """An RPC's ``on_done`` that has not ended yet: keeps the callback for the test to run."""

    def after(begin: Callable[[], None]) -> bool:
        pending.append(begin)
        return True

    return after


def test_a_start_is_found_at_once_and_begins_once_its_rpc_has_answered(engine: _Engine) -> None:
    streams = _streams(engine)
    planned, pending = _planned(), []
    streams.start_early(ALICE, planned, "t1", coalesce=True, after=_deferred(pending))
    assert streams.early_stats()["waiting"] == 1 and not engine.started
    got: list[list[int]] = []
    reader = threading.Thread(
        target=lambda: got.append(_values(streams.stream(_Call(), planned, "t1", ALICE)))
    )
    reader.start()
    assert wait_until(lambda: streams.early_stats()["claimed"] == 1)  # its DoGet came first
    assert not engine.started
    pending.pop()()  # the GetFlightInfo's answer is sent
    reader.join(10)
    assert got == [[0, 1, 2]] and len(engine.started) == 1
    assert streams.running() == 0
    streams.close()


def test_a_start_whose_rpc_has_already_ended_begins_at_once(engine: _Engine) -> None:
    streams = _streams(engine)
    streams.start_early(ALICE, _planned(), "t1", coalesce=True, after=lambda begin: False)
    assert wait_until(lambda: engine.started)
    streams.close()


def test_a_start_due_after_the_server_closed_frees_its_slot_or_tells_its_doget(engine: _Engine) -> None:
    streams = _streams(engine)
    waiting, claimed, pending = _planned(), _planned(), []
    streams.start_early(ALICE, waiting, "t0", coalesce=True, after=_deferred(pending))
    streams.start_early(ALICE, claimed, "t1", coalesce=True, after=_deferred(pending))
    doget = streams.stream(_Call(), claimed, "t1", ALICE)
    errors: list[BaseException] = []
    reader = threading.Thread(target=lambda: errors.append(_try(lambda: list(doget))))
    reader.start()
    assert wait_until(lambda: streams.early_stats()["claimed"] == 1)
    streams.close()
    for begin in pending:
        begin()  # the answers were sent after the server closed
    reader.join(10)
    assert isinstance(errors[0], ServiceUnavailable)
    assert streams.running() == 0 and not engine.started
