"""The snapshot cache: decoded Arrow data of hot table versions, in memory, per replica.

A table version never changes, so an entry keyed by ``(location, incarnation, version,
columns)`` is valid for exactly its snapshot forever: nothing is ever invalidated, entries are
only evicted (least recently used first, by size) to stay within the budget. A new version is
a new key; a dropped-and-recreated table is a new incarnation (a new key); a tenant can only
form keys of snapshots its own catalog resolves, so two tenants share an entry only if both
can read that very table version.

Admission: a table whose effective policy says ``cache=hot`` is loaded on its first query; one
that says ``auto`` (the default) once the same snapshot was planned ``admit_after`` times; ``off``
never. Loading runs on one background thread, so a miss plans and streams from Lance exactly
as without the cache (no added latency); later queries of that snapshot run on the in-memory
batches as a DataFusion ``MemTable`` split into ``partitions`` partitions. A snapshot larger than
the budget is never admitted (the load stops once it outgrows it).

Memory: the entries' bytes never exceed ``budget_bytes``, which sits next to DataFusion's pool
(``memory_limit_bytes``) in the process's bound. Under query memory pressure (a query refused
because DataFusion's pool is exhausted) the cache gives back half of what it holds and admits
nothing for ``pressure_seconds``.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from datafusion import SessionContext
from datafusion.catalog import Table

from lake_platform.engine import lance_engine as engine
from lake_platform.lru import SizedLRU
from lake_platform.query.snapshot import TableRef

log = logging.getLogger(__name__)

#: Cache key: the exact snapshot and the columns held (all of the table's, in order).
Key = tuple[str, str, int, tuple[str, ...]]


@dataclass(frozen=True)
class Entry:
    table: Table  # a DataFusion MemTable over ``partitions``
    nbytes: int
    rows: int


class DataCache:
    """Thread-safe. ``budget_bytes`` 0 disables the cache."""

    def __init__(
        self,
        budget_bytes: int,
        *,
        admit_after: int = 3,
        partitions: int = 4,
        pressure_seconds: float = 30.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.budget_bytes = budget_bytes
        self.admit_after = admit_after
        self.partitions = max(1, partitions)
        self.pressure_seconds = pressure_seconds
        self._clock = clock
        self._held: SizedLRU[Key, Entry] = SizedLRU(budget_bytes)
        self._uses: dict[Key, int] = {}
        self._loading: set[Key] = set()
        self._too_large: set[Key] = set()
        self._lock = threading.Lock()
        self._settled = threading.Condition(self._lock)  # notified when a load ends
        self._loader: ThreadPoolExecutor | None = None
        self._calm_after = 0.0
        self.peak_bytes = 0
        #: Called (with the cache's lock held) after entries were evicted: whoever keeps
        #: references to entries' tables (kept plans) must drop them, or the batches outlive
        #: the budget.
        self.on_evict: Callable[[], None] = lambda: None

    @property
    def enabled(self) -> bool:
        return self.budget_bytes > 0

    @property
    def generation(self) -> tuple[int, int]:
        """Changes whenever an entry is loaded or evicted (what a kept plan was planned against)."""
        return self._held.puts, self._held.evictions

    def keys(self) -> list[Key]:
        """The snapshots held (their keys), least recently used first."""
        return self._held.keys()

    @staticmethod
    def key(ref: TableRef, schema: pa.Schema) -> Key:
        return (ref.location, ref.incarnation, ref.version, tuple(schema.names))

    # -- the request path ------------------------------------------------------------------

    def get(self, ref: TableRef, schema: pa.Schema) -> Table | None:
        """The in-memory table of exactly ``ref``'s snapshot, if cached (no I/O)."""
        if not self.enabled:
            return None
        entry = self._held.get(self.key(ref, schema))
        return None if entry is None else entry.table

    def consider(self, ref: TableRef, dataset: Any, schema: pa.Schema, mode: str) -> None:
        """A query planned on ``ref``'s snapshot from Lance (a miss): count the use, and start
        loading it in the background if the policy ``mode`` admits it. Returns at once."""
        if not self.enabled or mode == "off":
            return
        key = self.key(ref, schema)
        with self._lock:
            if key in self._held or key in self._loading or key in self._too_large:
                return
            uses = self._uses[key] = self._uses.get(key, 0) + 1
            if mode != "hot" and uses < self.admit_after:
                return
            if self._clock() < self._calm_after:
                return  # under memory pressure: admit nothing for a while
            self._loading.add(key)
            if self._loader is None:
                self._loader = ThreadPoolExecutor(1, thread_name_prefix="lake-cache-load")
            loader = self._loader
        loader.submit(self._load, key, dataset, schema, ref.sql_name)

    # -- loading and eviction -------------------------------------------------------------

    def _load(self, key: Key, dataset: Any, schema: pa.Schema, name: str) -> None:
        try:
            entry = self._read(dataset, schema)
        except Exception as exc:  # noqa: BLE001 - a failed load only means no entry
            log.warning("snapshot cache: loading %s version %s failed: %s", name, key[2], exc)
            entry = None
        with self._lock:
            self._loading.discard(key)
            self._settled.notify_all()
            if entry is None:
                self._too_large.add(key)
                return
            self._uses.pop(key, None)
            if self._clock() < self._calm_after:
                return
            if self._held.put(key, entry, entry.nbytes):
                self.on_evict()
            self.peak_bytes = max(self.peak_bytes, self._held.used_bytes)

    def _read(self, dataset: Any, schema: pa.Schema) -> Entry | None:
        """The snapshot's rows as ``partitions`` partitions carrying exactly ``schema`` (the
        Lance provider's, so a plan's schema is the same cached or not); None if it outgrows
        the budget or is empty."""
        if engine.version_stats(dataset).data_bytes > self.budget_bytes:
            return None  # its files alone outgrow the budget (the manifest says; nothing is read)
        parts: list[list[pa.RecordBatch]] = [[] for _ in range(self.partitions)]
        nbytes = rows = 0
        reader = engine.scanner(dataset, columns=schema.names).to_reader()
        for i, batch in enumerate(reader):
            if not batch.num_rows:
                continue
            batch = pa.RecordBatch.from_arrays(batch.columns, schema=schema)
            nbytes += batch.nbytes
            rows += batch.num_rows
            if nbytes > self.budget_bytes:
                return None
            with self._lock:  # what is held plus what is loading stays within the budget
                self._evict_to(self.budget_bytes - nbytes)
            parts[i % self.partitions].append(batch)
        if not rows:
            return None
        ctx = SessionContext()
        ctx.register_record_batches("t", [p for p in parts if p])
        return Entry(ctx.catalog("datafusion").schema("public").table("t"), nbytes, rows)

    def _evict_to(self, limit: int) -> None:
        """Evict least recently used entries until at most ``limit`` bytes are held (lock held)."""
        if self._held.evict_to(limit):
            self.on_evict()

    def pressure(self) -> None:
        """Query memory ran out: give back half of what is held, admit nothing for a while."""
        with self._lock:
            self._calm_after = self._clock() + self.pressure_seconds
            if self._held.halve():
                self.on_evict()

    def clear(self) -> None:
        with self._lock:
            self._evict_to(0)
            self._uses.clear()
            self._too_large.clear()

    def wait_idle(self, timeout: float = 60.0) -> bool:
        """Wait until no load is running (for tests and benchmarks)."""
        with self._lock:
            return self._settled.wait_for(lambda: not self._loading, timeout)

    def stats(self) -> dict[str, Any]:
        with self._lock:
            counts = self._held.counts()
            return {
                "budget_bytes": self.budget_bytes,
                "used_bytes": counts["used_bytes"],
                "peak_bytes": self.peak_bytes,
                "entries": counts["entries"],
                "hits": counts["hits"],
                "misses": counts["misses"],
                "loads": counts["puts"],
                "evictions": counts["evictions"],
                "loading": len(self._loading),
            }

    def close(self) -> None:
        with self._lock:
            loader, self._loader = self._loader, None
        if loader is not None:
            loader.shutdown(wait=True, cancel_futures=True)


__all__ = ["DataCache", "Entry"]
