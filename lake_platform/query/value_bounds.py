"""Functions that build values sized by a number, checked at planning: what one call may build
stays within ``max_value_bytes``.

Like ``repeat`` (``capped``), ``lpad``, ``rpad``, ``array_repeat`` (``list_repeat``),
``array_resize`` (``list_resize``) and the list-building scalar ``range`` and
``generate_series`` size their result by a number rather than
by their inputs' bytes, and DataFusion builds it outside the memory pool: ``SELECT lpad('x',
2000000000)`` would allocate gigabytes, ``range(50000000)`` hundreds of megabytes. A Python
replacement cannot take their place (DataFusion keeps one function per name and a Python
function has one signature, so the other forms would be lost), and the optimizer folds a call of
literals while planning, before any function of ours could run. So the unoptimized plan is
checked, before anything optimizes it:

- ``lpad``/``rpad``: the length must be an integer literal; 4 bytes a character (UTF-8's most).
- ``array_repeat``: the count must be an integer literal and the element a literal (a computed
  element's size is not known before the query runs); the element's Arrow size a time.
- ``array_resize``: the size must be an integer literal and the fill value (if any) a literal;
  the value's Arrow size an element, at least :data:`BYTES_PER_RESIZED` (the list's own type is
  not known here: a fixed-width element is at most that wide in practice).
- ``range``/``generate_series`` as scalars: every bound and step must be an integer literal; 8
  bytes an element (the table functions of the same names in ``FROM`` are not these).
- ``arrow_cast``/``arrow_try_cast`` to a type with a fixed-size part (``FixedSizeList``,
  ``FixedSizeBinary``): the type's width (``value_types``), which a NULL holds too; a cast to
  any other type builds what its argument does.

What a call may build must fit the cap for one value when every argument is a literal and the
call is evaluated once (a query without ``FROM``), else for a batch of ``ROWS_PER_BATCH`` values
(a literal is made one value per row when it is a column of a batch). Under the default cap
(64 MiB) that is 16,777,216 characters of ``lpad`` or 8,388,608 ``range`` elements in a query
without ``FROM``, and 512 characters for a column (``lpad(name, 20, '0')`` is fine;
``lpad(name, width)`` is refused).

A call over one of them (``replace``, ``concat``/``||``, ``repeat``, ...) is bounded from its
arguments' bounds and checked the same way (``value_compose``): each call fitting on its own
let ``replace(lpad(tag, 512, 'x'), 'x', lpad('y', 512, 'y'))`` build 4 MiB a row.
The columns one projection or aggregate builds for a batch are checked together the same way.
A text or binary literal is a built value of its length too (``value_plan.literal_part``): one
copied to every row (``SELECT '<10 KB>' FROM t``, ``concat(s, '<10 KB>')``) built 327 MB a batch
and no sized call was named, so every query is walked, each expression whose text may build
something (``value_plan.may_build``). Growth driven by column data (nested ``encode``, ``v || v``
chains, ``replace`` of the empty pattern over a column) is bounded by a factor of what it reads:
at most ``value_copies.MAX_COPIES`` copies of any column a value.

A call the walk below cannot reach is refused rather than let through: in a node whose
expressions the pinned datafusion-python does not expose (its line names the function), in a
window's FILTER, the sets of GROUPING SETS/ROLLUP/CUBE and DISTINCT ON's lists (their text, when it
names a growing function or a long literal: ``value_hidden.may_grow``), or in an expression
subquery (whose plan Python sees only as debug text: ``value_hidden.subquery_may_grow``).
"""

from __future__ import annotations

import re
from typing import Any

from lake_platform.query.errors import ValueTooLarge
from lake_platform.query.limits import QueryLimits
from lake_platform.query.value_compose import Part, Unbounded, compose
from lake_platform.query.value_copies import MAX_COPIES, REPEATED, copies_of, largest, together
from lake_platform.query.value_hidden import may_grow, sql_may_grow, subquery_may_grow
from lake_platform.query.value_plan import (
    called,
    evaluated_once,
    expressions,
    integer,
    literal_bytes,
    literal_part,
    may_build,
    merged,
    output_name,
)
from lake_platform.query.value_types import fixed_width

