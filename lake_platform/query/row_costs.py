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

A call over long strings costs more: given the average bytes of the columns an expression reads
(``column_sizes``, from Lance's statistics; literals' from the plan), a call costs its weight or
the bytes it reads at its tier's rate, whichever is more: a hash 2/3 of a comparison a byte
(``md5`` 1.6 ns a byte), a regular expression or ``replace`` 1 (``regexp_count`` 10 ns a byte,
``replace`` 0.6), a string copy 1/16 (``upper`` 0.2), ``levenshtein`` 1/2 per pair of bytes of
its two strings (1.1 ns each); measured per pair at 20-20,000 bytes, one core, where ``md5`` of
20 bytes took 184 ns (so a comparison's worth is 2.9 ns). ``md5(a.s || b.s)`` over 10,000-byte
strings costs 14,585 a pair, over 9-byte strings 69. What a call produces is as long as what it
reads (a hash: 64 bytes, a number or truth value: 8; ``repeat``, ``lpad`` and ``rpad`` by a
literal count as long as it makes them). A column whose size is not known (a table function's,
a table without statistics) counts as a short string, as every string did before sizes.

A regular expression whose pattern is not a literal (a column, or built per row) is compiled
for every row it sees, ``COMPILED_PATTERN`` more: ``regexp_like('12', a.s || b.s)`` took 14.7 us
a pair, ``regexp_like(a.s, c.p)`` 15.4 us with ``c`` the side that varies within a batch (48 ns
the other way round: which side that is, the planner decides).

An expression Python cannot take apart (an aggregate call, a window's) is costed from its text:
each name called there at its tier's weight, scaled by the columns its text names.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, NamedTuple

HEAVY = 64
SEARCHING = 16
STRING = 4
OTHER_CALL = 1
#: A regular expression compiled per row: 15-18 us a pair measured, at 2.9 ns a comparison.
COMPILED_PATTERN = 8192
_REGEX_OPERATORS = frozenset({"~", "~*", "!~", "!~*", "similar to"})

#: The average bytes of a column, by the relation that qualifies it in the plan (None: none)
#: and its name; 0 when not known.
ColumnBytes = Callable[["str | None", str], float]

_HASHES = ("md5", "sha224", "sha256", "sha384", "sha512", "digest")
_WEIGHTS: dict[str, int] = {
    **dict.fromkeys((*_HASHES, "levenshtein"), HEAVY),
    **dict.fromkeys(("~", "~*", "!~", "!~*", "similar to", "replace", "translate", "overlay"), SEARCHING),
    **dict.fromkeys(("lpad", "rpad", "repeat", "regexp_like", "regexp_match", "regexp_replace"), SEARCHING),
    **dict.fromkeys(("regexp_count", "regexp_instr", "regexp_substr"), SEARCHING),
    **dict.fromkeys(("||", "concat", "concat_ws", "upper", "lower", "initcap", "reverse"), STRING),
    **dict.fromkeys(("substr", "substring", "left", "right", "split_part", "strpos", "to_char"), STRING),
    **dict.fromkeys(("btrim", "ltrim", "rtrim", "trim", "like", "ilike", "encode", "decode"), STRING),
    **dict.fromkeys(("to_hex", "starts_with", "ends_with", "contains", "ascii", "chr"), STRING),
}
#: What each byte a call reads costs, by its tier (measured: the module's docstring).
_PER_BYTE = {HEAVY: 2 / 3, SEARCHING: 1.0, STRING: 1 / 16}
#: ``levenshtein`` compares every byte of one string with every byte of the other.
_PER_BYTE_PAIR = 0.5
#: What a string of unknown size counts as in ``levenshtein``'s product.
SHORT_BYTES = 8
#: What a number or truth value, and a hash, produce.
_SCALAR_BYTES = 8.0
_HASH_BYTES = 64.0
#: Calls whose result is a number or a truth value, not a string as long as what they read.
_SCALAR_RESULTS = frozenset(
    {"levenshtein", "strpos", "ascii", "starts_with", "ends_with", "contains", "regexp_like"}
    | {"regexp_count", "regexp_instr", "length", "char_length", "octet_length", "bit_length"}
    | {"like", "ilike", "not like", "not ilike", "similar to", "not similar to", "~", "~*", "!~", "!~*"}
)
#: Calls whose result's size a literal count gives (``repeat(s, 3)``, ``lpad(s, 100)``).
_SIZED_BY_COUNT = frozenset({"repeat", "lpad", "rpad"})
#: Aggregate and window functions: what they do per row costs about a comparison.
_FREE_CALLS = frozenset({"count", "sum", "min", "max", "avg", "mean", "bool_and", "bool_or", "row_number"})
#: A call in an expression's text (the fallback): functions are shown in lower case, a
#: literal's type (``Int64(1)``) and SQL's own words (``CAST(``) are not.
_FUNCTION = re.compile(r"(?<![\w.])([a-z_][a-z0-9_]*)\(")
_OPERATOR = re.compile(r"\|\||!?~\*?|\b(?:NOT )?(?:I?LIKE|SIMILAR TO)\b")
#: A qualified column in an expression's text (``a.s``, ``w.ns.t.s``).
_QUALIFIED = re.compile(r"(?<![\w.\"])((?:[A-Za-z_]\w*\.)+)([A-Za-z_]\w*)\b(?!\()")
#: Expression kinds that are operators: free unless costly (``||``, ``~``), not calls.
_OPERATOR_KINDS = frozenset({"BinaryExpr", "Not", "IsNull", "IsNotNull", "Negative"})


@dataclass(frozen=True)
class Cost:
    """What evaluating some expressions costs for one row, in simple comparisons; the names of
    the calls that cost more than one; the most bytes one of those reads (0: short strings)."""

    units: int = 0
    costly: frozenset[str] = frozenset()
    widest: int = 0

    def __add__(self, other: Cost) -> Cost:
        return Cost(self.units + other.units, self.costly | other.costly, max(self.widest, other.widest))


NOTHING = Cost()


def call_weight(name: str, *, operator: bool = False) -> int:
    """What one call of ``name`` (a function, or with ``operator`` a binary operator) costs."""
    name = name.lower().removeprefix("not ")
    weight = _WEIGHTS.get(name)
    if weight is not None:
        return weight
    if name.startswith("regexp_"):
        return SEARCHING
    return 0 if operator or name in _FREE_CALLS else OTHER_CALL


def call_cost(name: str, read: list[float], *, operator: bool = False) -> int:
    """What one call of ``name`` costs reading strings of ``read`` bytes (one per operand)."""
    weight = call_weight(name, operator=operator)
    if weight <= OTHER_CALL or not read:
        return weight
    if name.lower() == "levenshtein":
        pair = math.prod(max(size, SHORT_BYTES) for size in read[:2])
        return max(weight, math.ceil(pair * _PER_BYTE_PAIR))
    return max(weight, math.ceil(sum(read) * _PER_BYTE[weight]))


def expression_cost(exprs: Iterable[Any], column_bytes: ColumnBytes | None = None) -> Cost:
    """What evaluating ``exprs`` (datafusion Expr) costs for one row; ``column_bytes``: the
    sizes of the columns they read (None: every string short)."""
    weigher = _Weigher(column_bytes)
    total = NOTHING
    for expr in exprs:
        total += weigher.weigh(expr)[0]
    return total


def expression_bytes(expr: Any, column_bytes: ColumnBytes) -> float:
    """How many bytes ``expr``'s value has on average (0: a short or unknown string)."""
    return _Weigher(column_bytes).weigh(expr)[1]


def text_cost(text: str, column_bytes: ColumnBytes | None = None) -> Cost:
    """The cost of the calls an expression's or plan node's text names (each name called at its
    weight, reading the columns the text names): for what Python cannot take apart."""
    read = text_bytes(text, column_bytes) if column_bytes is not None else 0.0
    total = NOTHING
    calls = [(name, False) for name in _FUNCTION.findall(text)]
    for name, operator in [*calls, *((name, True) for name in _OPERATOR.findall(text))]:
        total += _called(name, [read] if read else [], operator=operator)
    return total


def text_bytes(text: str, column_bytes: ColumnBytes) -> float:
    """The bytes of the qualified columns ``text`` names, added up."""
    found = {(qualifier[:-1], name) for qualifier, name in _QUALIFIED.findall(text)}
    return sum(column_bytes(relation, name) for relation, name in found)


def node_cost(node: Any, column_bytes: ColumnBytes | None = None) -> Cost:
    """What one plan node's own expressions cost per row it reads (a join's are not counted
    here: ``join_bounds`` counts its condition per pair)."""
    variant = node.to_variant()
    kind = type(variant).__name__
    if kind == "Projection":
        return expression_cost(variant.projections(), column_bytes)
    if kind == "Filter":
        return expression_cost([variant.predicate()], column_bytes)
    if kind == "Aggregate":
        return expression_cost([*variant.group_by_exprs(), *variant.aggregate_exprs()], column_bytes)
    if kind == "Sort":
        return expression_cost((sort.expr() for sort in variant.sort_exprs()), column_bytes)
    if kind in ("Join", "TableScan", "SubqueryAlias", "Limit", "Union", "Values", "EmptyRelation"):
        return NOTHING
    return text_cost(node.display(), column_bytes)


def _called(name: str, read: list[float], *, operator: bool) -> Cost:
    units = call_cost(name, read, operator=operator)
    if units <= OTHER_CALL:
        return Cost(units)
    widest = int(sum(read)) if call_weight(name, operator=operator) < units else 0
    return Cost(units, frozenset({name.lower()}), widest)


class _Call(NamedTuple):
    """A call to weigh once its operands are: its name, whether it is an operator."""

    name: str
    operator: bool
    operands: list[Any]


class _Weigher:
    """Costs one expression tree bottom-up, each call reading what its operands produce (an
    explicit stack: a chain of thousands of ORs is deeper than Python's recursion)."""

    def __init__(self, column_bytes: ColumnBytes | None) -> None:
        self._column_bytes = column_bytes

    def weigh(self, root: Any) -> tuple[Cost, float]:
        """What ``root`` costs for one row, and how many bytes its value has."""
        done: list[tuple[Cost, float]] = []
        # (expression, None) to take apart; (expression, its call) once its operands are done
        stack: list[tuple[Any, _Call | None]] = [(root, None)]
        while stack:
            expr, call = stack.pop()
            if call is not None:
                name, operator, operands = call
                weighed = done[len(done) - len(operands) :] if operands else []
                del done[len(done) - len(operands) :]
                total = sum((cost for cost, _ in weighed), NOTHING)
                read = [size for _, size in weighed]
                if not name:
                    done.append((total, max(read, default=0.0)))
                else:
                    cost = total + _called(name, read, operator=operator) + _pattern_cost(name, operands)
                    done.append((cost, _result_bytes(name, operator, operands, read)))
                continue
            leaf = self._leaf(expr)
            if isinstance(leaf, _Call):
                stack.append((expr, leaf))
                stack.extend((operand, None) for operand in reversed(leaf.operands))
            else:
                done.append(leaf)
        return done[0]

    def _leaf(self, expr: Any) -> tuple[Cost, float] | _Call:
        """A column's, literal's or opaque expression's cost and bytes; else the call's name,
        whether it is an operator, and its operands."""
        kind = expr.variant_name()
        while kind == "Alias":
            expr = expr.to_variant().expr()
            kind = expr.variant_name()
        if kind == "Column":
            if self._column_bytes is None:
                return NOTHING, 0.0
            column = expr.to_variant()
            return NOTHING, self._column_bytes(column.relation(), column.name())
        if kind == "Literal":
            return NOTHING, _literal_bytes(expr)
        try:
            call = str(expr.rex_type()) == "RexType.Call"
            operands = list(expr.rex_call_operands()) if call else []
            name = expr.rex_call_operator() if call else ""
        except Exception:  # noqa: BLE001 - datafusion-python converts only some expression kinds
            text = expr.canonical_name()
            read = text_bytes(text, self._column_bytes) if self._column_bytes is not None else 0.0
            return text_cost(text, self._column_bytes), read
        return _Call(name, kind in _OPERATOR_KINDS, operands)


def _pattern_cost(name: str, operands: list[Any]) -> Cost:
    """A regular expression whose pattern is not a literal is compiled for every row it sees
    (what DataFusion keeps compiled is a literal's): ``regexp_like('row-1', b.p || a.s)`` over
    400 x 400 pairs took 14.7 us a pair, ``regexp_replace`` with such a pattern 18.1."""
    name = name.lower().removeprefix("not ")
    regex = name.startswith("regexp_") or name in _REGEX_OPERATORS
    if not regex or len(operands) < 2 or operands[1].variant_name() == "Literal":
        return NOTHING
    return Cost(COMPILED_PATTERN, frozenset({f"{name} compiling its pattern per row"}))


def _result_bytes(name: str, operator: bool, operands: list[Any], read: list[float]) -> float:
    name = name.lower()
    if name in _HASHES:
        return _HASH_BYTES
    if name in _SCALAR_RESULTS or (operator and name != "||"):
        return _SCALAR_BYTES
    if name in _SIZED_BY_COUNT and len(operands) > 1 and operands[1].variant_name() == "Literal":
        count = operands[1].python_value().as_py()
        if isinstance(count, int):
            return float(count) * (read[0] if name == "repeat" else 1.0)
    return sum(read)


def _literal_bytes(expr: Any) -> float:
    value = expr.python_value().as_py()
    return float(len(value)) if isinstance(value, str | bytes) else _SCALAR_BYTES


__all__ = [
    "HEAVY",
    "NOTHING",
    "OTHER_CALL",
    "SEARCHING",
    "SHORT_BYTES",
    "STRING",
    "ColumnBytes",
    "Cost",
    "call_cost",
    "call_weight",
    "expression_bytes",
    "expression_cost",
    "node_cost",
    "text_bytes",
    "text_cost",
]
