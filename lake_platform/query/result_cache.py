"""The result cache: whole small results of repeated queries, per replica.

A deterministic query (``volatility``) over pinned snapshots gives the same rows every time it
runs, because the snapshots never change. So its result, once streamed to its end, is kept under
what determines it: the principal, the SQL, the bound parameters' bytes and every pinned
snapshot (``plans.pinned_key``). A run with the same key streams the kept batches and runs nothing.
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

from collections.abc import Callable, Hashable, Iterator
from typing import Any

import pyarrow as pa

from lake_platform.lru import SizedLRU

Key = tuple[Hashable, ...]


def buffer_bytes(batch: pa.RecordBatch) -> int:
    """The bytes of every buffer ``batch`` keeps alive (a slice keeps its parent's whole)."""
    return batch.get_total_buffer_size()


class ResultCache:
    """Thread-safe. ``budget_bytes`` 0 disables the cache."""

    def __init__(self, budget_bytes: int, max_entry_bytes: int) -> None:
        self.budget_bytes = budget_bytes
        self.max_entry_bytes = min(max_entry_bytes, budget_bytes)
        self._kept: SizedLRU[Key, tuple[pa.RecordBatch, ...]] = SizedLRU(budget_bytes)

    @property
    def enabled(self) -> bool:
        return self.budget_bytes > 0 and self.max_entry_bytes > 0

    def get(self, key: Key) -> tuple[pa.RecordBatch, ...] | None:
        """The kept result of ``key`` (no I/O), or None."""
        return self._kept.get(key)

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
            self._kept.put(key, tuple(held), size)

    def pressure(self) -> None:
        """Query memory ran out: give back half of what is held."""
        self._kept.halve()

    def clear(self) -> None:
        self._kept.evict_to(0)

    def stats(self) -> dict[str, Any]:
        counts = self._kept.counts()
        return {
            "budget_bytes": self.budget_bytes,
            "max_entry_bytes": self.max_entry_bytes,
            "used_bytes": counts["used_bytes"],
            "entries": counts["entries"],
            "hits": counts["hits"],
            "misses": counts["misses"],
            "stored": counts["puts"],
            "evictions": counts["evictions"],
        }

    def __len__(self) -> int:
        return len(self._kept)


__all__ = ["ResultCache", "buffer_bytes"]
