"""Planned queries kept between a statement's GetFlightInfo and its DoGet on the same replica.

DoGet plans the ticket's SQL again against exactly the snapshots it pins: that is what lets
any replica serve any ticket. When the replica that planned the statement also serves its
DoGet (a client with one connection: ADBC's usual case), that planning repeats GetFlightInfo's
exactly, for the same result: the snapshots are immutable. So GetFlightInfo's plan is kept
here and DoGet reuses it when everything that determines it is equal: the principal and its
project, the SQL, the bound parameters (their bytes), and every pinned snapshot (written name
and exact ``(engine, location, incarnation, version)``). A different tenant, user, parameter
or version is a different key; an append makes a new version, so a new GetFlightInfo plans
afresh and its ticket pins the new version.

The same holds one step earlier: ADBC's ``execute`` sends CreatePreparedStatement (which plans,
for the result's schema) and then GetFlightInfo of the prepared statement, both over the same
catalog snapshot. A parameterless statement's plan over one snapshot's project view is kept
under (principal, SQL, that very view object) and GetFlightInfo reuses it; a refreshed
snapshot (say, after an append) has new views, so it plans afresh.

Reusing a plan skips planning only: DoGet still checks that every pinned snapshot exists
(``QueryEngine.plan_pinned``), exactly as when it plans. Plans that read the snapshot cache are
kept too (a hot table's query is planned once, not three times), and dropped as soon as the
cache evicts anything (:meth:`PlanCache.drop_cached`), so they never keep evicted batches alive
past the cache's budget. A plan is reused only while the cache has loaded and evicted nothing since it was
planned (``QueryEngine._fresh``): one planned on Lance before its snapshot was loaded must not
keep the query off the cached batches.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Hashable, Sequence
from typing import Any

import pyarrow as pa

from lake_platform.query.planner import PlannedQuery
from lake_platform.query.snapshot import TableRef


def view_key(scope: Hashable, sql: str, view: Any) -> tuple[Hashable, ...]:
    """What determines a plan of parameterless ``sql`` over one catalog snapshot's project view
    (a view is never changed; a new snapshot makes new views): CreatePreparedStatement's plan
    is GetFlightInfo's. Kept with the view as the anchor."""
    return ("view", scope, sql, id(view))


def plan_key(
    scope: Hashable, sql: str, params: pa.RecordBatch | None, refs: Sequence[TableRef]
) -> tuple[Hashable, ...]:
    """What determines a pinned plan. ``scope``: who asks (the principal and its project)."""
    bound = (
        None if params is None else (params.schema.serialize().to_pybytes(), params.serialize().to_pybytes())
    )
    return (scope, sql, bound, tuple(sorted((r.written, r.key) for r in refs)))


class PlanCache:
    """An LRU of pinned plans (thread-safe). ``capacity`` 0 keeps nothing."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self._plans: OrderedDict[tuple[Hashable, ...], tuple[Any, PlannedQuery]] = OrderedDict()
        self._lock = threading.Lock()
        self.hits = 0

    def put(self, key: tuple[Hashable, ...], planned: PlannedQuery, anchor: Any = None) -> None:
        """Keep ``planned`` under ``key``; ``anchor``: an object :meth:`get` must be given
        again, the very same one (kept alive here, so its ``id`` in a key stays its own)."""
        if self.capacity <= 0:
            return
        with self._lock:
            self._plans[key] = (anchor, planned)
            self._plans.move_to_end(key)
            while len(self._plans) > self.capacity:
                self._plans.popitem(last=False)

    def get(self, key: tuple[Hashable, ...], anchor: Any = None) -> PlannedQuery | None:
        with self._lock:
            kept = self._plans.get(key)
            if kept is None or kept[0] is not anchor:
                return None
            self._plans.move_to_end(key)
            self.hits += 1
            return kept[1]

    def holds(self, key: tuple[Hashable, ...], planned: PlannedQuery) -> bool:
        """Whether ``planned`` is kept under ``key`` (without touching its place in the LRU)."""
        with self._lock:
            kept = self._plans.get(key)
        return kept is not None and kept[1] is planned

    def drop(self, key: tuple[Hashable, ...], planned: PlannedQuery) -> None:
        """Forget ``key`` if it still keeps ``planned``."""
        with self._lock:
            kept = self._plans.get(key)
            if kept is not None and kept[1] is planned:
                del self._plans[key]

    def drop_cached(self) -> None:
        """Forget every plan that reads the snapshot cache's batches (after an eviction)."""
        with self._lock:
            for key in [k for k, (_, planned) in self._plans.items() if planned.cached]:
                del self._plans[key]

    def clear(self) -> None:
        with self._lock:
            self._plans.clear()

    def __len__(self) -> int:
        with self._lock:
            return len(self._plans)


__all__ = ["PlanCache", "plan_key", "view_key"]
