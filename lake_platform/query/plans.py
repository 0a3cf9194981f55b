"""Plans kept on one replica, so one statement is planned once for its prepare, GetFlightInfo
and DoGet.

DoGet plans the ticket's SQL again against exactly the snapshots it pins: that is what lets
any replica serve any ticket. When the replica that planned the statement also serves its
DoGet (a client with one connection: ADBC's usual case), that planning repeats GetFlightInfo's
exactly, for the same result: the snapshots are immutable. So GetFlightInfo's plan is kept
(:func:`pinned_key`) and DoGet reuses it when everything that determines it is equal: the
principal and its project, the SQL, the bound parameters (their bytes), and every pinned
snapshot (written name and exact ``(engine, location, incarnation, version)``). A different
tenant, user, parameter or version is a different key; an append makes a new version, so a new
GetFlightInfo plans afresh and its ticket pins the new version.

The same holds one step earlier: ADBC's ``execute`` sends CreatePreparedStatement (which plans,
for the result's schema) and then GetFlightInfo of the prepared statement, both over the same
catalog snapshot. A statement's plan over one snapshot's project view is kept under
(principal, SQL, that very view object) (:func:`text_key`) and reused over that view; a
refreshed snapshot (say, after an append) has new views, so it plans afresh. A prepared
statement's plan with its placeholders unbound serves only another prepare of it. A prepared
key lookup is kept for the types of its parameters (:func:`bound_key`, ``bound``): a binding of
other values of those types is answered from it.

Reusing a plan skips planning only: DoGet still checks that every pinned snapshot exists
(``QueryEngine.plan_pinned``), exactly as when it plans. Plans that read the snapshot cache are
kept too (a hot table's query is planned once, not three times), and dropped as soon as the
cache evicts anything (:meth:`PlanCache.drop_cached`), so they never keep evicted batches alive
past the cache's budget.
"""

from __future__ import annotations

import threading
from collections.abc import Hashable, Sequence
from typing import Any

import pyarrow as pa

from lake_platform.lru import BoundedLRU
from lake_platform.query.bound import BoundLookup
from lake_platform.query.planner import PlannedQuery
from lake_platform.query.snapshot import ProjectView, TableRef

Key = tuple[Hashable, ...]


def text_key(scope: Hashable, sql: str, view: ProjectView) -> Key:
    """What determines a plan of ``sql`` over one catalog snapshot's project view (a view is
    never changed; a new snapshot makes new views). Kept with the view as the anchor."""
    return ("text", scope, sql, id(view))


def bound_key(scope: Hashable, sql: str, params: pa.RecordBatch, view: ProjectView) -> Key:
    """What determines a key lookup's plan with parameters bound, but for their values: the
    text, the parameters' types and one view (kept with the view as the anchor)."""
    return ("bound", scope, sql, tuple(field.type for field in params.schema), id(view))


def pinned_key(scope: Hashable, sql: str, params: pa.RecordBatch | None, refs: Sequence[TableRef]) -> Key:
    """What determines a plan over pinned snapshots, and its result (``result_cache``)."""
    bound = (
        None if params is None else (params.schema.serialize().to_pybytes(), params.serialize().to_pybytes())
    )
    return ("pinned", scope, sql, bound, tuple(sorted((r.written, r.key) for r in refs)))


class PlanCache:
    """Two LRUs (thread-safe): plans, and prepared key lookups kept for new bindings (each at
    most ``capacity``; 0 keeps nothing). An entry may have an anchor: an object :meth:`get`
    must be given again, the very same one (kept alive here, so its ``id`` in a key stays its
    own)."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self._plans: BoundedLRU[Key, tuple[Any, PlannedQuery]] = BoundedLRU(capacity)
        self._bound: BoundedLRU[Key, tuple[Any, BoundLookup]] = BoundedLRU(capacity)
        self._lock = threading.Lock()
        self._rebound = 0

    @property
    def hits(self) -> int:
        return self._plans.hits + self._bound.hits

    @property
    def rebound(self) -> int:
        """Bindings of a kept prepared key lookup answered from it, unplanned (``bound``)."""
        return self._rebound

    def count_rebound(self) -> None:
        with self._lock:
            self._rebound += 1

    def stats(self) -> dict[str, int]:
        """What ``/metrics`` and the health answer report: entries kept now, lookups that found
        one, and bindings answered from a kept lookup (``shaped``, its name since before)."""
        return {"entries": len(self), "hits": self.hits, "shaped": self._rebound}

    def put(self, key: Key, planned: PlannedQuery, anchor: Any = None) -> None:
        self._plans.put(key, (anchor, planned))

    def get(self, key: Key, anchor: Any = None, generation: Any = None) -> PlannedQuery | None:
        """The plan kept under ``key`` for ``anchor``; with ``generation``, only one planned at
        that snapshot cache generation (an older one is planned again: not counted a hit)."""
        kept = self._plans.get(
            key,
            only_if=lambda kept: (
                kept[0] is anchor and (generation is None or kept[1].cache_generation == generation)
            ),
        )
        return None if kept is None else kept[1]

    def put_bound(self, key: Key, bound: BoundLookup, anchor: ProjectView) -> None:
        self._bound.put(key, (anchor, bound))

    def get_bound(self, key: Key, anchor: ProjectView) -> BoundLookup | None:
        kept = self._bound.get(key, only_if=lambda kept: kept[0] is anchor)
        return None if kept is None else kept[1]

    def holds(self, key: Key, planned: PlannedQuery) -> bool:
        """Whether ``planned`` is kept under ``key`` (without touching its place in the LRU)."""
        kept = self._plans.peek(key)
        return kept is not None and kept[1] is planned

    def drop(self, key: Key, planned: PlannedQuery) -> None:
        """Forget ``key`` if it still keeps ``planned``."""
        self._plans.remove(key, only_if=lambda kept: kept[1] is planned)

    def drop_cached(self) -> None:
        """Forget every plan that reads the snapshot cache's batches (after an eviction). A kept
        lookup never does: Lance answers it from its index."""
        self._plans.remove_where(lambda kept: kept[1].cached)

    def clear(self) -> None:
        self._plans.clear()
        self._bound.clear()

    def __len__(self) -> int:
        return len(self._plans) + len(self._bound)


__all__ = ["Key", "PlanCache", "bound_key", "pinned_key", "text_key"]
