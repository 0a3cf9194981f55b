"""``read_ahead``: the first messages of a result go out from the consumer's thread (a
point query's whole stream needs no thread), the rest are read ahead on a thread; items, errors
and closing keep their order and their thread either way."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest

from lake_platform.flight.read_ahead import PRODUCERS, read_ahead


class Source:
    """Items 0..n-1 (then ``fail`` if set), recording the thread each was made on and where it
    was closed."""

    def __init__(self, n: int, fail: Exception | None = None) -> None:
        self.n, self.fail = n, fail
        self.threads: list[int] = []
        self.closed_on: int | None = None

    def run(self) -> Iterator[int]:
        try:
            for i in range(self.n):
                self.threads.append(threading.get_ident())
                yield i
            if self.fail is not None:
                raise self.fail
        finally:
            self.closed_on = threading.get_ident()


def test_a_small_result_is_produced_on_the_consumers_thread() -> None:
    src = Source(2)
    me = threading.get_ident()
    assert list(read_ahead(src.run(), 2, first=3)) == [0, 1]
    assert src.threads == [me, me] and src.closed_on == me


def test_a_larger_result_reads_ahead_on_a_thread_after_the_first_items() -> None:
    src = Source(10)
    me = threading.get_ident()
    assert list(read_ahead(src.run(), 2, first=3)) == list(range(10))
    assert src.threads[:3] == [me] * 3
    assert all(t != me for t in src.threads[3:]) and src.closed_on != me


@pytest.mark.parametrize("n", [1, 6])
def test_an_error_comes_after_the_items_before_it(n: int) -> None:
    src = Source(n, fail=ValueError("boom"))
    got: list[int] = []
    with pytest.raises(ValueError, match="boom"):
        for item in read_ahead(src.run(), 2, first=3):
            got.append(item)
    assert got == list(range(n)) and src.closed_on is not None


def test_a_consumer_that_stops_early_closes_the_source_where_it_ran() -> None:
    src = Source(10)
    stream = read_ahead(src.run(), 2, first=3)
    assert next(stream) == 0 and next(stream) == 1
    stream.close()
    assert src.closed_on == threading.get_ident()  # still in the consumer's phase


def test_larger_results_one_after_another_read_ahead_on_one_reused_thread() -> None:
    first, second = Source(10), Source(10)
    assert list(read_ahead(first.run(), 2, first=3)) == list(range(10))
    assert PRODUCERS.wait_idle(1, 10.0)  # the first producer is done with its stream
    workers = {t.ident for t in threading.enumerate() if t.name == "lake-flight-read-ahead"}
    assert set(first.threads[3:]) <= workers
    assert list(read_ahead(second.run(), 2, first=3)) == list(range(10))
    assert len(set(second.threads[3:])) == 1 and set(second.threads[3:]) <= workers  # no new thread
