"""Cross and nested-loop joins refused past a bound on the row pairs they would evaluate.

A query stopped by its time limit (or its client) stops because its DataFusion stream is
dropped, which aborts the stream's tasks at their next yield to the runtime. DataFusion's cross
and nested-loop joins (54.1) multiply rows without reading any, and the loop above them (an
aggregate, the next join) takes their batches without ever yielding (apache/datafusion#19358,
open): ``SELECT sum(a.value * b.value % 7) FROM generate_series(1, 200000) a,
generate_series(1, 200000) b`` dropped after 1.5 s kept both cores busy until the join ended.
Hash and sort-merge joins stop (measured; their build and probe reads yield), so only joins
without an equality key are bounded.

The bound is the product of the row counts the join's two inputs may have, worked out from the
optimized logical plan: a table's rows (``rows_of``, or a scan's own row limit), a VALUES list's
length, one row for an ungrouped aggregate, a union's sum, a join's product, otherwise its
input's (a filter or a LIMIT only lowers it). A table
function's rows (``generate_series``, ``range``) are not in the logical plan: they are read from
the physical plan's generators (``start=``/``end=`` of DataFusion's display), the largest for
each (a series of dates counts its span in nanoseconds: refused beside anything but tiny
inputs); anything else unknown (UNNEST, a recursive query) is unbounded. A join whose bound exceeds
``max_join_pairs`` is refused before it runs (INVALID_ARGUMENT, JoinTooLarge); under the default
(10^8 pairs, about 0.15-0.35 s of one core on the reference VM) a join that does run ends within
a second of its deadline even when nothing can stop it.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from typing import Any

from lake_platform.query.errors import JoinTooLarge
from lake_platform.query.facts import any_node
from lake_platform.query.limits import QueryLimits

#: Counts a table's rows: its fully qualified name (warehouse, schema, table as the plan
#: spells it) -> rows, or None when it is not one of the query's tables.
RowsOf = Callable[[tuple[str, ...]], "int | None"]

#: One generator of DataFusion's physical display: ``generate_series: start=1, end=100, ...``.
_GENERATOR = re.compile(r"(\w+): start=(-?\d+), end=(-?\d+)")
#: Plan nodes that may produce more rows than their inputs, by how many the plan does not say.
_UNKNOWN = frozenset({"Unnest", "RecursiveQuery", "Extension"})


def check_joins(df: Any, rows_of: RowsOf, limits: QueryLimits) -> None:
    """Raise JoinTooLarge when a join without an equality key in ``df``'s plan may evaluate more
    than ``limits.max_join_pairs`` row pairs (0: no limit). A plan with no such join costs one
    walk of its unoptimized logical plan."""
    cap = limits.max_join_pairs
    if not cap or not any_node(df.logical_plan(), lambda kind, _: kind == "Join"):
        return
    bounds = _Bounds(df, rows_of)
    pairs = bounds.largest_pairs(df.optimized_logical_plan())
    if pairs > cap:
        shown = "an unknown number of" if math.isinf(pairs) else f"up to {int(pairs)}"
        raise JoinTooLarge(
            f"a join without an equality condition would compare {shown} row pairs, more than "
            f"{limits.named('max_join_pairs')}; join on equal keys, or filter or limit its inputs"
        )


class _Bounds:
    """Row bounds of one plan's nodes and the largest pair count of its keyless joins."""

    def __init__(self, df: Any, rows_of: RowsOf) -> None:
        self._df = df
        self._rows_of = rows_of
        self._generated: float | None = None
        self.pairs = 0.0

    def largest_pairs(self, root: Any) -> float:
        self.rows(root)
        return self.pairs

    def rows(self, node: Any) -> float:
        """At most how many rows ``node`` produces (inf: unknown)."""
        variant = node.to_variant()
        kind = type(variant).__name__
        inputs = node.inputs()
        below = [self.rows(child) for child in inputs]
        if kind == "TableScan":
            rows = self._scan_rows(variant)
            fetch = variant.fetch()
            return rows if fetch is None else min(rows, fetch)
        if kind == "Values":
            return float(len(variant.values()))
        if kind == "Join":
            product = math.prod(below)
            if not variant.on():
                self.pairs = max(self.pairs, product)
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


__all__ = ["check_joins"]
