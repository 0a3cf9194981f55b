"""How a planned query's stream waits for DataFusion: asynchronously (so the time limit and a
cancellation can stop a batch that takes long) unless the batch is known to come fast."""

from __future__ import annotations

import pyarrow as pa
import pytest

from lake_platform.query.facts import PlanFacts
from lake_platform.query.limits import QueryLimits
from lake_platform.query.planner import PlannedQuery
from lake_platform.query.stream import FirstBatches, stream

SCHEMA = pa.schema([("v", pa.int64())])


class _Batch:
    def __init__(self, batch: pa.RecordBatch) -> None:
        self._batch = batch

    def to_pyarrow(self) -> pa.RecordBatch:
        return self._batch


class _Clock:
    """The stream's clock: it moves only when a batch is made."""

    def __init__(self) -> None:
        self.now = 1000.0

    def monotonic(self) -> float:
        return self.now


CLOCK = _Clock()


class _Stream:
    """DataFusion's record batch stream, recording how each batch was asked for; the first
    batch takes ``first_takes`` seconds on the stream's clock."""

    def __init__(self, batches: list[pa.RecordBatch], calls: list[str], first_takes: float) -> None:
        self._batches = iter(batches)
        self._calls = calls
        self._first_takes = first_takes

    def _next(self) -> _Batch:
        CLOCK.now += self._first_takes
        self._first_takes = 0.0
        return _Batch(next(self._batches))

    def __next__(self) -> _Batch:
        self._calls.append("sync")
        return self._next()

    async def __anext__(self) -> _Batch:
        self._calls.append("async")
        try:
            return self._next()
        except StopIteration:
            raise StopAsyncIteration from None


class _Frame:
    def __init__(self, calls: list[str], parts: int, first_takes: float) -> None:
        self.calls = calls
        self.parts = parts
        self.first_takes = first_takes

    def execute_stream(self) -> _Stream:
        values = [[1, 2, 3], [4], [5]][: self.parts]
        batches = [pa.record_batch([pa.array(v)], schema=SCHEMA) for v in values]
        return _Stream(batches, self.calls, self.first_takes)


def _planned(calls: list[str], parts: int = 1, first_takes: float = 0.0) -> PlannedQuery:
    frame = _Frame(calls, parts, first_takes)
    return PlannedQuery(
        sql="SELECT v", df=frame, schema=SCHEMA, refs=(), parameters=0, facts=PlanFacts(frame)
    )


#: What the runs of the tests' plans took to their first batch (each test plans its own).
TIMES = FirstBatches()


def _run(planned: PlannedQuery, limits: QueryLimits | None = None) -> list[int]:
    batches = stream(planned, limits or QueryLimits(), first_batches=TIMES, clock=CLOCK.monotonic)
    return [v for b in batches for v in b.column(0).to_pylist()]


def test_a_new_plan_awaits_its_first_batch_asynchronously_and_remembers_how_long_it_took() -> None:
    calls: list[str] = []
    planned = _planned(calls)
    assert _run(planned) == [1, 2, 3]
    assert calls[0] == "async"  # nothing known about this plan yet: stoppable while it waits
    assert 0 <= TIMES.get(planned) < 1


def test_a_kept_plan_whose_first_batch_came_fast_takes_it_synchronously() -> None:
    calls: list[str] = []
    planned = _planned(calls)
    TIMES.put(planned, 0.001)  # its last run
    assert _run(planned) == [1, 2, 3]
    assert calls == ["sync", "sync"]  # the batch, then the end: no event loop at all


def test_a_kept_plan_whose_first_batch_came_within_the_poll_interval_takes_it_synchronously() -> None:
    calls: list[str] = []
    planned = _planned(calls)
    TIMES.put(planned, 0.05)  # an aggregate over a hot table: a cancel waits no longer
    assert _run(planned) == [1, 2, 3]
    assert calls == ["sync", "sync"]


def test_a_kept_plan_known_quick_takes_every_batch_synchronously() -> None:
    calls: list[str] = []
    # An aggregate: its first batch takes 50 ms again, its other partitions follow at once.
    planned = _planned(calls, parts=3, first_takes=0.05)
    TIMES.put(planned, 0.05)
    assert _run(planned) == [1, 2, 3, 4, 5]
    assert calls == ["sync"] * 4
    assert TIMES.get(planned) == pytest.approx(0.05)


def test_a_known_quick_plan_that_slows_down_goes_back_to_waiting_asynchronously() -> None:
    calls: list[str] = []
    planned = _planned(calls, parts=3, first_takes=0.5)  # the table grew, say
    TIMES.put(planned, 0.05)
    assert _run(planned) == [1, 2, 3, 4, 5]
    assert calls == ["sync", "async", "sync", "sync"]  # stoppable after a slow batch, then fast again


def test_a_new_plan_with_a_slow_first_batch_waits_for_the_next_one_asynchronously_too() -> None:
    calls: list[str] = []
    planned = _planned(calls, parts=3, first_takes=0.05)
    assert _run(planned) == [1, 2, 3, 4, 5]
    assert calls == ["async", "async", "sync", "sync"]


def test_a_kept_plan_too_close_to_its_time_limit_waits_asynchronously() -> None:
    calls: list[str] = []
    planned = _planned(calls)
    TIMES.put(planned, 0.05)  # ten times that is past a 0.4 s limit
    assert _run(planned, QueryLimits(query_timeout_seconds=0.4)) == [1, 2, 3]
    assert calls[0] == "async"


def test_a_kept_plan_whose_first_batch_was_slow_keeps_waiting_asynchronously() -> None:
    calls: list[str] = []
    planned = _planned(calls)
    TIMES.put(planned, 5.0)
    assert _run(planned) == [1, 2, 3]
    assert calls[0] == "async"
