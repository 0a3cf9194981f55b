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

Reusing a plan skips planning only: DoGet still checks that every pinned snapshot exists
(``QueryEngine.plan_pinned``), exactly as when it plans. Plans that read the snapshot cache are
not kept (they would keep evicted batches alive past the cache's budget).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Hashable, Sequence

import pyarrow as pa

from lake_platform.query.planner import PlannedQuery
from lake_platform.query.snapshot import TableRef


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
        self._plans: OrderedDict[tuple[Hashable, ...], PlannedQuery] = OrderedDict()
        self._lock = threading.Lock()
        self.hits = 0

    def put(self, key: tuple[Hashable, ...], planned: PlannedQuery) -> None:
        if self.capacity <= 0:
            return
        with self._lock:
            self._plans[key] = planned
            self._plans.move_to_end(key)
            while len(self._plans) > self.capacity:
                self._plans.popitem(last=False)

    def get(self, key: tuple[Hashable, ...]) -> PlannedQuery | None:
        with self._lock:
            planned = self._plans.get(key)
            if planned is not None:
                self._plans.move_to_end(key)
                self.hits += 1
            return planned

    def clear(self) -> None:
        with self._lock:
            self._plans.clear()

    def __len__(self) -> int:
        with self._lock:
            return len(self._plans)


__all__ = ["PlanCache", "plan_key"]
