"""What a plan's structure says about its answer, read from DataFusion's logical plans.

Splitting (``split``), spooling (``flight.spool``) and the order of the endpoints ask the same
few questions of every plan: does its order matter, does a filter compare a column to a value
(a point or key lookup), is it a row-wise function of one table's rows, does it return rows of
its tables rather than aggregates. :class:`PlanFacts` answers each from the plan the first time
it is asked and keeps the answer: a plan never changes. A key lookup bound to other values
(``bound``) has its kept plan's structure with other literals, so it shares that plan's facts
and is never planned by DataFusion to answer them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

#: Plan nodes that keep a result a row-wise function of its input rows.
_ROW_WISE = frozenset({"Projection", "Filter", "SubqueryAlias", "TableScan"})
#: Plan nodes above a sort that keep its order.
_ORDER_KEEPING = frozenset({"Projection", "SubqueryAlias", "Limit", "Filter"})
#: Plan nodes whose output are not rows of the tables read (what is never spooled by size).
_NOT_TABLE_ROWS = frozenset({"Aggregate", "Distinct", "Limit"})
#: Plan nodes that may carry a row limit of their own once optimized (a top-n is a Sort with a
#: fetch, and a pushed-down LIMIT a TableScan's).
_FETCHING = {"Sort": "get_fetch_val", "TableScan": "fetch"}


@dataclass(frozen=True, eq=False)
class PlanFacts:
    """The facts of one plan's structure (``df``: its DataFusion frame), each worked out the
    first time it is asked. Immutable: a fact, once known, is the plan's for good."""

    df: Any = field(repr=False)  # datafusion.DataFrame, or a frame planned on use (``bound``)

    @cached_property
    def ordered(self) -> bool:
        """The result's order is part of the answer (a sort at the top; the unoptimized plan,
        which costs nothing more to look at)."""
        return sorted_on_top(self.df.logical_plan())

    @cached_property
    def point(self) -> bool:
        """A filter of the (unoptimized) plan compares a column to literals (``id = 5``, an OR
        or IN list of such): a point or key lookup, answered by one stream."""
        return any_node(
            self.df.logical_plan(), lambda kind, v: kind == "Filter" and bool(lookup_exprs(v.predicate()))
        )

    @cached_property
    def row_wise(self) -> bool:
        """The (optimized) result is a scan, filter or projection of exactly one table's rows,
        with no sort, limit or lookup: run over some of its fragments, it returns exactly the
        result rows from those fragments (``split``)."""
        root = self.df.optimized_logical_plan()
        if sorted_on_top(root):
            return False
        scans = 0
        stack = [root]
        while stack:
            node = stack.pop()
            variant = node.to_variant()
            kind = type(variant).__name__
            if kind not in _ROW_WISE:
                return False
            if kind == "TableScan":
                scans += 1
                if variant.fetch() is not None or any(lookup_exprs(e) for e in variant.filters()):
                    return False
            elif kind == "Filter" and lookup_exprs(variant.predicate()):
                return False
            stack.extend(node.inputs())
        return scans == 1

    @cached_property
    def table_rows(self) -> bool:
        """The result may be as big as its tables (what is spooled by size): not a point or key
        lookup (the unoptimized plan, as ``point``), and the optimized plan has no aggregate,
        distinct or limit, and no top-n or scan with a row limit of its own (the optimizer
        moves ``ORDER BY ... LIMIT n`` into the sort and a plain ``LIMIT`` into the scan)."""
        if self.point:
            return False
        return not any_node(self.df.optimized_logical_plan(), _returns_few_rows)


def _returns_few_rows(kind: str, variant: Any) -> bool:
    if kind in _NOT_TABLE_ROWS:
        return True
    fetch = _FETCHING.get(kind)
    return fetch is not None and getattr(variant, fetch)() is not None


def sorted_on_top(root: Any) -> bool:
    """Whether the plan ``root`` sorts its result last (nothing above the sort reorders it)."""
    node = root
    while True:
        kind = type(node.to_variant()).__name__
        if kind == "Sort":
            return True
        inputs = node.inputs()
        if kind not in _ORDER_KEEPING or len(inputs) != 1:
            return False
        node = inputs[0]


def any_node(root: Any, test: Callable[[str, Any], bool]) -> bool:
    """Whether ``test(kind, variant)`` holds for any node of the plan ``root``."""
    stack = [root]
    while stack:
        node = stack.pop()
        variant = node.to_variant()
        if test(type(variant).__name__, variant):
            return True
        stack.extend(node.inputs())
    return False


def variant_of(expr: Any, *kinds: str) -> Any | None:
    """``expr``'s variant when it is one of ``kinds`` (DataFusion's names: ``Column``,
    ``BinaryExpr``, ...), else None. Read by name first: DataFusion's Python binding cannot
    convert every kind (a function call, ``abs(id)`` or ``s['a']``, raises ValueError)."""
    return expr.to_variant() if expr.variant_name() in kinds else None


def uncast(expr: Any) -> Any:
    """``expr`` without the casts around it."""
    while (cast := variant_of(expr, "Cast", "TryCast")) is not None:
        expr = cast.expr()
    return expr


def lookup_exprs(expr: Any) -> list[Any]:
    """A filter's lookup conjuncts: each ``column = literal``, an OR of them, or an IN list."""
    variant = variant_of(expr, "BinaryExpr", "InList")
    kind = type(variant).__name__
    if kind == "BinaryExpr":
        op = variant.op()
        if op == "AND":
            return lookup_exprs(variant.left()) + lookup_exprs(variant.right())
        if op == "OR":
            both = _all_equalities(variant.left()) and _all_equalities(variant.right())
            return [expr] if both else []
        return [expr] if _all_equalities(expr) else []
    if kind == "InList":
        return [] if variant.negated() else [expr]
    return []


def _all_equalities(expr: Any) -> bool:
    variant = variant_of(expr, "BinaryExpr", "InList")
    kind = type(variant).__name__
    if kind == "InList":
        return not variant.negated()
    if kind != "BinaryExpr":
        return False
    op = variant.op()
    if op == "OR":
        return _all_equalities(variant.left()) and _all_equalities(variant.right())
    if op != "=":
        return False
    sides = {_kind(variant.left()), _kind(variant.right())}
    return sides == {"Column", "Literal"}


def _kind(expr: Any) -> str:
    return str(uncast(expr).variant_name())
