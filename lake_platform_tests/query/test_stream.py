"""How a planned query's stream waits for DataFusion: asynchronously (so the time limit and a
cancellation can stop a batch that takes long) unless the batch is known to come fast."""

from __future__ import annotations

import pyarrow as pa

from lake_platform.query.limits import QueryLimits
from lake_platform.query.planner import PlannedQuery
from lake_platform.query.stream import FIRST_BATCH, stream

SCHEMA = pa.schema([("v", pa.int64())])


class _Batch:
    def __init__(self, batch: pa.RecordBatch) -> None:
        self._batch = batch

    def to_pyarrow(self) -> pa.RecordBatch:
        return self._batch


class _Stream:
    """DataFusion's record batch stream, recording how each batch was asked for."""

    def __init__(self, batches: list[pa.RecordBatch], calls: list[str]) -> None:
        self._batches = iter(batches)
        self._calls = calls

    def __next__(self) -> _Batch:
        self._calls.append("sync")
        return _Batch(next(self._batches))

    async def __anext__(self) -> _Batch:
        self._calls.append("async")
        try:
            return _Batch(next(self._batches))
        except StopIteration:
            raise StopAsyncIteration from None


class _Frame:
    def __init__(self, calls: list[str]) -> None:
        self.calls = calls

    def execute_stream(self) -> _Stream:
        return _Stream([pa.record_batch([pa.array([1, 2, 3])], schema=SCHEMA)], self.calls)


def _planned(calls: list[str]) -> PlannedQuery:
    return PlannedQuery(sql="SELECT v", df=_Frame(calls), schema=SCHEMA, refs=(), parameters=0)


def _run(planned: PlannedQuery) -> list[int]:
    return [v for b in stream(planned, QueryLimits()) for v in b.column(0).to_pylist()]


def test_a_new_plan_awaits_its_first_batch_asynchronously_and_remembers_how_long_it_took() -> None:
    calls: list[str] = []
    planned = _planned(calls)
    assert _run(planned) == [1, 2, 3]
    assert calls[0] == "async"  # nothing known about this plan yet: stoppable while it waits
    assert 0 <= planned.derived[FIRST_BATCH] < 1


def test_a_kept_plan_whose_first_batch_came_fast_takes_it_synchronously() -> None:
    calls: list[str] = []
    planned = _planned(calls)
    planned.derived[FIRST_BATCH] = 0.001  # its last run
    assert _run(planned) == [1, 2, 3]
    assert calls == ["sync", "sync"]  # the batch, then the end: no event loop at all


def test_a_kept_plan_whose_first_batch_was_slow_keeps_waiting_asynchronously() -> None:
    calls: list[str] = []
    planned = _planned(calls)
    planned.derived[FIRST_BATCH] = 5.0
    assert _run(planned) == [1, 2, 3]
    assert calls[0] == "async"
