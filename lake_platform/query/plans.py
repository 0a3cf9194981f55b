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
snapshot (say, after an append) has new views, so it plans afresh. Over the same view, a key
lookup is also kept for texts of its shape (:func:`shape_key`) and, prepared with parameters,
for bindings of the same types (:func:`bound_key`); a statement's plan with its placeholders
unbound serves CreatePreparedStatement only (:func:`unbound_key`).

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
from collections.abc import Hashable, Sequence
from typing import Any

import pyarrow as pa

from lake_platform.lru import BoundedLRU
from lake_platform.query.planner import PlannedQuery
from lake_platform.query.snapshot import TableRef


def view_key(scope: Hashable, sql: str, view: Any) -> tuple[Hashable, ...]:
    """What determines a plan of parameterless ``sql`` over one catalog snapshot's project view
    (a view is never changed; a new snapshot makes new views): CreatePreparedStatement's plan
    is GetFlightInfo's. Kept with the view as the anchor."""
    return ("view", scope, sql, id(view))


def shape_key(scope: Hashable, shape: str, view: Any) -> tuple[Hashable, ...]:
    """What determines a key lookup's plan over one view, but for the literals its text's
    shape takes out (``shapes``): kept with the view as the anchor, as under :func:`view_key`."""
    return ("shape", scope, shape, id(view))


def unbound_key(scope: Hashable, sql: str, view: Any) -> tuple[Hashable, ...]:
    """What determines a prepared statement's plan over one view while its placeholders are
    unbound (CreatePreparedStatement: its schemas): kept apart from :func:`view_key`'s, so a
    GetFlightInfo that binds no values is still refused as when it plans."""
    return ("unbound", scope, sql, id(view))


def bound_key(scope: Hashable, sql: str, params: pa.RecordBatch, view: Any) -> tuple[Hashable, ...]:
    """What determines a key lookup's plan with parameters bound, but for their values: the
    text (its placeholders), the parameters' types, and one view, kept with the view as the
    anchor, as under :func:`view_key` (``QueryEngine._plan_bound``)."""
    return ("bound", scope, sql, tuple(field.type for field in params.schema), id(view))


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
        self._plans: BoundedLRU[tuple[Hashable, ...], tuple[Any, PlannedQuery]] = BoundedLRU(capacity)
        self._lock = threading.Lock()
        self._shaped = 0

    @property
    def hits(self) -> int:
        return self._plans.hits

    @property
    def shaped(self) -> int:
        """Key lookups answered from a kept plan of the same shape (``shapes``) or prepared
        statement with new bound values, unplanned."""
        return self._shaped

    def count_shaped(self) -> None:
        with self._lock:
            self._shaped += 1

    def stats(self) -> dict[str, int]:
        """What ``/metrics`` reports of it: plans kept now, lookups that found one, shaped answers."""
        return {"entries": len(self._plans), "hits": self._plans.hits, "shaped": self._shaped}

    def put(self, key: tuple[Hashable, ...], planned: PlannedQuery, anchor: Any = None) -> None:
        """Keep ``planned`` under ``key``; ``anchor``: an object :meth:`get` must be given
        again, the very same one (kept alive here, so its ``id`` in a key stays its own)."""
        self._plans.put(key, (anchor, planned))

    def get(self, key: tuple[Hashable, ...], anchor: Any = None) -> PlannedQuery | None:
        kept = self._plans.get(key, only_if=lambda kept: kept[0] is anchor)
        return None if kept is None else kept[1]

    def holds(self, key: tuple[Hashable, ...], planned: PlannedQuery) -> bool:
        """Whether ``planned`` is kept under ``key`` (without touching its place in the LRU)."""
        kept = self._plans.peek(key)
        return kept is not None and kept[1] is planned

    def drop(self, key: tuple[Hashable, ...], planned: PlannedQuery) -> None:
        """Forget ``key`` if it still keeps ``planned``."""
        self._plans.remove(key, only_if=lambda kept: kept[1] is planned)

    def drop_cached(self) -> None:
        """Forget every plan that reads the snapshot cache's batches (after an eviction)."""
        self._plans.remove_where(lambda kept: kept[1].cached)

    def clear(self) -> None:
        self._plans.clear()

    def __len__(self) -> int:
        return len(self._plans)


__all__ = ["PlanCache", "plan_key", "shape_key", "view_key"]
