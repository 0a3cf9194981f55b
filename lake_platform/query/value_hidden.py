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

An expression subquery's plan is exposed only as debug text, which names a function by its
implementation (``EncodeFunc``); ``subquery_may_grow`` reads that the same way, and the query's
own text when a subquery is nested in one (shown as ``<subquery>`` only).
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


#: The growing functions as DataFusion's debug text of a subquery's plan names their
#: implementations (the only text of it Python gets; a Python UDF is named by its name).
_DEBUG_NAMES = {
    "ConcatFunc": "concat",
    "ConcatWsFunc": "concat_ws",
    "MakeArray": "make_array",
    "ArrayConcat": "array_concat",
    "ArrayAppend": "array_append",
    "ArrayPrepend": "array_prepend",
    "StructFunc": "struct",
    "NamedStructFunc": "named_struct",
    "MapFunc": "map",
    "ArraysZip": "arrays_zip",
    "ArrayUnion": "array_union",
    "OverlayFunc": "overlay",
    "StringAgg": "string_agg",
    "ArrayAgg": "array_agg",
    "ArrayReplace": "array_replace",
    "ArrayReplaceN": "array_replace_n",
    "ArrayReplaceAll": "array_replace_all",
    "ArrayToString": "array_to_string",
    "ToCharFunc": "to_char",
    "EncodeFunc": "encode",
    "ReplaceFunc": "replace",
    "RegexpReplaceFunc": "regexp_replace",
    "RegexpMatchFunc": "regexp_match",
    "RepeatFunc": "repeat",
}
_DEBUG_CALL = re.compile(r"inner: (\w+) \{|PythonFunctionScalarUDF \{ name: \"(\w+)\"")
#: A text literal in debug text (escaped: its extent is exact).
_DEBUG_LITERAL = re.compile(r"Literal\((?:Utf8|Utf8View|LargeUtf8)\(\"((?:[^\"\\]|\\.)*)\"\)")


def subquery_may_grow(debug: str, literal_bytes: int) -> str:
    """What in a subquery's plan (its debug text) may build more than one copy of what it reads,
    or a literal longer than ``literal_bytes`` ("" when nothing). Its value reaches the outer
    query's rows (a scalar subquery's is copied to each), and the optimizer folds a call of
    literals in it by running it (nested ``encode`` of ``'ab'``: 2^n bytes at planning)."""
    if "op: StringConcat" in debug:
        return "||"
    for match in _DEBUG_CALL.finditer(debug):
        name = _DEBUG_NAMES.get(match.group(1) or "") or match.group(2) or ""
        if name in GROWING:
            return name
    longest = max((len(m.group(1).encode()) for m in _DEBUG_LITERAL.finditer(debug)), default=0)
    if longest > literal_bytes:
        return f"a literal of {longest} bytes"
    return ""


_SQL_CALL = re.compile(r"([a-z_][a-z0-9_]*)\"?\s*\(")
_SQL_TEXT = re.compile(r"'(?:[^']|'')*'")


def sql_may_grow(sql: str, literal_bytes: int) -> str:
    """What the query's text names that may build, for a subquery nested in a subquery: its
    debug text shows the inner one as ``<subquery>`` only, so the query's whole text is read
    (a growing function's name, ``||`` or a quoted text longer than ``literal_bytes``)."""
    lowered = sql.lower()
    if "||" in lowered:
        return "||"
    for match in _SQL_CALL.finditer(lowered):
        if match.group(1) in GROWING:
            return match.group(1)
    if any(len(m.group(0)) - 2 > literal_bytes for m in _SQL_TEXT.finditer(sql)):
        return "a literal longer than {literal_bytes} bytes".format(literal_bytes=literal_bytes)
    return ""


__all__ = ["GROWING", "SIZED", "may_grow", "sql_may_grow", "subquery_may_grow"]
