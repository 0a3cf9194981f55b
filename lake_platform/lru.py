"""A thread-safe bounded LRU map: the one shape behind the package's small per-process memos
(opened snapshots, kept plans, fragment sizes, schemas by manifest, ...).

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


__all__ = ["BoundedLRU"]
