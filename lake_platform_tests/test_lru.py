"""The bounded LRU maps: by count (the package's per-process memos: recency, eviction order,
capacity 0, counts, and slow work kept outside its lock) and by bytes (the query layer's
memory-budgeted caches: the budget, eviction order, replacement, halving, counts)."""

from __future__ import annotations

import sys
import threading

import pytest

from lake_platform.lru import BoundedLRU, SizedLRU


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


def test_sized_entries_stay_within_the_budget_least_recently_used_out_first() -> None:
    lru: SizedLRU[str, str] = SizedLRU(100)
    assert lru.put("a", "A", 40) == 0
    assert lru.put("b", "B", 40) == 0
    assert lru.get("a") == "A"  # "b" is now the oldest

    assert lru.put("c", "C", 40) == 1  # 120 > 100: "b" goes, not "a"

    assert ("a" in lru, "b" in lru, "c" in lru) == (True, False, True)
    assert lru.used_bytes == 80 and len(lru) == 2
    assert lru.counts() == {"used_bytes": 80, "entries": 2, "hits": 1, "misses": 0, "puts": 3, "evictions": 1}


def test_a_large_entry_evicts_as_many_as_it_needs() -> None:
    lru: SizedLRU[int, int] = SizedLRU(100)
    for key in range(5):
        lru.put(key, key, 20)

    assert lru.put(9, 9, 70) == 4  # room for 70 needs all but one 20-byte entry gone

    assert lru.keys() == [4, 9]
    assert lru.used_bytes == 90


def test_putting_a_kept_key_again_replaces_its_bytes_and_makes_it_recent() -> None:
    lru: SizedLRU[str, int] = SizedLRU(100)
    lru.put("a", 1, 50)
    lru.put("b", 2, 30)

    lru.put("a", 3, 60)  # 60 + 30 fits once the old 50 are gone: nothing evicted
    assert (lru.get("a"), lru.used_bytes, lru.evictions) == (3, 90, 0)
    lru.put("c", 4, 20)  # "b" is the oldest now
    assert ("b" in lru, lru.used_bytes) == (False, 80)


def test_an_entry_larger_than_the_budget_is_refused_and_nothing_changes() -> None:
    lru: SizedLRU[str, int] = SizedLRU(100)
    lru.put("a", 1, 60)

    with pytest.raises(ValueError, match="101 bytes does not fit a budget of 100"):
        lru.put("b", 2, 101)
    with pytest.raises(ValueError):
        lru.put("b", 2, -1)

    assert (lru.get("a"), "b" in lru, lru.used_bytes, lru.evictions) == (1, False, 60, 0)


def test_halve_and_evict_to_give_back_the_least_recently_used_first() -> None:
    lru: SizedLRU[int, int] = SizedLRU(100)
    for key in range(4):
        lru.put(key, key, 25)

    assert lru.halve() == 2  # 100 held: down to 50
    assert lru.keys() == [2, 3]
    assert lru.evict_to(0) == 2
    assert (len(lru), lru.used_bytes, lru.evictions) == (0, 0, 4)
    assert lru.get(3) is None and lru.misses == 1


def test_a_zero_budget_keeps_only_empty_entries() -> None:
    lru: SizedLRU[str, int] = SizedLRU(0)
    with pytest.raises(ValueError):
        lru.put("a", 1, 1)
    lru.put("empty", 0, 0)
    assert lru.get("empty") == 0 and lru.used_bytes == 0
