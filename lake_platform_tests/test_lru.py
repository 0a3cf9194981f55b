"""The bounded LRU map behind the package's per-process memos: recency, eviction order, capacity
0, counts, and slow work kept outside its lock."""

from __future__ import annotations

import sys
import threading

from lake_platform.lru import BoundedLRU


def test_get_refreshes_recency_so_the_least_recently_used_goes_first() -> None:
    lru: BoundedLRU[str, int] = BoundedLRU(2)
    lru.put("a", 1)
    lru.put("b", 2)
    assert lru.get("a") == 1  # "b" is now the oldest
    lru.put("c", 3)
    assert (lru.peek("a"), lru.peek("b"), lru.peek("c")) == (1, None, 3)
    assert len(lru) == 2 and lru.capacity == 2


def test_eviction_is_oldest_first_and_put_of_a_kept_key_makes_it_recent() -> None:
    lru: BoundedLRU[int, str] = BoundedLRU(3)
    for key in (1, 2, 3):
        lru.put(key, str(key))
    lru.put(1, "one")  # replaced and now the most recent: 2 is the oldest
    lru.put(4, "4")
    lru.put(5, "5")
    assert [lru.peek(k) for k in (1, 2, 3, 4, 5)] == ["one", None, None, "4", "5"]


def test_peek_neither_refreshes_nor_counts() -> None:
    lru: BoundedLRU[str, int] = BoundedLRU(2)
    lru.put("a", 1)
    lru.put("b", 2)
    assert lru.peek("a") == 1 and lru.peek("z") is None
    lru.put("c", 3)  # "a" was only peeked at: still the oldest
    assert lru.peek("a") is None and (lru.hits, lru.misses) == (0, 0)


def test_capacity_zero_keeps_nothing() -> None:
    lru: BoundedLRU[str, int] = BoundedLRU(0)
    lru.put("a", 1)
    made: list[str] = []
    assert lru.get_or_make("b", lambda: made.append("b") or 2) == 2
    assert lru.get_or_make("b", lambda: made.append("b") or 2) == 2
    assert made == ["b", "b"] and len(lru) == 0 and lru.get("a") is None
    assert (lru.hits, lru.misses) == (0, 3)
    below: BoundedLRU[str, int] = BoundedLRU(-1)
    below.put("a", 1)
    assert len(below) == 0 and below.capacity == 0


def test_get_or_make_makes_once_per_miss_and_counts() -> None:
    lru: BoundedLRU[str, list[int]] = BoundedLRU(1)
    made: list[str] = []

    def make(key: str) -> list[int]:
        made.append(key)
        return []  # an empty value is a value, not a miss

    for key in ("a", "a", "b", "a"):
        assert lru.get_or_make(key, lambda k=key: make(k)) == []
    assert made == ["a", "b", "a"]
    assert (lru.hits, lru.misses) == (1, 3)


def test_get_only_if_refused_is_a_miss_and_keeps_the_place() -> None:
    lru: BoundedLRU[str, tuple[object, int]] = BoundedLRU(2)
    anchor = object()
    lru.put("a", (anchor, 1))
    lru.put("b", (None, 2))
    assert lru.get("a", only_if=lambda kept: kept[0] is None) is None
    lru.put("c", (None, 3))  # "a" was refused, not used: it is still the oldest
    assert lru.peek("a") is None
    assert lru.get("c", only_if=lambda kept: kept[0] is None) == (None, 3)
    assert (lru.hits, lru.misses) == (1, 1)


def test_remove_only_if_and_remove_where() -> None:
    lru: BoundedLRU[int, str] = BoundedLRU(4)
    for key, value in enumerate(("keep", "drop", "drop", "keep")):
        lru.put(key, value)
    lru.remove(0, only_if=lambda v: v == "drop")  # refused: stays
    lru.remove(3)
    lru.remove(9)  # absent: nothing happens
    assert [lru.peek(k) for k in range(4)] == ["keep", "drop", "drop", None]
    lru.remove_where(lambda v: v == "drop")
    assert len(lru) == 1 and lru.peek(0) == "keep"
    lru.get(0)
    lru.clear()
    assert len(lru) == 0 and lru.hits == 1  # clearing forgets entries, not counts


def test_get_or_make_computes_outside_the_lock() -> None:
    """While one key's value is being made, another thread reads, writes and makes other keys."""
    lru: BoundedLRU[str, int] = BoundedLRU(4)
    lru.put("kept", 1)
    making, other_done = threading.Event(), threading.Event()
    seen: list[object] = []

    def slow() -> int:
        making.set()
        assert other_done.wait(10), "the other thread was blocked by the lock"
        return 2

    def other() -> None:
        assert making.wait(10)
        seen.append(lru.get("kept"))
        lru.put("new", 3)
        seen.append(lru.get_or_make("made", lambda: 4))
        other_done.set()

    thread = threading.Thread(target=other)
    thread.start()
    assert lru.get_or_make("slow", slow) == 2
    thread.join(10)
    assert seen == [1, 4]
    assert [lru.peek(k) for k in ("kept", "new", "made", "slow")] == [1, 3, 4, 2]


def test_concurrent_puts_keep_the_bound_and_count_every_answer() -> None:
    capacity, threads, each = 50, 8, 2000
    lru: BoundedLRU[tuple[int, int], int] = BoundedLRU(capacity)
    start = threading.Barrier(threads)
    over: list[int] = []

    def writer(t: int) -> None:
        start.wait()
        for i in range(each):
            lru.put((t, i), i)
            lru.get_or_make((t, i // 2), lambda i=i: i)
            if (n := len(lru)) > capacity:
                over.append(n)

    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # threads switch as often as they can: an unlocked step interleaves
    try:
        workers = [threading.Thread(target=writer, args=(t,)) for t in range(threads)]
        for w in workers:
            w.start()
        for w in workers:
            w.join()
    finally:
        sys.setswitchinterval(interval)
    assert over == [] and len(lru) == capacity
    assert lru.hits + lru.misses == threads * each  # every answer counted, none lost
