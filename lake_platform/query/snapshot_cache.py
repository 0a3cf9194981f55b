"""The process's cached catalog snapshot, refreshed in the background (invariant 7).

:class:`SnapshotCache` keeps one :class:`~lake_platform.query.snapshot.CatalogSnapshot`,
replaced atomically by a single background refresh every TTL (by change: the previous snapshot
and what the registry's change feed names since, see ``load_snapshot``); concurrent refresh
requests are coalesced into one load, and a failed load keeps the last good snapshot until it is older than
``max_stale`` (then readers get ServiceUnavailable, never "table not found").
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from lake_platform.errors import LakeError, ServiceUnavailable
from lake_platform.query.snapshot import CatalogSnapshot, load_snapshot
from lake_platform.query.snapshot_transactions import Published
from lake_platform.registry.store import MetaStore

log = logging.getLogger(__name__)


class SnapshotCache:
    """One process-local snapshot, refreshed in the background; reads touch the registry only to
    make up a late refresh (see :meth:`current`)."""

    def __init__(
        self,
        loader: Callable[[CatalogSnapshot | None], CatalogSnapshot],
        *,
        ttl: float,
        max_stale: float,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._loader = loader
        self.ttl = ttl
        self.max_stale = max(max_stale, ttl)
        self._clock = clock
        self._snapshot: CatalogSnapshot | None = None
        self._lock = threading.Lock()
        self._inflight: threading.Event | None = None
        self._last_error: LakeError | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.loads = 0
        #: refresh calls that joined the load in flight instead of loading (coalesced)
        self.coalesced = 0
        self.failures = 0
        self._failures_in_row = 0

    @classmethod
    def for_store(
        cls, store: MetaStore, *, ttl: float, max_stale: float, published: Published | None = None
    ) -> SnapshotCache:
        """Snapshots of ``store``; ``published``: ``load_snapshot``'s (a server that opens the
        tables passes ``manifests_on_storage``)."""
        return cls(lambda prev: load_snapshot(store, prev, published), ttl=ttl, max_stale=max_stale)

    # -- reads (no I/O) ------------------------------------------------------------------

    def current(self) -> CatalogSnapshot:
        """The snapshot readers use. Raises ServiceUnavailable if there is none, or if refreshes
        have failed for longer than ``max_stale``.

        A snapshot past ``max_stale`` while the registry is healthy means the background refresh
        is only late (its thread descheduled on a busy machine): the reader refreshes once, in
        line and coalesced, rather than refusing. After a failed refresh it does not: the
        background thread backs off, and reads must not add calls to a backend that is down."""
        snap = self._snapshot
        if snap is None:
            raise ServiceUnavailable(f"the catalog is not loaded yet{self._reason()}; retry shortly")
        if self._clock() - snap.loaded_at > self.max_stale and self._last_error is None:
            snap = self.refresh() or snap
        if self._clock() - snap.loaded_at > self.max_stale:
            raise ServiceUnavailable(
                f"the catalog could not be refreshed for {self._clock() - snap.loaded_at:.0f}s"
                f"{self._reason()}; retry shortly"
            )
        return snap

    def latest(self) -> CatalogSnapshot | None:
        """The last good snapshot however old (for checks that only use positive knowledge,
        such as "this incarnation was dropped"), or None before the first load."""
        return self._snapshot

    def _reason(self) -> str:
        return f" (registry: {self._last_error.message})" if self._last_error is not None else ""

    def status(self) -> dict[str, Any]:
        snap = self._snapshot
        return {
            "loaded": snap is not None,
            "age_seconds": round(self._clock() - snap.loaded_at, 3) if snap else None,
            "tables": snap.table_count() if snap else 0,
            "ttl_seconds": self.ttl,
            "max_stale_seconds": self.max_stale,
            "loads": self.loads,
            "coalesced": self.coalesced,
            "failures": self.failures,
            "last_error": self._last_error.message if self._last_error else None,
        }

    # -- refresh -------------------------------------------------------------------------

    def refresh(self) -> CatalogSnapshot | None:
        """Load a new snapshot, or wait for the load already in flight (coalescing). Returns the
        snapshot now in place (the last good one if this load failed)."""
        with self._lock:
            inflight = self._inflight
            leader = inflight is None
            if leader:
                inflight = self._inflight = threading.Event()
            else:
                self.coalesced += 1
        assert inflight is not None
        if not leader:
            inflight.wait()
            return self._snapshot
        try:
            snap = self._loader(self._snapshot)
            self._snapshot = snap  # atomic replacement: readers see the old or the new one
            self._last_error = None
            self._failures_in_row = 0
            self.loads += 1
        except Exception as exc:  # noqa: BLE001 - keep the last good snapshot
            self.failures += 1
            self._failures_in_row += 1
            self._last_error = exc if isinstance(exc, LakeError) else ServiceUnavailable(type(exc).__name__)
            log.warning("catalog snapshot refresh failed; keeping the last good one: %s", exc)
        finally:
            with self._lock:
                self._inflight = None
            inflight.set()
        return self._snapshot

    def advance(self, seen: CatalogSnapshot, newer: CatalogSnapshot) -> bool:
        """Put ``newer`` in place of ``seen``: ``seen`` with a table brought up to the registry's
        head by a reader (``snapshot_head``). False, and nothing changed, when a refresh has
        replaced ``seen`` meanwhile (the reader's next request compares the head again)."""
        with self._lock:
            if self._snapshot is not seen:
                return False
            self._snapshot = newer
            return True

    def start(self) -> None:
        """Load once now (a failure is retried in the background), then refresh every TTL."""
        if self._thread is not None:
            return
        self.refresh()
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="lake-snapshot-refresh", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self._next_wait()):
            self.refresh()

    def _next_wait(self) -> float:
        snap = self._snapshot
        if snap is None or self._last_error is not None:
            # Retry soon, backing off while the registry stays down.
            return min(self.ttl * 2 ** min(self._failures_in_row, 8), 5.0, max(self.ttl, 1.0) * 4)
        return max(0.05, self.ttl - (self._clock() - snap.loaded_at))

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
            self._thread = None


__all__ = ["SnapshotCache"]
