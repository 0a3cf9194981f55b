"""The result cache: whole small results of repeated queries, per replica.

A deterministic query (``volatility``) over pinned snapshots gives the same rows every time it
runs, because the snapshots never change. So its result, once streamed to its end, is kept under
what determines it: the principal, the SQL, the bound parameters' bytes and every pinned
snapshot (``plans.plan_key``). A run with the same key streams the kept batches and runs nothing.
An append makes a new version: the next GetFlightInfo pins it, which is a new key. Nothing is
ever invalidated, and a ticket pinned to the old version still gets the old rows.

What is kept:

- only a result that ended by itself: never a cancelled, failed, timed-out or abandoned stream
  (the record is kept only once the stream is exhausted and nothing asked it to stop);
- only a small one: a stream is recorded while its batches' buffers stay within
  ``max_entry_bytes``, and the record is dropped as soon as it outgrows that;
- never shared between principals, even where both may read the same versions: the grants are
  checked at planning, for the principal who planned.

Memory: the buffers the entries hold (counted whole, so a slice of a larger batch counts that
batch) stay within ``budget_bytes``, least recently used evicted first. A stream being recorded
holds at most ``max_entry_bytes`` until it ends. Under query memory pressure the cache gives back
half of what it holds, as the snapshot cache does.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable, Iterator
from typing import Any

import pyarrow as pa

Key = tuple[Hashable, ...]


def buffer_bytes(batch: pa.RecordBatch) -> int:
    """The bytes of every buffer ``batch`` keeps alive (a slice keeps its parent's whole)."""
    return batch.get_total_buffer_size()


class ResultCache:
    """Thread-safe. ``budget_bytes`` 0 disables the cache."""

    def __init__(self, budget_bytes: int, max_entry_bytes: int) -> None:
        self.budget_bytes = budget_bytes
        self.max_entry_bytes = min(max_entry_bytes, budget_bytes)
        self._entries: OrderedDict[Key, tuple[tuple[pa.RecordBatch, ...], int]] = OrderedDict()
        self._lock = threading.Lock()
        self.used_bytes = 0
        self.hits = self.misses = self.stored = self.evictions = 0

    @property
    def enabled(self) -> bool:
        return self.budget_bytes > 0 and self.max_entry_bytes > 0

    def get(self, key: Key) -> tuple[pa.RecordBatch, ...] | None:
        """The kept result of ``key`` (no I/O), or None."""
        with self._lock:
            entry = self._entries.get(key)
            if entry is None:
                self.misses += 1
                return None
            self._entries.move_to_end(key)
            self.hits += 1
            return entry[0]

    def record(
        self, key: Key, batches: Iterator[pa.RecordBatch], stopped: Callable[[], bool]
    ) -> Iterator[pa.RecordBatch]:
        """``batches``, passed through; kept under ``key`` once they are exhausted, if they fit
        and ``stopped()`` (cancelled, timed out: a stream that ends early without an error) is
        still false then. A caller that stops reading, or an error, keeps nothing."""
        held: list[pa.RecordBatch] | None = []
        size = 0
        for batch in batches:
            if held is not None:
                size += buffer_bytes(batch)
                if size > self.max_entry_bytes:
                    held = None  # too large to keep: stop holding its batches at once
                else:
                    held.append(batch)
            yield batch
        if held is not None and not stopped():
            self._put(key, tuple(held), size)

    def _put(self, key: Key, batches: tuple[pa.RecordBatch, ...], size: int) -> None:
        with self._lock:
            old = self._entries.pop(key, None)
            if old is not None:
                self.used_bytes -= old[1]
            self._evict_to(self.budget_bytes - size)
            self._entries[key] = (batches, size)
            self.used_bytes += size
            self.stored += 1

    def _evict_to(self, limit: int) -> None:
        """Evict least recently used entries until at most ``limit`` bytes are held (lock held)."""
        while self._entries and self.used_bytes > max(0, limit):
            _, (_, size) = self._entries.popitem(last=False)
            self.used_bytes -= size
            self.evictions += 1

    def pressure(self) -> None:
        """Query memory ran out: give back half of what is held."""
        with self._lock:
            self._evict_to(self.used_bytes // 2)

    def clear(self) -> None:
        with self._lock:
            self._evict_to(0)

    def stats(self) -> dict[str, Any]:
        with self._lock:
            return {
                "budget_bytes": self.budget_bytes,
                "max_entry_bytes": self.max_entry_bytes,
                "used_bytes": self.used_bytes,
                "entries": len(self._entries),
                "hits": self.hits,
                "misses": self.misses,
                "stored": self.stored,
                "evictions": self.evictions,
            }

    def __len__(self) -> int:
        with self._lock:
            return len(self._entries)


__all__ = ["ResultCache", "buffer_bytes"]
