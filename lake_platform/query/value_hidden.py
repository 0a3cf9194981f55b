"""What the text of an expression the value check cannot walk may build.

Some expressions are not exposed to Python by the pinned datafusion-python: a window's FILTER, the
sets of ``GROUPING SETS``/``ROLLUP``/``CUBE``, the ``ON`` list and select list of ``DISTINCT
ON``. They are evaluated for a batch like any other, so nested ``encode`` there built 2^n times
each value and a long literal a copy per row, unchecked. Their text (DataFusion's display of
the expression) is read instead, conservatively: a call of a function that may grow a value
(``value_compose``'s and the sized ones), a concatenation, or a text literal that may be longer
than a row's share of the cap is refused (ValueTooLarge), with the advice to compute it in a
subquery in ``FROM`` where it is walked. Anything else in them (comparisons, ``upper``,
``date_trunc``, columns, short literals) builds at most one copy of what it reads.
"""

from __future__ import annotations

import re

from lake_platform.query.value_compose import (
    CONCATENATIONS,
    ELEMENT_REPLACEMENTS,
    ENCODES,
    FORMATS,
    GATHERS,
    JOINS,
    MATCHES,
    REPLACEMENTS,
)

#: Functions that build values sized by a number (``value_bounds``) or cast to fixed-size types.
SIZED = frozenset(
    {"lpad", "rpad", "repeat", "array_repeat", "list_repeat", "array_resize", "list_resize"}
    | {"range", "generate_series", "arrow_cast", "arrow_try_cast"}
)
#: Every function whose value may be larger than the largest of its arguments.
GROWING = (
    SIZED
    | CONCATENATIONS
    | ELEMENT_REPLACEMENTS
    | ENCODES
    | FORMATS
    | GATHERS
    | JOINS
    | MATCHES
    | REPLACEMENTS
) | {"concat_ws"}

_CALL = re.compile(r"(?<![\w.$])([a-z_][a-z0-9_]*)\(")
#: A text or binary literal as DataFusion displays one (its text is not escaped: its extent is
#: not known, so the text from it to the end counts).
_LITERAL = re.compile(r"(?<![\w])(?:Utf8|Utf8View|LargeUtf8|Binary|LargeBinary|BinaryView)\(\"")


def may_grow(text: str, literal_bytes: int) -> str:
    """What in ``text`` (an expression's display) may build more than one copy of what it reads,
    or a literal longer than ``literal_bytes`` ("" when nothing)."""
    if "||" in text:
        return "||"
    for match in _CALL.finditer(text):
        if match.group(1) in GROWING:
            return match.group(1)
    literal = _LITERAL.search(text)
    if literal is not None and len(text) - literal.end() > literal_bytes:
        return f"a literal that may be longer than {literal_bytes} bytes"
    return ""


__all__ = ["GROWING", "SIZED", "may_grow"]
