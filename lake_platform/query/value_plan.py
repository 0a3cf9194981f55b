"""What the value check (``value_bounds``) reads of a DataFusion logical plan: a node's
expressions, the name of the column an expression makes, the function it calls, what a literal is,
and whether a node evaluates its expressions once."""

from __future__ import annotations

import re
from typing import Any

import pyarrow as pa

from lake_platform.query.value_compose import SMALL, SMALL_KINDS, Part

#: The longest text literal kept as a value (a function's flags, such as ``regexp_replace``'s).
_FLAGS = 16


_SMALL_CALLS = "|".join(sorted(name for name in SMALL if name.isidentifier() and name.islower()))
#: What in an expression's text may build a value: a call of a function not in ``SMALL``
#: (DataFusion writes them in lower case; a literal's type, ``Int64(1)``, is capitalised), a CAST,
#: a CASE, ``||`` or a subquery (``value_hidden.subquery_may_grow``).
_MAY_BUILD = re.compile(
    rf"<subquery>|\|\||\bCASE\b|CAST\(|(?<![\w.])(?!(?:{_SMALL_CALLS})\()[a-z_][a-z0-9_]*\("
)


def may_build(expr: Any) -> bool:
    """Whether ``expr`` may build a value (its text names something that could). Walking an
    expression costs the square of its depth (each operand handed to Python is a copy of its
    subtree): a generated ``x = 1 OR x = 2 OR ...`` of 3,000 terms took 14 s, and it builds
    nothing, as comparisons of columns and literals never do."""
    return bool(_MAY_BUILD.search(expr.canonical_name()))


def evaluated_once(node: Any, variant: Any) -> bool:
    """Whether ``node`` evaluates its expressions for one row only: a literal call there is one
    value, not a column of a batch."""
    if type(variant).__name__ == "Values":
        return len(variant.values()) <= 1
    return all(type(child.to_variant()).__name__ == "EmptyRelation" for child in node.inputs())


def merged(inputs: list[dict[str, Part]]) -> dict[str, Part]:
    """The columns of a node's inputs; of two of one name (a join's, a union's) the larger bound."""
    if len(inputs) == 1:
        return inputs[0]
    merged: dict[str, Part] = {}
    for columns in inputs:
        for name, part in columns.items():
            if name not in merged or _larger(part, merged[name]):
                merged[name] = part
    return merged


def _larger(part: Part, other: Part) -> bool:
    return ((part.built or 0), max(part.copies.values(), default=0)) > (
        (other.built or 0),
        max(other.copies.values(), default=0),
    )


def output_name(expr: Any) -> str:
    """The (unqualified) name of the column a projection or aggregate expression makes."""
    kind = expr.variant_name()
    if kind == "Alias":
        return str(expr.to_variant().alias())
    if kind == "Column":
        return str(expr.to_variant().name())
    return str(expr.schema_name())


def called(expr: Any, kind: str) -> str:
    """The lower-case name of the function or operator ``expr`` calls ("": none known)."""
    try:
        if kind == "AggregateFunction":
            return str(expr.to_variant().aggregate_type()).lower()
        if kind in SMALL_KINDS:
            return kind  # a predicate or a sign: ``value_compose.SMALL``
        if kind in ("ScalarFunction", "BinaryExpr"):
            return str(expr.rex_call_operator()).lower()
    except Exception:  # noqa: BLE001 - datafusion-python names only some expression kinds
        pass
    return ""


def literal_part(expr: Any) -> Part:
    value = expr.python_value().as_py()
    if isinstance(value, int) and not isinstance(value, bool):
        return Part(literal=True, integer=value)
    # Text is a value of its length wherever it is used per row (``SELECT '<10 KB>' FROM t`` copies
    # it to every row); a comparison or match over it builds nothing (``value_compose.SMALL``).
    if isinstance(value, str):
        text = value.encode()
        refs = text.count(b"$") + text.count(b"\\")
        flags = value if len(text) <= _FLAGS else None
        groups = text.count(b"(") - text.count(b"\\(")
        return Part(
            built=len(text), literal=True, text=len(text), references=refs, flags=flags, groups=groups
        )
    if isinstance(value, bytes):
        return Part(built=len(value), literal=True, text=len(value))
    return Part(literal=True)


def literal_bytes(expr: Any) -> int:
    """The Arrow bytes of a literal as one element of a list (its offsets included), at least 1."""
    scalar = expr.python_value()
    return max(1, pa.array([scalar.as_py()], type=scalar.type).nbytes)


def integer(expr: Any) -> int | None:
    if expr is None or str(expr.rex_type()) != "RexType.Literal":
        return None
    value = expr.python_value().as_py()
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def expressions(variant: Any) -> list[Any] | None:
    """The expressions of one plan node (None: the node kind's are not exposed)."""
    kind = type(variant).__name__
    if kind == "Projection":
        return list(variant.projections())
    if kind == "Filter":
        return [variant.predicate()]
    if kind == "Aggregate":
        return [*variant.group_by_exprs(), *variant.aggregate_exprs()]
    if kind == "Sort":
        return [sort.expr() for sort in variant.sort_exprs()]
    if kind == "Join":
        found = [side for pair in variant.on() for side in pair]
        return found if variant.filter() is None else [*found, variant.filter()]
    if kind == "TableScan":
        return list(variant.filters())
    if kind == "Values":
        return [value for row in variant.values() for value in row]
    if kind in ("SubqueryAlias", "Union", "EmptyRelation", "Subquery"):
        return []
    return None


__all__ = [
    "called",
    "evaluated_once",
    "expressions",
    "integer",
    "literal_bytes",
    "literal_part",
    "may_build",
    "merged",
    "output_name",
]
