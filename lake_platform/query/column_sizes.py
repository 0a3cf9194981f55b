"""How long a plan's column values are on average: what ``row_costs`` scales string calls by.

A table's columns' sizes come from Lance's data statistics (``dataset.stats.data_stats()``):
each field's bytes on disk, summed over the data files from their column metadata (read once
per snapshot: no data page is read; the engine keeps the answer with the snapshot's row
count), divided by the table's rows. Bytes on disk are compressed: text Lance compresses
(FSST, 2-3x) counts smaller than it is, which the per-byte rates' margin absorbs, but a
column of a few repeated values (dictionary or constant encoded) counts as short strings.
Legacy (v1) files report nothing: their columns count as short strings, as before.

Through the plan, a column keeps its size under a new qualifier (a subquery's alias), and a
projection's or grouping's expression has the size of what it computes (``row_costs``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from lake_platform.query.row_costs import ColumnBytes, expression_bytes

#: A table's columns' average bytes, by its fully qualified name as the plan spells it
#: (empty when it is not one of the query's tables).
SizesOf = Callable[[tuple[str, ...]], "dict[str, float]"]

_Columns = list[tuple["str | None", str, float]]


def average_bytes(dataset: Any, rows: int) -> dict[str, float]:
    """Each top-level column of a Lance ``dataset`` (opened at its version) and its average
    bytes per row (a nested column's fields are added to it); {} for an empty table."""
    if rows <= 0:
        return {}
    on_disk = {field.id: field.bytes_on_disk for field in dataset.stats.data_stats().fields}
    sizes: dict[str, float] = {}
    for field in dataset.lance_schema.fields():
        stack, total = [field], 0
        while stack:
            part = stack.pop()
            total += on_disk.get(part.id(), 0)
            stack.extend(part.children())
        sizes[field.name()] = total / rows
    return sizes


def plan_column_bytes(root: Any, sizes_of: SizesOf) -> ColumnBytes:
    """The average bytes of every column of the (optimized logical) plan ``root``, as a lookup
    by qualifier and name; where one name stands for several columns, the largest."""
    known: dict[tuple[str | None, str], float] = {}
    by_name: dict[str, float] = {}

    def column_bytes(relation: str | None, name: str) -> float:
        found = known.get((relation, name))
        return by_name.get(name, 0.0) if found is None else found

    def columns(node: Any) -> _Columns:
        variant = node.to_variant()
        kind = type(variant).__name__
        below = [columns(child) for child in node.inputs()]
        merged = [column for inputs in below for column in inputs]
        if kind == "TableScan":
            fqn = tuple(part for part in variant.fqn() if part is not None)
            sizes = sizes_of(fqn)
            out = [(variant.table_name(), name, sizes.get(name, 0.0)) for _, name in variant.projection()]
        elif kind == "SubqueryAlias":
            out = [(variant.alias(), name, size) for _, name, size in merged]
        elif kind == "Projection":
            out = [_named(expr, column_bytes) for expr in variant.projections()]
        elif kind == "Aggregate":
            out = [_named(expr, column_bytes) for expr in variant.group_by_exprs()]
            out += [_named(expr, column_bytes) for expr in variant.aggregate_exprs()]
        elif kind == "Values":
            rows = [[expression_bytes(value, column_bytes) for value in row] for row in variant.values()]
            out = [(None, f"column{i + 1}", max(sizes)) for i, sizes in enumerate(zip(*rows, strict=True))]
        elif kind == "Union":
            out = _union(below)
        else:
            out = merged
        for relation, name, size in out:
            known[(relation, name)] = max(size, known.get((relation, name), 0.0))
            by_name[name] = max(size, by_name.get(name, 0.0))
        return out

    columns(root)
    return column_bytes


def _named(expr: Any, column_bytes: ColumnBytes) -> tuple[str | None, str, float]:
    """A projected expression's output column: its qualifier and name, and its size."""
    kind = expr.variant_name()
    if kind == "Alias":
        return None, expr.to_variant().alias(), expression_bytes(expr, column_bytes)
    if kind == "Column":
        column = expr.to_variant()
        return column.relation(), column.name(), column_bytes(column.relation(), column.name())
    return None, expr.canonical_name(), expression_bytes(expr, column_bytes)


def _union(inputs: list[_Columns]) -> _Columns:
    """A union's columns are its first input's, each as long as the longest at its place."""
    if not inputs:
        return []
    if any(len(columns) != len(inputs[0]) for columns in inputs):
        widest = max((size for columns in inputs for _, _, size in columns), default=0.0)
        return [(relation, name, widest) for relation, name, _ in inputs[0]]
    return [
        (relation, name, max(columns[i][2] for columns in inputs))
        for i, (relation, name, _) in enumerate(inputs[0])
    ]


__all__ = ["SizesOf", "average_bytes", "plan_column_bytes"]
