"""The result cache (``query.result_cache``): only a whole, small result that ended by itself is
kept; entries stay within the budget, least recently used evicted first. Through the engine: a
re-run is served without running, never for another principal, another version or other
parameters, and never for a query that reads the clock."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pyarrow as pa
import pytest

from lake_platform.catalog.catalog import Catalog
from lake_platform.query.engine import QueryEngine
from lake_platform.query.limits import QueryLimits
from lake_platform.query.result_cache import ResultCache, buffer_bytes
from lake_platform.query.snapshot import load_snapshot
from lake_platform_tests.flight.conftest import ALICE, SERVICE, t_rows


def batches(n: int, rows: int = 100) -> list[pa.RecordBatch]:
    return [pa.record_batch({"id": pa.array(range(i * rows, (i + 1) * rows), pa.int64())}) for i in range(n)]


def drain(stream: Iterator[pa.RecordBatch]) -> list[pa.RecordBatch]:
    return list(stream)


def test_a_whole_result_is_kept_and_served_as_it_was_streamed() -> None:
    cache = ResultCache(1 << 20, 1 << 20)
    source = batches(3)
    assert cache.get(("k",)) is None
    assert drain(cache.record(("k",), iter(source), lambda: False)) == source
    kept = cache.get(("k",))
    assert kept is not None and list(kept) == source
    assert cache.stats()["hits"] == 1 and cache.stats()["misses"] == 1 and cache.stats()["stored"] == 1
    assert cache.stats()["used_bytes"] == sum(buffer_bytes(b) for b in source)


def test_a_stream_that_was_stopped_is_not_kept() -> None:
    """The query stream returns quietly when cancelled or past its time: short, not whole."""
    cache = ResultCache(1 << 20, 1 << 20)
    drain(cache.record(("k",), iter(batches(2)), lambda: True))
    assert cache.get(("k",)) is None and len(cache) == 0


def test_a_stream_its_reader_abandoned_is_not_kept() -> None:
    cache = ResultCache(1 << 20, 1 << 20)
    stream = cache.record(("k",), iter(batches(3)), lambda: False)
    next(stream)
    stream.close()  # the client went away after the first batch
    assert cache.get(("k",)) is None


def test_a_stream_that_failed_is_not_kept() -> None:
    def failing() -> Iterator[pa.RecordBatch]:
        yield batches(1)[0]
        raise RuntimeError("the query failed")

    cache = ResultCache(1 << 20, 1 << 20)
    with pytest.raises(RuntimeError):
        drain(cache.record(("k",), failing(), lambda: False))
    assert cache.get(("k",)) is None


def test_a_result_above_the_entry_limit_streams_whole_and_is_not_kept() -> None:
    source = batches(10)
    cache = ResultCache(1 << 20, buffer_bytes(source[0]) * 3)
    assert drain(cache.record(("k",), iter(source), lambda: False)) == source
    assert cache.get(("k",)) is None and cache.stats()["used_bytes"] == 0


def test_a_slice_counts_the_whole_buffer_it_keeps_alive() -> None:
    big = batches(1, rows=100_000)[0]
    piece = big.slice(0, 10)
    assert buffer_bytes(piece) == buffer_bytes(big) > piece.nbytes * 1000
    cache = ResultCache(1 << 30, buffer_bytes(big) - 1)
    drain(cache.record(("k",), iter([piece]), lambda: False))
    assert cache.get(("k",)) is None  # it would hold 800 kB for 80 bytes of rows


def test_entries_stay_within_the_budget_least_recently_used_first() -> None:
    one = buffer_bytes(batches(1)[0])
    cache = ResultCache(one * 3, one)
    for key in "abc":
        drain(cache.record((key,), iter(batches(1)), lambda: False))
    assert cache.get(("a",)) is not None  # a is now the most recently used
    drain(cache.record(("d",), iter(batches(1)), lambda: False))
    assert cache.stats()["used_bytes"] <= cache.budget_bytes
    assert cache.get(("b",)) is None and cache.get(("a",)) is not None and cache.get(("d",)) is not None
    assert cache.stats()["evictions"] == 1


def test_memory_pressure_gives_back_half() -> None:
    one = buffer_bytes(batches(1)[0])
    cache = ResultCache(one * 4, one)
    for key in "abcd":
        drain(cache.record((key,), iter(batches(1)), lambda: False))
    cache.pressure()
    assert cache.stats()["used_bytes"] == one * 2
    assert cache.get(("c",)) is not None and cache.get(("a",)) is None


def test_a_budget_of_zero_turns_it_off() -> None:
    assert not ResultCache(0, 1 << 20).enabled
    assert ResultCache(1 << 20, 1 << 30).max_entry_bytes == 1 << 20  # never above the budget


# == through the engine ==========================================================================

GROUP = "SELECT id % 7 AS k, count(*) AS n, sum(x) AS total FROM w.ns.t GROUP BY id % 7 ORDER BY k"


class Counted:
    """An engine with a result cache; ``runs``: the queries it actually ran
    (``QueryEngine.work.runs``, what ``lake_query_runs_total`` reports)."""

    def __init__(self, lake: tuple[Any, Catalog], **limits: Any) -> None:
        self.catalog = lake[1]
        self.engine = QueryEngine(lake[0], QueryLimits(result_cache_bytes=16 << 20, **limits))

    @property
    def runs(self) -> int:
        return self.engine.work.runs

    def view(self) -> Any:
        return load_snapshot(self.catalog.store).project("p")

    def run(self, sql: str, scope: Any = ALICE, params: pa.RecordBatch | None = None) -> pa.Table:
        planned = self.engine.plan(sql, self.view(), params, scope=scope)
        return pa.Table.from_batches(list(self.engine.stream(planned, scope=scope)), planned.schema)


def test_a_rerun_streams_the_kept_result_without_running(lake: Any) -> None:
    counted = Counted(lake)
    first = counted.run(GROUP)
    assert counted.run(GROUP).equals(first) and counted.runs == 1
    assert counted.engine.results.stats()["hits"] == 1


def test_another_principal_never_gets_the_kept_result(lake: Any) -> None:
    counted = Counted(lake)
    first = counted.run(GROUP, ALICE)
    assert counted.run(GROUP, SERVICE).equals(first)  # same project, same rows: still run again
    assert counted.runs == 2


def test_a_new_version_runs_again_and_an_old_pin_keeps_its_rows(lake: Any) -> None:
    counted = Counted(lake)
    counted.catalog.tables.create_table("p.w.ns.rc", t_rows(10).to_reader())
    sql = "SELECT count(*) AS n, max(id) AS top FROM w.ns.rc"
    old = counted.engine.plan(sql, counted.view(), scope=ALICE)
    assert counted.run(sql).to_pylist() == [{"n": 10, "top": 9}]
    counted.catalog.tables.append("p.w.ns.rc", t_rows(5, start=10).to_reader())
    assert counted.run(sql).to_pylist() == [{"n": 15, "top": 14}]
    assert counted.runs == 2
    pinned = counted.engine.plan_pinned(sql, old.refs, scope=ALICE)  # a ticket of the old version
    rows = pa.Table.from_batches(list(counted.engine.stream(pinned, scope=ALICE)), pinned.schema)
    assert rows.to_pylist() == [{"n": 10, "top": 9}] and counted.runs == 2  # kept, and still right


@pytest.mark.parametrize(
    "sql", ["SELECT now() AS t, count(*) AS n FROM w.ns.t", "SELECT random() AS r FROM w.ns.t LIMIT 3"]
)
def test_a_query_that_reads_the_clock_or_draws_random_values_always_runs(lake: Any, sql: str) -> None:
    counted = Counted(lake)
    first, second = counted.run(sql), counted.run(sql)
    assert counted.runs == 2 and not first.equals(second)
    assert len(counted.engine.results) == 0


def test_bound_parameters_are_part_of_the_key(lake: Any) -> None:
    counted = Counted(lake)
    sql = "SELECT id, s FROM w.ns.t WHERE id = ?"
    for value in (5, 7, 5, 7):
        got = counted.run(sql, params=pa.record_batch({"a": pa.array([value], pa.int64())}))
        assert got.to_pylist() == [{"id": value, "s": f"row-{value}"}]
    assert counted.runs == 2


def test_without_a_principal_nothing_is_kept(lake: Any) -> None:
    """The CLI, REST queries and spool jobs stream without a scope: always run."""
    counted = Counted(lake)
    for _ in range(2):
        planned = counted.engine.plan(GROUP, counted.view())
        list(counted.engine.stream(planned))
    assert counted.runs == 2 and len(counted.engine.results) == 0


def test_a_result_above_the_entry_limit_always_runs(lake: Any) -> None:
    counted = Counted(lake, result_cache_entry_bytes=1024)
    sql = "SELECT * FROM w.ns.t ORDER BY id"
    assert counted.run(sql).num_rows == counted.run(sql).num_rows == 1000
    assert counted.runs == 2 and counted.engine.results.stats()["used_bytes"] == 0