#: The functions checked here, and which argument is the length of what they build.
LENGTH_ARGUMENT = {"lpad": 1, "rpad": 1}
#: The list builders checked here (``list_repeat`` is planned as ``array_repeat``).
LIST_BUILDERS = ("array_repeat", "array_resize", "range", "generate_series")
#: The casts to a type named by a string, whose fixed-size types are checked here.
CASTS = ("arrow_cast", "arrow_try_cast")
#: The most bytes a character takes in UTF-8.
BYTES_PER_CHARACTER = 4
#: The bytes of one ``range``/``generate_series`` element (Int64).
BYTES_PER_INTEGER = 8
#: The bytes taken for one element ``array_resize`` adds (without a wider fill value).
BYTES_PER_RESIZED = 16
#: The most rows a batch is assumed to have: Lance scans in batches of up to 32768 rows
#: (the endpoint's scan batch setting's default), more than DataFusion's own batch size.
ROWS_PER_BATCH = 32768

_FUNCTIONS = (
    r"(?:lpad|rpad|array_repeat|list_repeat|array_resize|list_resize|range|generate_series"
    r"|arrow_cast|arrow_try_cast)"
)
# ``repeat`` too: ``capped.repeat`` checks its own value, this one what a call over it builds.
_NAMED = re.compile(rf"(?<![\w$])(?:{_FUNCTIONS}|repeat)(?![\w$])", re.IGNORECASE)
# A call, not the table function ``range()``/``generate_series()`` a scan's columns are named after.
_CALLED = re.compile(rf"(?<![\w$]){_FUNCTIONS}\((?!\))", re.IGNORECASE)
#: How DataFusion's debug text of a plan names the functions (``Range``: both list builders).
_IN_SUBQUERY = re.compile(
    r"\binner: (?:[LR]PadFunc|ArrayRepeat|ArrayResize|Range|ArrowCastFunc|ArrowTryCastFunc) \{"
)
_CHECKED = "lpad, rpad, array_repeat, array_resize, range, generate_series or arrow_cast"


def check_values(sql: str, df: Any, limits: QueryLimits) -> None:
    """Raise ValueTooLarge when a call of ``df``'s (unoptimized) plan to one of the functions
    above, or an expression over them or over literals, could build more than
    ``limits.max_value_bytes``, or its size is not given by literals. Every query is walked: a
    literal is copied to every row without any of them named (``SELECT '<10 KB>' FROM t``)."""
    _Walk(limits, sql).plan(df.logical_plan())


