"""What a plan node's expressions cost per row, counted in simple comparisons.

A join without an equality key evaluates its condition once per row pair, and the nodes above it
evaluate theirs once per row it produces (``join_bounds`` weighs its pairs by both). The unit is
what a comparison such as ``a.x < b.x`` costs for one pair of a nested-loop join (1.5-6 ns on
the reference VM): operators (comparisons, arithmetic, AND/OR), columns and literals cost
nothing beyond it; each call costs its tier's weight, from its time per pair of a 2,000 x 2,000
nested-loop join over strings of 8-18 bytes (one core), grouped in tiers:

- ``HEAVY`` (64): hashes and edit distance; ``md5`` 365 ns a pair, ``sha512`` 549,
  ``digest(.., 'blake3')`` 424, ``levenshtein`` 340.
- ``SEARCHING`` (16): regular expressions (``regexp_*``, ``~`` and its kin, ``SIMILAR TO``) and
  functions that search or build a string sized by a number: ``regexp_like`` 96 ns, ``replace``
  132, ``lpad`` 63.
- ``STRING`` (4): functions that copy or scan their string once (``||``, ``upper``, ``LIKE``,
  ``substr``...): ``a.s || b.s`` 19 ns.
- any other call (a cast, ``CASE``, a numeric function, a function of our own): 1; an aggregate
  or window function itself (``count``, ``sum``, ``max``...): 0.

These are costs on short strings; a long one costs more per call: an ``md5`` of two 1,000-byte
strings over 10^6 pairs, within the default bound, used 0.69 s of CPU after a 0.4 s deadline,
and strings ten times longer would cost about ten times more. An expression Python cannot take
apart (an aggregate call, a window's) is costed from its text: each name called there at its
tier's weight.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

HEAVY = 64
SEARCHING = 16
STRING = 4
OTHER_CALL = 1

_WEIGHTS: dict[str, int] = {
    **dict.fromkeys(("md5", "sha224", "sha256", "sha384", "sha512", "digest", "levenshtein"), HEAVY),
    **dict.fromkeys(("~", "~*", "!~", "!~*", "similar to", "replace", "translate", "overlay"), SEARCHING),
    **dict.fromkeys(("lpad", "rpad", "repeat", "regexp_like", "regexp_match", "regexp_replace"), SEARCHING),
    **dict.fromkeys(("regexp_count", "regexp_instr", "regexp_substr"), SEARCHING),
    **dict.fromkeys(("||", "concat", "concat_ws", "upper", "lower", "initcap", "reverse"), STRING),
    **dict.fromkeys(("substr", "substring", "left", "right", "split_part", "strpos", "to_char"), STRING),
    **dict.fromkeys(("btrim", "ltrim", "rtrim", "trim", "like", "ilike", "encode", "decode"), STRING),
    **dict.fromkeys(("to_hex", "starts_with", "ends_with", "contains", "ascii", "chr"), STRING),
}
#: Aggregate and window functions: what they do per row costs about a comparison.
_FREE_CALLS = frozenset({"count", "sum", "min", "max", "avg", "mean", "bool_and", "bool_or", "row_number"})
#: A call in an expression's text (the fallback): functions are shown in lower case, a
#: literal's type (``Int64(1)``) and SQL's own words (``CAST(``) are not.
_FUNCTION = re.compile(r"(?<![\w.])([a-z_][a-z0-9_]*)\(")
_OPERATOR = re.compile(r"\|\||!?~\*?|\b(?:NOT )?(?:I?LIKE|SIMILAR TO)\b")
#: Expression kinds that are operators: free unless costly (``||``, ``~``), not calls.
_OPERATOR_KINDS = frozenset({"BinaryExpr", "Not", "IsNull", "IsNotNull", "Negative"})


def call_weight(name: str, *, operator: bool = False) -> int:
    """What one call of ``name`` (a function, or with ``operator`` a binary operator) costs."""
    name = name.lower().removeprefix("not ")
    weight = _WEIGHTS.get(name)
    if weight is not None:
        return weight
    if name.startswith("regexp_"):
        return SEARCHING
    return 0 if operator or name in _FREE_CALLS else OTHER_CALL


def expression_cost(exprs: Iterable[Any]) -> tuple[int, frozenset[str]]:
    """What evaluating ``exprs`` (datafusion Expr) costs for one row, and the names of the
    calls that cost more than one."""
    total, costly = 0, set()
    stack = list(exprs)
    while stack:
        expr = stack.pop()
        kind = expr.variant_name()
        if kind == "Alias":
            stack.append(expr.to_variant().expr())
            continue
        try:
            call = str(expr.rex_type()) == "RexType.Call"
            operands = list(expr.rex_call_operands()) if call else []
            name = expr.rex_call_operator() if call else ""
        except Exception:  # noqa: BLE001 - datafusion-python converts only some expression kinds
            cost, names = text_cost(expr.canonical_name())
            total, costly = total + cost, costly | names
            continue
        if name:
            weight = call_weight(name, operator=kind in _OPERATOR_KINDS)
            total += weight
            if weight > OTHER_CALL:
                costly.add(name.lower())
        stack.extend(operands)
    return total, frozenset(costly)


def text_cost(text: str) -> tuple[int, frozenset[str]]:
    """The cost of the calls an expression's or plan node's text names (each name called at its
    weight): for what Python cannot take apart."""
    total, costly = 0, set()
    calls = [(name, False) for name in _FUNCTION.findall(text)]
    for name, operator in [*calls, *((name, True) for name in _OPERATOR.findall(text))]:
        weight = call_weight(name, operator=operator)
        total += weight
        if weight > OTHER_CALL:
            costly.add(name.lower())
    return total, frozenset(costly)


def node_cost(node: Any) -> tuple[int, frozenset[str]]:
    """What one plan node's own expressions cost per row it reads (a join's are not counted
    here: ``join_bounds`` counts its condition per pair)."""
    variant = node.to_variant()
    kind = type(variant).__name__
    if kind == "Projection":
        return expression_cost(variant.projections())
    if kind == "Filter":
        return expression_cost([variant.predicate()])
    if kind == "Aggregate":
        return expression_cost([*variant.group_by_exprs(), *variant.aggregate_exprs()])
    if kind == "Sort":
        return expression_cost(sort.expr() for sort in variant.sort_exprs())
    if kind in ("Join", "TableScan", "SubqueryAlias", "Limit", "Union", "Values", "EmptyRelation"):
        return 0, frozenset()
    return text_cost(node.display())


__all__ = [
    "HEAVY",
    "OTHER_CALL",
    "SEARCHING",
    "STRING",
    "call_weight",
    "expression_cost",
    "node_cost",
    "text_cost",
]
