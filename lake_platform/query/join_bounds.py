"""Cross and nested-loop joins refused past a bound on their work: row pairs times each pair's cost.

A query stopped by its time limit (or its client) stops because its DataFusion stream is
dropped, which aborts the stream's tasks at their next yield to the runtime. DataFusion's cross
and nested-loop joins (54.1) multiply rows without reading any, and the loop above them (an
aggregate, the next join) takes their batches without ever yielding (apache/datafusion#19358,
open): ``SELECT sum(a.value * b.value % 7) FROM generate_series(1, 200000) a,
generate_series(1, 200000) b`` dropped after 1.5 s kept both cores busy until the join ended.
Hash and sort-merge joins stop (measured; their build and probe reads yield), so only joins
without an equality key are bounded.

What runs on after the drop is the join's work up to its next read of its probe side (a batch
of it against every build row: measured, the tail shrinks with the batch size), at most all of
it. The bound is on all of it, which needs no knowledge of sides or batches: the join's row
pairs times what each pair costs. (Smaller batches for such plans alone would shorten the tail,
but datafusion-python sets the batch size per context, ``SessionConfig``, not per query.)

The pairs are the product of the row counts the join's two inputs may have, worked out from the
optimized logical plan: a table's rows (``rows_of``, or a scan's own row limit), a VALUES list's
length, one row for an ungrouped aggregate, a union's sum, a join's product, otherwise its
input's (a filter or a LIMIT only lowers it). A table function's rows (``generate_series``,
``range``) are not in the logical plan: they are read from the physical plan's generators
(``start=``/``end=`` of DataFusion's display), the largest for each (a series of dates counts
its span in nanoseconds: refused beside anything but tiny inputs); anything else unknown
(UNNEST, a recursive query) is unbounded.

The cost of a pair is one simple comparison plus, counted in simple comparisons
(``row_costs``), the join's condition and the expressions the nodes above it evaluate for each
row it produces, up to and including the first aggregate (they run in the same loop, between
the same yields). ``md5(a.s || b.s) < '1'`` costs 69 a pair over short strings, 14,585 over
10,000-byte ones; ``regexp_like(a.s || b.s, p)`` 21, ``a.x < b.x`` 1. A call's cost grows with
the bytes it reads: the average sizes of the tables' columns (``sizes_of``, from Lance's
statistics, ``column_sizes``) are asked for only when a keyless join is found and its cost
over short strings is within the bound (a plan without one costs what it did). A join whose
pairs times cost exceed ``max_join_pairs`` is refused before it runs (INVALID_ARGUMENT,
JoinTooLarge). Under the default (10^8: 0.15-0.8 s of one core whatever the condition,
measured: 10^8 pairs of a comparison, 1.4 million of an ``md5`` of short strings, 5.9 million
of a ``replace``; 7,056 of an ``md5`` of two 10,000-byte strings, the most planned, used
0.47-0.67 s after a 0.1 s deadline) a join that does run ends within a second of its deadline
even when nothing can stop it, and a keyless join of two 1,000-row tables of short strings
runs with any one costly call.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from lake_platform.query.column_sizes import SizesOf, plan_column_bytes
from lake_platform.query.errors import JoinTooLarge
from lake_platform.query.facts import any_node
from lake_platform.query.limits import QueryLimits
from lake_platform.query.row_costs import ColumnBytes, expression_cost, node_cost

#: Counts a table's rows: its fully qualified name (warehouse, schema, table as the plan
#: spells it) -> rows, or None when it is not one of the query's tables.
RowsOf = Callable[[tuple[str, ...]], "int | None"]

#: One generator of DataFusion's physical display: ``generate_series: start=1, end=100, ...``.
_GENERATOR = re.compile(r"(\w+): start=(-?\d+), end=(-?\d+)")
#: Plan nodes that may produce more rows than their inputs, by how many the plan does not say.
_UNKNOWN = frozenset({"Unnest", "RecursiveQuery", "Extension"})


@dataclass(frozen=True)
class KeylessJoin:
    """A join without an equality key: at most how many row pairs it compares (inf: unknown),
    what each costs in simple comparisons, the costly calls that make it cost more, and the
    most bytes one of them reads (0: short strings)."""

    pairs: float
    cost: int = 1
    costly: frozenset[str] = frozenset()
    widest: int = 0

    @property
    def work(self) -> float:
        return self.pairs * self.cost


def check_joins(df: Any, rows_of: RowsOf, limits: QueryLimits, sizes_of: SizesOf | None = None) -> None:
    """Raise JoinTooLarge when a join without an equality key in ``df``'s plan may do more than
    ``limits.max_join_pairs`` simple comparisons' work (its row pairs times their cost; 0: no
    limit). A plan with no join costs one walk of its unoptimized logical plan; ``sizes_of``
    (None: every string short) is asked only for a plan with a keyless join."""
    cap = limits.max_join_pairs
    if not cap or not any_node(df.logical_plan(), lambda kind, _: kind == "Join"):
        return
    root = df.optimized_logical_plan()
    bounds = _Bounds(df, rows_of)
    bounds.rows(root, ())
    join = bounds.costliest(None)
    if join.work <= cap and sizes_of is not None and bounds.keyless:
        join = bounds.costliest(plan_column_bytes(root, sizes_of))
    if join.work > cap:
        raise JoinTooLarge(
            f"a join without an equality condition would compare {_shown(join)}, more than "
            f"{limits.named('max_join_pairs')}; join on equal keys, or filter or limit its inputs"
        )


def _shown(join: KeylessJoin) -> str:
    if math.isinf(join.pairs):
        return "an unknown number of row pairs"
    if join.cost == 1:
        return f"up to {int(join.pairs)} row pairs"
    reading = f" over strings of up to {join.widest} bytes" if join.widest else ""
    return (
        f"up to {int(join.pairs)} row pairs at the cost of {join.cost} simple comparisons each "
        f"({', '.join(sorted(join.costly))}{reading}), {int(join.work)} in all"
    )


class _Bounds:
    """Row bounds of one plan's nodes, and its keyless joins: their pairs, their condition and
    the nodes above them that run in their loop (costed by :meth:`costliest`)."""

    def __init__(self, df: Any, rows_of: RowsOf) -> None:
        self._df = df
        self._rows_of = rows_of
        self._generated: float | None = None
        self.keyless: list[tuple[float, Any, tuple[Any, ...]]] = []

    def costliest(self, column_bytes: ColumnBytes | None) -> KeylessJoin:
        """The keyless join that may do the most work, its calls costed over strings of
        ``column_bytes``' sizes (None: short)."""
        costliest = KeylessJoin(0.0)
        for pairs, condition, above in self.keyless:
            cost = expression_cost([] if condition is None else [condition], column_bytes)
            cost = sum((node_cost(node, column_bytes) for node in above), cost)
            join = KeylessJoin(pairs, 1 + cost.units, cost.costly, cost.widest)
            if join.work > costliest.work:
                costliest = join
        return costliest

    def rows(self, node: Any, above: tuple[Any, ...]) -> float:
        """At most how many rows ``node`` produces (inf: unknown). ``above``: the nodes above it
        that evaluate their expressions for each row it produces, in the loop that reads it."""
        variant = node.to_variant()
        kind = type(variant).__name__
        if kind == "Join":
            below_above: tuple[Any, ...] = ()  # a join reads its inputs between yields of their own
        elif kind == "Aggregate":
            below_above = (node,)  # its rows are few, and what is above reads them, not its input's
        else:
            below_above = (*above, node)
        below = [self.rows(child, below_above) for child in node.inputs()]
        if kind == "TableScan":
            rows = self._scan_rows(variant)
            fetch = variant.fetch()
            return rows if fetch is None else min(rows, fetch)
        if kind == "Values":
            return float(len(variant.values()))
        if kind == "Join":
            product = math.prod(below)
            if not variant.on() and product > 0:
                self.keyless.append((product, variant.filter(), above))
            return product
        if kind == "Union":
            return sum(below)
        if kind == "Aggregate" and not variant.group_by_exprs():
            return 1.0
        if kind in _UNKNOWN:
            return math.inf
        return max(below, default=1.0)

    def _scan_rows(self, scan: Any) -> float:
        fqn = tuple(part for part in scan.fqn() if part is not None)
        rows = self._rows_of(fqn)
        if rows is not None:
            return float(rows)
        if scan.table_name().endswith("()"):
            return self._generated_rows()
        return math.inf

    def _generated_rows(self) -> float:
        """The most rows any table function's generator of the physical plan produces (its
        display carries the bounds the logical plan does not)."""
        if self._generated is None:
            shown = self._df.execution_plan().display_indent()
            found = [abs(int(end) - int(start)) + 1 for _, start, end in _GENERATOR.findall(shown)]
            generators = shown.count("batch_generators=")
            # A generator whose bounds are not integers (dates, timestamps) is not understood.
            self._generated = float(max(found)) if found and len(found) >= generators else math.inf
        return self._generated


__all__ = ["KeylessJoin", "check_joins"]