class _Walk:
    def __init__(self, limits: QueryLimits, sql: str) -> None:
        self._limits = limits
        self._sql = sql
        self._named = bool(
            _NAMED.search(sql)
        )  # whether the text names a sized call (to look for hidden ones)
        self._once = False  # whether the node being walked evaluates its expressions for one row
        self._columns: dict[str, Part] = {}  # what the node's input columns may hold, by name

    def plan(self, root: Any) -> None:
        # Inputs before the nodes over them: a column carries the bound of the call that made it
        # (``WITH q AS (SELECT lpad(s, 512) a ...) SELECT replace(a, ...)``), by its name.
        nodes: list[tuple[Any, list[int]]] = []
        stack: list[tuple[Any, int]] = [(root, -1)]
        while stack:
            node, parent = stack.pop()
            if parent >= 0:
                nodes[parent][1].append(len(nodes))
            nodes.append((node, []))
            stack.extend((child, len(nodes) - 1) for child in node.inputs())
        made: list[dict[str, Part]] = [{}] * len(nodes)
        for index in reversed(range(len(nodes))):
            node, children = nodes[index]
            self._columns = merged([made[child] for child in children])
            made[index] = self._node(node) or self._columns

    def _node(self, node: Any) -> dict[str, Part] | None:
        """Check one node's expressions; the bounds of the columns it makes (None: its inputs')."""
        variant = node.to_variant()
        if type(variant).__name__ == "WindowExpr":
            return self._window(variant)
        if type(variant).__name__ == "Distinct":  # DISTINCT ON's lists are not exposed
            self._hidden("DISTINCT ON", node.display())
        exprs = expressions(variant)
        for expr in exprs or []:
            if expr.variant_name() == "GroupingSet":  # its sets are not exposed
                self._hidden("GROUPING SETS, ROLLUP or CUBE", expr.canonical_name())
        if exprs is None:
            if self._named and _CALLED.search(node.display()):
                raise self._unchecked(f"a plan node ({node.display().split(':', 1)[0]})")
            return None
        self._once = evaluated_once(node, variant)
        parts = [self.expr(expr) for expr in exprs]
        kind = type(variant).__name__
        if kind not in ("Projection", "Aggregate"):
            return None
        self._columns_together(kind, parts)
        self._check_copies(f"the columns of one {kind} together", together(parts))
        return {output_name(expr): part for expr, part in zip(exprs, parts, strict=True)}

    def _window(self, variant: Any) -> dict[str, Part]:
        """A window node: its functions' arguments, PARTITION BY and ORDER BY are evaluated for a
        batch like a projection's, and each function's value is a column over it (``first_value(
        '<3 KB>')`` was 98 MB a batch, nested ``encode`` in PARTITION BY 2^n times each value). A
        window's FILTER is not exposed to Python: what its text may build is refused
        (``value_hidden``)."""
        self._once = False
        made, parts = dict(self._columns), []
        for window in variant.get_window_expr():
            text = window.schema_name()
            if " FILTER (WHERE " in text:
                self._hidden("a window's FILTER", text[text.index(" FILTER (WHERE ") :])
            sorts = [sort.expr() for sort in variant.get_sort_exprs(window)]
            for expr in [*variant.get_partition_exprs(window), *sorts]:
                self.expr(expr)
            function = str(variant.window_func_name(window)).lower()
            operands = [self.expr(arg) for arg in variant.get_args(window)]
            part = self._composed(function, operands, False, function)
            parts.append(part)
            made[output_name(window)] = part
        self._columns_together("WindowExpr", parts)
        self._check_copies("the columns of one WindowExpr together", together(parts))
        return made

    def _hidden(self, where: str, text: str) -> None:
        """Refuse an expression Python does not expose when its text may build a value."""
        found = may_grow(text, self._limits.max_value_bytes // ROWS_PER_BATCH)
        if found:
            raise ValueTooLarge(
                f"{found} in {where} cannot be checked against {self._limits.named('max_value_bytes')} "
                "(its expressions are not exposed to the check); compute it in a subquery in FROM"
            )

    def _columns_together(self, kind: str, parts: list[Part]) -> None:
        """A node's columns are built for the same batch: each within the cap, many of them
        (``SELECT lpad(s, 500) a1, ..., lpad(s, 500) a100``) were a hundred times it."""
        built = [(p.built, p.literal and self._once) for p in parts if p.built is not None]
        if not built:
            return
        total = sum(size * (1 if once else ROWS_PER_BATCH) for size, once in built)
        if total > self._limits.max_value_bytes:
            where = "" if all(once for _, once in built) else f" for a batch of {ROWS_PER_BATCH} rows"
            raise ValueTooLarge(
                f"the columns of one {kind} may build {total} bytes{where} together, more than "
                f"{self._limits.named('max_value_bytes')}: values this large are refused"
            )

    def expr(self, root: Any) -> Part:
        bare = root.to_variant().expr() if root.variant_name() == "Alias" else root
        if not self._named and bare.variant_name() not in ("Column", "Literal") and not may_build(bare):
            return Part()
        # Listed calls first: an operand comes after the call over it, so walking the list
        # backwards bounds every operand before the call that composes it (``value_compose``).
        nodes: list[tuple[Any, str, list[int]]] = []
        stack: list[tuple[Any, int]] = [(root, -1)]
        while stack:
            expr, parent = stack.pop()
            kind = expr.variant_name()
            if parent >= 0:
                nodes[parent][2].append(len(nodes))
            nodes.append((expr, kind, []))
            stack.extend((operand, len(nodes) - 1) for operand in reversed(self._children(expr, kind)))
        parts: list[Part] = [Part()] * len(nodes)
        for index in reversed(range(len(nodes))):
            expr, kind, children = nodes[index]
            parts[index] = self._part(expr, kind, [parts[child] for child in children])
        return parts[0]

    def _children(self, expr: Any, kind: str) -> list[Any]:
        if kind in ("Column", "Literal"):
            return []  # a column named after a call refers to a call checked where it is made
        if kind == "Alias":
            return [expr.to_variant().expr()]
        if kind in ("ScalarSubquery", "InSubquery", "Exists"):
            variant = expr.to_variant()
            # A subquery's plan is not exposed to Python, only its debug text: one that
            # calls either function is refused, not checked.
            debug = repr(variant.subquery())
            if self._named and _IN_SUBQUERY.search(debug):
                raise self._unchecked("a subquery")
            allowance = self._limits.max_value_bytes // ROWS_PER_BATCH
            found = subquery_may_grow(debug, allowance)
            if not found and "<subquery>" in debug:  # one nested in it: shown by name only
                found = sql_may_grow(self._sql, allowance)
                if _NAMED.search(self._sql):
                    raise self._unchecked("a subquery nested in a subquery")
            if found:
                raise ValueTooLarge(
                    f"{found} in a subquery cannot be checked against "
                    f"{self._limits.named('max_value_bytes')} (its plan is not exposed to the check); "
                    "compute it in the outer query or join the subquery in FROM"
                )
            return [variant.expr()] if kind == "InSubquery" else []
        return self._operands(expr, kind)

    def _part(self, expr: Any, kind: str, operands: list[Part]) -> Part:
        """What ``expr`` may build, from what its operands may (``operands``: theirs, in order)."""
        if kind == "Literal":
            return literal_part(expr)
        if kind == "Alias":
            return operands[0]
        if kind == "Column":
            name = expr.to_variant().name()
            made = self._columns.get(name)
            if made is None:  # read from a table: one copy of itself
                return Part(copies={name: 1.0})
            copies = made.copies  # a column a node made carries what it holds
            return Part(built=made.built, text=made.text, source=made.source, copies=copies)
        if kind in ("ScalarSubquery", "InSubquery", "Exists"):
            return Part()
        constant = bool(operands) and all(o.literal for o in operands)
        function = called(expr, kind)
        if function in LENGTH_ARGUMENT or function in LIST_BUILDERS:
            built, count = self._call(function, list(expr.rex_call_operands()))
            elements = count if function in LIST_BUILDERS else None
            return Part(built=built, source=function, literal=constant, elements=elements)
        if function in CASTS:
            width = self._cast(function, list(expr.rex_call_operands()))
            if width is not None:
                built = max(width, operands[0].built or 0)
                return Part(built=built, source=function, literal=constant, copies=operands[0].copies)
        return self._composed(function, operands, constant, function or kind)

    def _composed(self, function: str, operands: list[Part], constant: bool, what: str) -> Part:
        """What a call of ``function`` over ``operands`` may build, refused past the cap."""
        try:
            composed = compose(function, operands)
            copies = copies_of(function, operands)
        except Unbounded as unbounded:
            raise self._unsized(str(unbounded)) from None
        self._check_copies(what, copies)
        if composed is None:
            return Part(literal=constant, copies=copies)
        value, sources = composed
        self._check_built(f"{function} of {sources or 'a literal'}", value, once=constant and self._once)
        return Part(built=value, source=sources, literal=constant, copies=copies)

    def _check_copies(self, what: str, copies: dict[str, float]) -> None:
        """Growth driven by column data, bounded by a factor of it (``value_copies``)."""
        column, factor = largest(copies)
        if factor > MAX_COPIES:
            count = int(factor) if factor.is_integer() else round(factor, 2)
            raise ValueTooLarge(
                f"{what} may build {count} copies of {_named(column)} a value, more than {MAX_COPIES} "
                "copies of what it reads: values this large are refused (checked with "
                f"{self._limits.named('max_value_bytes')} before the query runs)"
            )

    def _operands(self, expr: Any, kind: str) -> list[Any]:
        """The operands of a call. Every call the expression's text names must be the expression
        itself or in an operand: an operand Python does not see (an aggregate's FILTER, a
        ROLLUP's sets) is refused."""
        named = len(_CALLED.findall(expr.canonical_name())) if self._named else 0
        try:
            operands = list(expr.rex_call_operands()) if str(expr.rex_type()) == "RexType.Call" else []
            function = expr.rex_call_operator().lower() if kind == "ScalarFunction" else ""
        except Exception:  # noqa: BLE001 - datafusion-python converts only some expression kinds
            operands, function = [], ""
        if function in LENGTH_ARGUMENT or function in LIST_BUILDERS or function in CASTS:
            named -= 1
        if named > 0 and named > sum(len(_CALLED.findall(o.canonical_name())) for o in operands):
            raise self._unchecked(f"an expression ({kind})")
        return operands

    def _unchecked(self, where: str) -> ValueTooLarge:
        return ValueTooLarge(
            f"{_CHECKED} in {where} cannot be checked against "
            f"{self._limits.named('max_value_bytes')}; compute it in the outer query's projection"
        )

    def _call(self, name: str, operands: list[Any]) -> tuple[int, int]:
        """The most bytes one value of this call may take and the most characters or elements
        it has, refused past the cap."""
        literal = all(str(o.rex_type()) == "RexType.Literal" for o in operands)
        if name in LENGTH_ARGUMENT:
            count, each, what = self._padded(name, operands), BYTES_PER_CHARACTER, "characters"
        elif name == "array_repeat":
            count, each, what = self._repeated(operands), literal_bytes(operands[0]), "elements"
        elif name == "array_resize":
            count, each, what = self._resized(operands), BYTES_PER_RESIZED, "elements"
            if len(operands) > 2:
                each = max(each, literal_bytes(operands[2]))
        else:
            count, each, what = self._series(name, operands), BYTES_PER_INTEGER, "elements"
        self._check_built(f"{name} to {count} {what}", count * each, once=literal and self._once)
        return count * each, count

    def _cast(self, name: str, operands: list[Any]) -> int | None:
        """The width of one value of the type a cast names, refused past the cap (None: the
        type has no fixed-size part)."""
        named = operands[1].python_value().as_py() if len(operands) > 1 else None
        width = fixed_width(named) if isinstance(named, str) else None
        if width is None:
            return None
        once = str(operands[0].rex_type()) == "RexType.Literal" and self._once
        note = f" ({width} bytes a value, NULL or not)"
        self._check_built(f"{name} to {named}", width, once=once, note=note)
        return width

    def _check_built(self, what: str, value: int, *, once: bool, note: str = "") -> None:
        """Refuse ``what`` when one value of ``value`` bytes (``once``: the call is evaluated
        once), else a batch of them, may build more than the cap."""
        built = value * (1 if once else ROWS_PER_BATCH)
        if built > self._limits.max_value_bytes:
            where = "" if once else f" for a batch of {ROWS_PER_BATCH} values"
            raise ValueTooLarge(
                f"{what} may build {built} bytes{where}{note}, more than "
                f"{self._limits.named('max_value_bytes')}: values this large are refused"
            )

    def _padded(self, name: str, operands: list[Any]) -> int:
        value = integer(operands[1]) if len(operands) > 1 else None
        if value is None:
            raise self._unsized(f"{name}'s length must be an integer literal")
        return max(value, 0)

    def _repeated(self, operands: list[Any]) -> int:
        count = integer(operands[1]) if len(operands) > 1 else None
        if count is None:
            raise self._unsized("array_repeat's count must be an integer literal")
        if str(operands[0].rex_type()) != "RexType.Literal":
            raise self._unsized("array_repeat's element must be a literal")
        return max(count, 0)

    def _resized(self, operands: list[Any]) -> int:
        size = integer(operands[1]) if len(operands) > 1 else None
        if size is None:
            raise self._unsized("array_resize's size must be an integer literal")
        if len(operands) > 2 and str(operands[2].rex_type()) != "RexType.Literal":
            raise self._unsized("array_resize's value must be a literal")
        return max(size, 0)

    def _series(self, name: str, operands: list[Any]) -> int:
        bounds = [integer(o) for o in operands]
        if not 1 <= len(bounds) <= 3 or any(b is None for b in bounds):
            raise self._unsized(f"{name}'s bounds and step must be integer literals")
        if len(bounds) == 1:
            bounds = [0, *bounds]  # range(stop) starts at 0
        start, stop, step = (*bounds, 1) if len(bounds) == 2 else bounds
        if step == 0:
            return 0  # DataFusion refuses it
        if name == "generate_series":  # its stop is included
            stop += 1 if step > 0 else -1
        return max(0, -((start - stop) // step))  # ceil((stop - start) / step), any size

    def _unsized(self, what: str) -> ValueTooLarge:
        return ValueTooLarge(
            f"{what} (what it builds is checked against {self._limits.named('max_value_bytes')} "
            "before the query runs)"
        )


def _named(column: str) -> str:
    return column if column == REPEATED else f"column {column}"


__all__ = ["check_values"]
