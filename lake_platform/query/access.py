"""Which access path a query takes to a cached snapshot: a key lookup on an indexed column
reads Lance (its scalar index), not the snapshot cache.

The snapshot cache holds a hot version as in-memory batches, which DataFusion can only filter
by scanning every row: on 5M rows a point query takes ~6-8 ms there, where Lance answers it
from a BTREE index in ~1 ms (bench/indexes.py). Both read exactly the same immutable snapshot,
so the choice changes the time a query takes, never its rows. A query is a key lookup when a
filter of its (unoptimized) plan has a ``column = literal`` or ``column IN (...)`` conjunct
(``split``'s test); it prefers Lance when such a column has a scalar index in the snapshot.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from lake_platform.lru import BoundedLRU
from lake_platform.query.snapshot import TableRef
from lake_platform.query.split import lookup_exprs


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
    variant = expr.to_variant()
    kind = type(variant).__name__
    while kind in ("Cast", "TryCast"):
        variant = variant.expr().to_variant()
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


__all__ = ["IndexedColumns", "lookup_columns", "prefer_index"]
