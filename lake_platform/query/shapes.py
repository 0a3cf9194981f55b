"""The shape of a key lookup's SQL: its text with the compared literals taken out.

An analyst's tool, or a service, sends ``SELECT ... FROM t WHERE id = 4242``, then the same with
``id = 4243``, and so on: one statement per key, each a new SQL text, so nothing kept for one
text (``plans``) serves the next, and each is planned by DataFusion again (about half a
millisecond of a point query's few). Two such texts that differ only in those literals have the
same *shape*; the engine answers the second from the first's plan (``QueryEngine.plan``).

A literal is taken out (a *slot*) only where it is the whole of one side of an equality with a
column, the equality a whole conjunct of its own::

    WHERE id = 4242            WHERE t.id = 4242 AND s = 'x'            WHERE (4242 = "id")

A slot is an unsigned integer (digits only) or a plain string (no quote, no backslash, no
prefix such as ``E'...'``). Every other literal stays in the shape's text, so texts that differ
there are of different shapes: ``id = -5``, ``id = 5.0``, ``id = 5 + 1``, ``CAST(5 AS ...)``,
``LIMIT 10``, ``"orders@v12"``. A text with a comment, a placeholder (``$1``, ``?``), a
backslash, an unterminated quote or anything the scanner is unsure of has no shape: it is
planned as before.

This module only reads the text; whether a shape may be answered without planning is decided
by the engine, against the lookup the first text's plan turned out to be (``lookup``). Scanning
a text costs ~0.3 µs a character in Python (2.5 ms for an 8.5 kB one), so the engine first
compares :func:`prekey`, one C-level regex pass (0.2 ms for the same text), with the kept
shapes' and scans only a text that may be one of them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import NamedTuple

_TOKEN = re.compile(
    r"""
      (?P<space>\s+)
    | (?P<string>'(?:[^']|'')*')
    | (?P<quoted>"(?:[^"]|"")*")
    | (?P<number>(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?)
    | (?P<word>[^\W\d]\w*)
    | (?P<other>.)
    """,
    re.VERBOSE | re.DOTALL,
)
#: Characters that make the scanner unsure of the text: comments, placeholders, dollar
#: quoting, backticks, escapes and quotes it could not pair.
_UNSURE = frozenset("-/$?`\\'\"")
_DIGITS = re.compile(r"\d+\Z")
#: What may stand before a conjunct (or its column, or its literal) and after it.
_BEFORE = frozenset({"where", "and", "("})
_AFTER = frozenset({"and", ")", ";", ""})
#: Stands in the shape's text for a slot's literal (a NUL: never part of a valid statement).
SLOT = "\0"
#: Every quoted string and digit run (what a slot can be, and more).
_LITERALS = re.compile(r"'(?:[^']|'')*'|\d+")


class Slot(NamedTuple):
    """One literal taken out: the column it is compared to, as DataFusion names it (an unquoted
    name in lower case), and its value."""

    column: str
    value: int | str


@dataclass(frozen=True)
class TextShape:
    text: str  # the SQL, each slot's literal replaced by ``SLOT``
    slots: tuple[Slot, ...]


class _Token(NamedTuple):
    kind: str
    text: str
    start: int
    end: int


def prekey(sql: str) -> str:
    """``sql`` with every quoted string and digit run replaced: texts of one shape have the same
    prekey (they differ only in slots, each a whole string or digit run), so a text whose
    prekey no kept shape has is of none of them."""
    return _LITERALS.sub(SLOT, sql)


def shape_of(sql: str) -> TextShape | None:
    """``sql``'s shape, or None when it has no slot or the scanner is unsure of it."""
    tokens = _tokens(sql)
    if tokens is None:
        return None
    slots: list[tuple[int, Slot]] = []  # (index of the literal's token, slot)
    for i, tok in enumerate(tokens):
        if tok.kind in ("number", "string"):
            slot = _slot(tokens, i)
            if slot is not None:
                slots.append((i, slot))
    if not slots:
        return None
    parts = []
    at = 0
    for i, _ in slots:
        parts.append(sql[at : tokens[i].start])
        parts.append(SLOT)
        at = tokens[i].end
    parts.append(sql[at:])
    return TextShape("".join(parts), tuple(slot for _, slot in slots))


def _tokens(sql: str) -> list[_Token] | None:
    """The text's tokens, spaces left out; None when any is one the scanner is unsure of."""
    if SLOT in sql:  # a shape's text must never be a text's own
        return None
    out = []
    for m in _TOKEN.finditer(sql):
        kind = m.lastgroup or "other"
        text = m.group()
        if kind == "space":
            continue
        if kind == "other" and text in _UNSURE:
            return None
        if kind in ("string", "quoted") and "\\" in text:
            return None
        out.append(_Token(kind, text, m.start(), m.end()))
    for prev, tok in zip(out, out[1:], strict=False):
        # Glued tokens (``E'x'``, ``5abc``, ``1e``): the scanner may have split them wrongly.
        glued = prev.end == tok.start and {prev.kind, tok.kind} & {"string", "number"}
        if glued and not (prev.kind == "other" or tok.kind == "other"):
            return None
    return out


def _slot(tokens: list[_Token], i: int) -> Slot | None:
    """The slot of the literal at ``tokens[i]``, if it stands where a slot may."""
    lit = tokens[i]
    if lit.kind == "number":
        if not _DIGITS.match(lit.text):
            return None
        value: int | str = int(lit.text)
    else:
        value = lit.text[1:-1]
        if "'" in value:  # an escaped quote: Lance's filter text could not say it
            return None
    if _word(tokens, i - 1) == "=":  # column = literal
        column, first = _column_before(tokens, i - 2)
        if column is None or _word(tokens, first - 1) not in _BEFORE or _word(tokens, i + 1) not in _AFTER:
            return None
        return Slot(column, value)
    if _word(tokens, i + 1) == "=":  # literal = column
        column, last = _column_after(tokens, i + 2)
        if column is None or _word(tokens, i - 1) not in _BEFORE or _word(tokens, last + 1) not in _AFTER:
            return None
        return Slot(column, value)
    return None


def _word(tokens: list[_Token], i: int) -> str:
    """The token at ``i`` in lower case; "" outside the text."""
    return tokens[i].text.lower() if 0 <= i < len(tokens) else ""


def _name(tok: _Token) -> str | None:
    if tok.kind == "word":
        return tok.text.lower()
    if tok.kind == "quoted":
        return tok.text[1:-1].replace('""', '"')
    return None


def _column_before(tokens: list[_Token], last: int) -> tuple[str | None, int]:
    """The column name ending at ``tokens[last]`` (``a``, ``t.a``, ``"s"."t"."a"``) and the index
    of its first token."""
    if last < 0 or (column := _name(tokens[last])) is None:
        return None, last
    first = last
    while first >= 2 and tokens[first - 1].text == "." and _name(tokens[first - 2]) is not None:
        first -= 2
    return column, first


def _column_after(tokens: list[_Token], first: int) -> tuple[str | None, int]:
    """The column name starting at ``tokens[first]`` and the index of its last token."""
    if first >= len(tokens) or _name(tokens[first]) is None:
        return None, first
    last = first
    while last + 2 < len(tokens) and tokens[last + 1].text == "." and _name(tokens[last + 2]) is not None:
        last += 2
    return _name(tokens[last]), last


__all__ = ["SLOT", "Slot", "TextShape", "prekey", "shape_of"]
