"""``lpad`` and ``rpad`` checked at planning: what one call may build stays within
``max_value_bytes``.

Like ``repeat`` (``capped``), they size their result by a number rather than by their inputs'
bytes, and DataFusion builds it outside the memory pool: ``SELECT lpad('x', 2000000000)`` would
allocate gigabytes. A Python replacement cannot take their place (DataFusion keeps one function
per name and a Python function has one signature, so the two- or three-argument form would be
lost), and the optimizer folds a call of literals while planning, before any function of ours
could run. So the unoptimized plan is checked, before anything optimizes it: each call's length
must be an integer literal, and the bytes it may build (4 per character, UTF-8's most) fit the
cap for one value when every argument is a literal (one value is built), else for a batch of
``ROWS_PER_BATCH`` values. Under the default cap (64 MiB) that is 16,777,216 characters for a
literal and 512 for a column (``lpad(name, 20, '0')`` is fine; ``lpad(name, width)`` is refused).

A call the walk below cannot reach is refused rather than let through: in a node whose
expressions the pinned datafusion-python does not expose (a window's; its line names the
function), or in a subquery (whose plan Python sees only as debug text naming ``LPadFunc``).
"""

from __future__ import annotations

import re
from typing import Any

from lake_platform.query.errors import ValueTooLarge
from lake_platform.query.limits import QueryLimits

#: The functions checked here, and which argument is the length of what they build.
LENGTH_ARGUMENT = {"lpad": 1, "rpad": 1}
#: The most bytes a character takes in UTF-8.
BYTES_PER_CHARACTER = 4
#: The most rows a batch is assumed to have: Lance scans in batches of up to 32768 rows
#: (the endpoint's scan batch setting's default), more than DataFusion's own batch size.
ROWS_PER_BATCH = 32768

_NAMED = re.compile(r"(?<![\w$])(?:lpad|rpad)(?![\w$])", re.IGNORECASE)
_CALLED = re.compile(r"(?<![\w$])(?:lpad|rpad)\(", re.IGNORECASE)
#: How DataFusion's debug text of a plan names the two functions.
_IN_SUBQUERY = re.compile(r"\b[LR]PadFunc\b")


def check_values(sql: str, df: Any, limits: QueryLimits) -> None:
    """Raise ValueTooLarge when an ``lpad``/``rpad`` call of ``df``'s (unoptimized) plan could
    build more than ``limits.max_value_bytes``, or its length is not an integer literal. A query
    whose text names neither function costs one regular expression search."""
    if not _NAMED.search(sql):
        return
    _Walk(limits).plan(df.logical_plan())


class _Walk:
    def __init__(self, limits: QueryLimits) -> None:
        self._limits = limits

    def plan(self, root: Any) -> None:
        stack = [root]
        while stack:
            node = stack.pop()
            exprs = _expressions(node.to_variant())
            if exprs is None:
                if _CALLED.search(node.display()):
                    raise self._unchecked(f"a plan node ({node.display().split(':', 1)[0]})")
            else:
                for expr in exprs:
                    self.expr(expr)
            stack.extend(node.inputs())

    def expr(self, root: Any) -> None:
        stack = [root]
        while stack:
            expr = stack.pop()
            kind = expr.variant_name()
            if kind in ("Column", "Literal"):
                continue  # a column named after a call refers to a call checked where it is made
            if kind == "Alias":
                stack.append(expr.to_variant().expr())
            elif kind in ("ScalarSubquery", "InSubquery", "Exists"):
                variant = expr.to_variant()
                if kind == "InSubquery":
                    stack.append(variant.expr())
                # A subquery's plan is not exposed to Python, only its debug text: one that
                # calls either function is refused, not checked.
                if _IN_SUBQUERY.search(repr(variant.subquery())):
                    raise self._unchecked("a subquery")
            else:
                stack.extend(self._operands(expr, kind))

    def _operands(self, expr: Any, kind: str) -> list[Any]:
        """The operands of a call, ``expr`` itself checked if it is one of the functions. Every
        call the expression's text names must be the expression itself or in an operand: an
        operand Python does not see (an aggregate's FILTER, a ROLLUP's sets) is refused."""
        named = len(_CALLED.findall(expr.canonical_name()))
        try:
            operands = list(expr.rex_call_operands()) if str(expr.rex_type()) == "RexType.Call" else []
            function = expr.rex_call_operator().lower() if kind == "ScalarFunction" else ""
        except Exception:  # noqa: BLE001 - datafusion-python converts only some expression kinds
            operands, function = [], ""
        if function in LENGTH_ARGUMENT:
            self._call(function, operands)
            named -= 1
        if named > sum(len(_CALLED.findall(operand.canonical_name())) for operand in operands):
            raise self._unchecked(f"an expression ({kind})")
        return operands

    def _unchecked(self, where: str) -> ValueTooLarge:
        return ValueTooLarge(
            f"lpad or rpad in {where} cannot be checked against {self._limits.named('max_value_bytes')}; "
            "compute it in the outer query's projection"
        )

    def _call(self, name: str, operands: list[Any]) -> None:
        cap = self._limits.max_value_bytes
        length = operands[LENGTH_ARGUMENT[name]] if len(operands) > LENGTH_ARGUMENT[name] else None
        value = _integer(length)
        if value is None:
            raise ValueTooLarge(
                f"{name}'s length must be an integer literal (what it builds is checked against "
                f"{self._limits.named('max_value_bytes')} before the query runs)"
            )
        literal = all(str(o.rex_type()) == "RexType.Literal" for o in operands)
        built = max(value, 0) * BYTES_PER_CHARACTER * (1 if literal else ROWS_PER_BATCH)
        if built > cap:
            where = "" if literal else f" for a batch of {ROWS_PER_BATCH} values"
            raise ValueTooLarge(
                f"{name} to {value} characters may build {built} bytes{where}, more than "
                f"{self._limits.named('max_value_bytes')}: values this large are refused"
            )


def _integer(expr: Any) -> int | None:
    if expr is None or str(expr.rex_type()) != "RexType.Literal":
        return None
    value = expr.python_value().as_py()
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _expressions(variant: Any) -> list[Any] | None:
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


__all__ = ["check_values"]
