"""Thread-safe bounded LRU maps. :class:`BoundedLRU` (bounded by count) is the one shape behind
the package's small per-process memos (opened snapshots, kept plans, fragment sizes, schemas by
manifest, ...); :class:`SizedLRU` (bounded by the bytes its entries hold) behind the query
layer's two memory-budgeted caches (the snapshot cache and the result cache).

Values are never None (None answers "not here"). :meth:`BoundedLRU.get_or_make` computes a
missing value outside the lock, so slow work (opening a Lance dataset, decoding a manifest)
never holds it up for other keys; two first computations of one key are harmless (the last
one is kept), which every user accepts because its values are facts of immutable snapshots.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class BoundedLRU(Generic[K, V]):
    """At most ``capacity`` entries, least recently used first out (0, or less, keeps nothing).

    ``hits`` and ``misses`` count :meth:`get` and :meth:`get_or_make` answers, under the lock
    (exact across threads)."""

    def __init__(self, capacity: int) -> None:
        self._capacity = max(0, capacity)
        self._entries: OrderedDict[K, V] = OrderedDict()
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0

    @property
    def capacity(self) -> int:
        return self._capacity

    def get(self, key: K, only_if: Callable[[V], bool] | None = None) -> V | None:
        """The value under ``key``, now the most recent (a hit); None (a miss) if there is none,
        or if ``only_if`` refuses it (then its place is left as it was)."""
        with self._lock:
            value = self._entries.get(key)
            if value is None or (only_if is not None and not only_if(value)):
                self.misses += 1
                return None
            self._entries.move_to_end(key)
            self.hits += 1
            return value

    def peek(self, key: K) -> V | None:
        """The value under ``key`` without touching its place or the counts."""
        with self._lock:
            return self._entries.get(key)

    def put(self, key: K, value: V) -> None:
        """Keep ``value`` under ``key`` as the most recent; the oldest beyond capacity go."""
        with self._lock:
            self._entries[key] = value
            self._entries.move_to_end(key)
            while len(self._entries) > self._capacity:
                self._entries.popitem(last=False)

    def get_or_make(self, key: K, make: Callable[[], V]) -> V:
        """The value under ``key`` (:meth:`get`), else ``make()`` (called without the lock held,
        then :meth:`put`)."""
        found = self.get(key)
        if found is not None:
            return found
        value = make()
        self.put(key, value)
        return value

    def remove(self, key: K, only_if: Callable[[V], bool] | None = None) -> None:
        """Forget ``key`` (if ``only_if`` is given: only while its value passes it)."""
        with self._lock:
            value = self._entries.get(key)
            if value is not None and (only_if is None or only_if(value)):
                del self._entries[key]

    def remove_where(self, predicate: Callable[[V], bool]) -> None:
        """Forget every entry whose value passes ``predicate``."""
        with self._lock:
            for key in [k for k, v in self._entries.items() if predicate(v)]:
                del self._entries[key]

    def clear(self) -> None:
        """Forget every entry (the counts stay)."""
        with self._lock:
            self._entries.clear()

    def __len__(self) -> int:
        with self._lock:
            return len(self._entries)


class SizedLRU(Generic[K, V]):
    """Entries that each hold ``nbytes``, together at most ``budget_bytes``, least recently used
    first out.

    ``hits`` and ``misses`` count :meth:`get` answers, ``puts`` the entries kept, ``evictions``
    those pushed out to make room or given back; all under the lock, exact across threads."""

    def __init__(self, budget_bytes: int) -> None:
        self.budget_bytes = max(0, budget_bytes)
        self._entries: OrderedDict[K, tuple[V, int]] = OrderedDict()
        self._lock = threading.Lock()
        self.used_bytes = 0
        self.hits = self.misses = self.puts = self.evictions = 0

    def get(self, key: K) -> V | None:
        """The value under ``key``, now the most recent (a hit); None (a miss) if there is none."""
        with self._lock:
            entry = self._entries.get(key)
            if entry is None:
                self.misses += 1
                return None
            self._entries.move_to_end(key)
            self.hits += 1
            return entry[0]

    def put(self, key: K, value: V, nbytes: int) -> int:
        """Keep ``value`` (holding ``nbytes``) under ``key`` as the most recent, replacing what
        was there, after evicting least recently used entries until it fits; returns how many
        were evicted. An entry larger than the whole budget is refused (ValueError): whoever
        sizes entries refuses those before building them."""
        if not 0 <= nbytes <= self.budget_bytes:
            raise ValueError(f"an entry of {nbytes} bytes does not fit a budget of {self.budget_bytes}")
        with self._lock:
            old = self._entries.pop(key, None)
            if old is not None:
                self.used_bytes -= old[1]
            evicted = self._evict_to(self.budget_bytes - nbytes)
            self._entries[key] = (value, nbytes)
            self.used_bytes += nbytes
            self.puts += 1
            return evicted

    def evict_to(self, limit: int) -> int:
        """Evict least recently used entries until at most ``limit`` bytes are held; returns how
        many were evicted."""
        with self._lock:
            return self._evict_to(limit)

    def halve(self) -> int:
        """Give back half of what is held (least recently used first); returns how many entries
        were evicted."""
        with self._lock:
            return self._evict_to(self.used_bytes // 2)

    def counts(self) -> dict[str, int]:
        """``used_bytes``, ``entries`` and the counters, read together."""
        with self._lock:
            return {
                "used_bytes": self.used_bytes,
                "entries": len(self._entries),
                "hits": self.hits,
                "misses": self.misses,
                "puts": self.puts,
                "evictions": self.evictions,
            }

    def _evict_to(self, limit: int) -> int:
        evicted = 0
        while self._entries and self.used_bytes > max(0, limit):
            _, (_, nbytes) = self._entries.popitem(last=False)
            self.used_bytes -= nbytes
            evicted += 1
        self.evictions += evicted
        return evicted

    def __contains__(self, key: object) -> bool:
        with self._lock:
            return key in self._entries

    def keys(self) -> list[K]:
        """The keys held, least recently used first."""
        with self._lock:
            return list(self._entries)

    def __len__(self) -> int:
        with self._lock:
            return len(self._entries)


__all__ = ["BoundedLRU", "SizedLRU"]
