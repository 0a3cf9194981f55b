"""Which access path a query takes to each snapshot it reads: the snapshot cache's batches,
Lance's table provider, or, for a key lookup on an indexed column, Lance's scalar index.

The snapshot cache holds a hot version as in-memory batches, which DataFusion can only filter
by scanning every row: on 5M rows a point query takes ~6-8 ms there, where Lance answers it
from a BTREE index in ~1 ms (bench/indexes.py). Both read exactly the same immutable snapshot,
so the choice changes the time a query takes, never its rows. A query is a key lookup when a
filter of its (unoptimized) plan has a ``column = literal`` or ``column IN (...)`` conjunct
(``facts.lookup_exprs``); it prefers Lance when such a column has a scalar index in the snapshot.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import replace
from typing import Any

import pyarrow as pa
from datafusion.catalog import Table

from lake_platform.lru import BoundedLRU
from lake_platform.query.cache import DataCache
from lake_platform.query.facts import lookup_exprs, uncast, variant_of
from lake_platform.query.lookup import Lookup, lookup_of
from lake_platform.query.planner import OpenTable, PlannedQuery
from lake_platform.query.providers import Providers
from lake_platform.query.snapshot import TableRef


def lookup_columns(root: Any) -> list[frozenset[str]]:
    """Per lookup conjunct of a filter anywhere in the plan (``Filter`` nodes and scan
    filters), the (unqualified) names of the columns it compares to literals."""
    found: list[frozenset[str]] = []
    stack = [root]
    while stack:
        node = stack.pop()
        variant = node.to_variant()
        kind = type(variant).__name__
        if kind == "Filter":
            exprs: Iterable[Any] = (variant.predicate(),)
        elif kind == "TableScan":
            exprs = variant.filters()
        else:
            exprs = ()
        for expr in exprs:
            for lookup in lookup_exprs(expr):
                found.append(frozenset(_columns(lookup)))
        stack.extend(node.inputs())
    return found


def _columns(expr: Any) -> set[str]:
    variant = variant_of(uncast(expr), "Column", "BinaryExpr", "InList")
    kind = type(variant).__name__
    if kind == "Column":
        return {variant.name()}
    if kind == "BinaryExpr":
        return _columns(variant.left()) | _columns(variant.right())
    if kind == "InList":
        return _columns(variant.expr())
    return set()


class IndexedColumns:
    """The columns with a scalar index, per exact snapshot (an LRU: a version's indexes never
    change). Thread-safe. ``dataset``: opens a ref's version (the engine's provider cache)."""

    def __init__(self, dataset: Callable[[TableRef], Any], capacity: int = 256) -> None:
        self._dataset = dataset
        self._columns: BoundedLRU[Any, frozenset[str]] = BoundedLRU(capacity)

    def __call__(self, ref: TableRef) -> frozenset[str]:
        return self._columns.get_or_make(ref.key, lambda: self._indexed(ref))

    def _indexed(self, ref: TableRef) -> frozenset[str]:
        return frozenset(
            fields[0]
            for desc in self._dataset(ref).describe_indices()
            if not desc.name.startswith("__") and len(fields := list(desc.field_names or [])) == 1
        )


def prefer_index(
    root: Any, served: Iterable[TableRef], indexed: Callable[[TableRef], frozenset[str]]
) -> frozenset[Any]:
    """The keys of the cache-served snapshots ``served`` whose scalar index a lookup in the
    plan ``root`` can use (empty: keep the cache)."""
    refs = list(served)
    if not refs:
        return frozenset()
    columns = [(ref, indexed(ref)) for ref in refs]
    if not any(cols for _, cols in columns):
        return frozenset()  # no index on any cached table: nothing to look for in the plan
    # A lookup helps only if its every column is indexed (``a = 1 OR b = 2`` with ``b``
    # unindexed makes Lance scan anyway).
    wanted = [c for c in lookup_columns(root) if c]
    return frozenset(ref.key for ref, cols in columns if any(c <= cols for c in wanted))


class AccessPaths:
    """Plans a query so that each snapshot it reads is read where it is quickest: from the
    snapshot cache's batches when the cache holds it, else from Lance's provider, and from
    Lance's index when a key lookup in the plan can use one (planned again on Lance's provider:
    the same snapshot, the same rows). A plan that is a key lookup Lance answers directly gets
    its :class:`Lookup` (``lookup``). Thread-safe."""

    def __init__(self, providers: Providers, cache: DataCache, capacity: int) -> None:
        self._providers = providers
        self._cache = cache
        self.indexed = IndexedColumns(lambda ref: providers.entry(ref, False)[0], capacity)
        self.index_lookups = 0  # plannings moved from the cache to a scalar index

    def plan(self, plan: Callable[[OpenTable], PlannedQuery]) -> PlannedQuery:
        """``plan(open_table)``, with the access paths above chosen; its ``cached``,
        ``cache_generation`` and ``lookup`` say which."""
        served: list[TableRef] = []
        misses: list[tuple[TableRef, Any, pa.Schema, str]] = []
        generation = self._cache.generation  # read first: a load or eviction meanwhile makes it stale
        planned = plan(self._opener(served, misses=misses))
        bypass = prefer_index(planned.df.logical_plan(), served, self.indexed)
        if bypass:
            self.index_lookups += 1
            served = []
            planned = plan(self._opener(served, bypass))
        if misses:
            # An index lookup never reads the cache, so it does not count toward loading the
            # snapshot into it (a table queried only by key would be loaded for nothing).
            lookups = prefer_index(planned.df.logical_plan(), [m[0] for m in misses], self.indexed)
            for ref, dataset, schema, mode in misses:
                if ref.key not in lookups:
                    self._cache.consider(ref, dataset, schema, mode)
        lookup = None if served else self._lookup(planned)
        return replace(planned, cached=bool(served), cache_generation=generation, lookup=lookup)

    def _lookup(self, planned: PlannedQuery) -> Lookup | None:
        """``planned`` (read from Lance) as a key lookup on an indexed column Lance answers
        directly; None: DataFusion executes it."""
        if len(planned.refs) != 1 or planned.cached:
            return None
        ref = planned.refs[0]
        found = lookup_of(planned.df, ref, planned.schema, self._providers.entry(ref, False)[0].schema)
        return found if found is not None and found.keys & self.indexed(ref) else None

    def _opener(
        self,
        served: list[TableRef],
        bypass: frozenset[Any] = frozenset(),
        misses: list[tuple[TableRef, Any, pa.Schema, str]] | None = None,
    ) -> OpenTable:
        """An ``open_table`` for one planning: records in ``served`` the refs it answered from
        the snapshot cache; opens the refs whose key is in ``bypass`` from Lance, uncounted;
        with ``misses``, a miss is recorded there to be counted once the plan is known."""

        def open_table(ref: TableRef, verify: bool, cache_mode: str | None = None) -> Table:
            dataset, _, table = self._providers.entry(ref, verify)
            if not self._cache.enabled or ref.key in bypass:
                return table
            schema = table.schema
            cached = self._cache.get(ref, schema)
            if cached is not None:
                served.append(ref)
                return cached
            if cache_mode is not None and not bypass and misses is not None:
                misses.append((ref, dataset, schema, cache_mode))
            return table

        return open_table


__all__ = ["AccessPaths", "IndexedColumns", "lookup_columns", "prefer_index"]
