"""Lexical checks on SQL text before DataFusion sees it: size, statement kind, placeholders.

DataFusion's own SQLOptions (no DDL, DML or statements) are the main guard; this is the cheap
first line: it rejects what is not a query by its first keyword and rewrites JDBC/ODBC-style
``?`` placeholders into DataFusion's ``$1, $2, ...``.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from lake_platform.errors import InvalidInput

#: Statements a reader may run: queries (with CTEs), VALUES, and EXPLAIN of a query.
ALLOWED_FIRST_WORDS = frozenset({"select", "with", "values", "explain"})
_WORD = re.compile(r"[A-Za-z_]+")
_DOLLAR = re.compile(r"\$([0-9]+)")
#: The most parameters a query takes (PostgreSQL's bound): ``$n`` is the client's number, and a
#: prepared statement's parameter schema has that many fields.
MAX_PARAMETERS = 65535
#: A dollar-quoted string's opening delimiter (``$$`` or ``$tag$``; ``$1`` is a placeholder).
_DOLLAR_QUOTE = re.compile(r"\$(?:[A-Za-z_][A-Za-z0-9_]*)?\$")
#: Where a string, a quoted name or a comment may begin (what the rewrites copy untouched) ...
_OPAQUE_AT = rf"['\"`]|--|/\*|{_DOLLAR_QUOTE.pattern}"
#: ... or a placeholder, or a name.
_PLACEHOLDER_AT = re.compile(rf"[?$]|{_OPAQUE_AT}")
_NAME_AT = re.compile(rf"[A-Za-z_]|{_OPAQUE_AT}")


def check_query(sql: object, max_bytes: int) -> str:
    """Return the SQL if it can only be a read-only query; raise InvalidInput otherwise."""
    if not isinstance(sql, str):
        raise InvalidInput("the query must be text")
    if len(sql.encode("utf-8", "surrogatepass")) > max_bytes:
        raise InvalidInput(f"the query is longer than {max_bytes} bytes")
    if "\x00" in sql:
        raise InvalidInput("the query contains a NUL character")
    check_depth(sql)
    head = _skip_space_and_comments(sql, 0)
    if head >= len(sql):
        raise InvalidInput("the query is empty")
    if sql[head] == "(":
        return sql
    word = _WORD.match(sql, head)
    first = word.group(0).lower() if word else sql[head : head + 10]
    if first not in ALLOWED_FIRST_WORDS:
        raise InvalidInput(
            f"only read-only queries (SELECT, WITH, VALUES, EXPLAIN) are allowed, not {first.upper()!r}"
        )
    return sql


#: The most operators one expression or one chain of set operations may nest. DataFusion walks
#: expressions and plans recursively, and a chain of a few thousand (``1+1+...``, ``x = 1 OR x = 2
#: OR ...``, ``SELECT 1 UNION ALL SELECT 1 ...``) overflowed a thread's stack: the process died
#: (SIGSEGV), every tenant's calls with it. Measured: 4,000 died, 2,000 planned and ran.
MAX_DEPTH = 1000
#: Words that join two operands into one node (``AND`` of ``BETWEEN`` counts too: a bound above).
_CHAIN_WORDS = frozenset(
    {"and", "or", "is", "like", "ilike", "similar", "between", "in", "not", "collate", "at"}
)
#: Words that put two inputs under one plan node, counted apart from the expressions beside them.
_SET_WORDS = frozenset({"union", "intersect", "except", "join"})
#: Words after which a separate expression begins at the same level (clauses, CASE's branches).
_SEPARATORS = frozenset(
    {"select", "from", "where", "group", "having", "order", "by", "limit", "offset", "on"}
    | {"when", "then", "else", "as", "with", "values"}
)
#: Where a token that may count begins: a string, quoted name or comment, a name, a parenthesis,
#: bracket or comma, or operator characters (a run of them is one operator).
_DEPTH_AT = re.compile(rf"{_OPAQUE_AT}|[A-Za-z_][A-Za-z0-9_$]*|[(),\[\]]|[-+*/%|&^#<>=!~:@]+")


class _Level:
    """One parenthesis (or bracket, or CASE ... END) level while :func:`check_depth` scans."""

    __slots__ = ("best", "child", "closer", "ops", "sets")

    def __init__(self, closer: str) -> None:
        self.closer = closer  # what ends it: ")", "]", "end", or "" for the whole text
        self.ops = 0  # operators of the expression being read, at this level
        self.child = 0  # the deepest level opened inside that expression
        self.best = 0  # the deepest expression finished at this level
        self.sets = 0  # set operations and joins at this level (never reset)

    def finish(self) -> None:
        self.best = max(self.best, self.ops + self.child)
        self.ops = self.child = 0

    def depth(self) -> int:
        self.finish()
        return self.best + self.sets


def check_depth(sql: str, limit: int = MAX_DEPTH) -> None:
    """InvalidInput when ``sql`` may build an expression or a chain of set operations deeper
    than ``limit`` operators.

    A bound read from the text alone (strings, quoted names and comments skipped): each level
    (parentheses, brackets, CASE ... END) is as deep as the most operators one of its
    expressions strings together plus its deepest inner level, plus its set operations and
    joins; commas, clauses and CASE's branches start a new expression (a list is as deep as its
    deepest item, so long select lists, IN lists and CASEs stay cheap). Unary and binary
    operators count alike, so the bound is above the tree DataFusion builds, never below it."""
    levels = [_Level("")]
    i = 0
    while (m := _DEPTH_AT.search(sql, i)) is not None:
        at, token = m.start(), m.group(0)
        end = _opaque_end(sql, at)
        i = end if end is not None else m.end()
        if end is not None:
            continue
        level, c = levels[-1], token[0]
        if c.isalpha() or c == "_":
            word = token.lower()
            if word in _CHAIN_WORDS:
                level.ops += 1
            elif word in _SET_WORDS:
                level.sets += 1
                level.finish()
            elif word in _SEPARATORS:
                level.finish()
            elif word == "case":
                levels.append(_Level("end"))
            elif word == "end" and level.closer == "end":
                _close(levels)
        elif c in "([":
            if c == "[":  # an index is an operator on what it follows
                level.ops += 1
            levels.append(_Level(")" if c == "(" else "]"))
        elif c in ")]":
            if level.closer == c:
                _close(levels)
        elif c == ",":
            level.finish()
        else:
            level.ops += 1
        if level.ops + level.child + level.sets > limit:
            break  # deep enough already: no need to read on
    while len(levels) > 1:  # unclosed: DataFusion refuses it, but it may crash first
        _close(levels)
    if levels[0].depth() > limit:
        raise InvalidInput(
            f"the query nests more than {limit} operators deep in one expression or chain of "
            "UNION/JOIN; split it, or use IN (...) or CASE for long lists of alternatives"
        )


def _close(levels: list[_Level]) -> None:
    inner = levels.pop().depth()
    outer = levels[-1]
    outer.child = max(outer.child, inner)


def _skip_space_and_comments(sql: str, i: int) -> int:
    n = len(sql)
    while i < n:
        if sql[i].isspace():
            i += 1
        elif sql.startswith("--", i):
            end = sql.find("\n", i)
            i = n if end < 0 else end + 1
        elif sql.startswith("/*", i):
            end = sql.find("*/", i + 2)
            if end < 0:
                raise InvalidInput("unterminated comment in the query")
            i = end + 2
        else:
            break
    return i


def rewrite_placeholders(sql: str) -> tuple[str, int]:
    """Rewrite ``?`` placeholders (outside strings, quoted names and comments) into ``$1..$n``.

    Returns the SQL and the number of parameters it takes (the highest ``$n``).
    """
    count = highest = 0

    def placeholder(sql: str, i: int) -> tuple[str, int] | None:
        nonlocal count, highest
        if sql[i] == "?":
            count += 1
            return f"${count}", i + 1
        m = _DOLLAR.match(sql, i) if sql[i] == "$" else None
        if m is None:
            return None
        digits = m.group(1).lstrip("0")
        # Compared as text first: int() refuses more than 4,300 digits (ValueError).
        if len(digits) > len(str(MAX_PARAMETERS)) or int(digits or "0") > MAX_PARAMETERS:
            raise _too_many(f"${m.group(1)[:20]}{'...' if len(m.group(1)) > 20 else ''}")
        highest = max(highest, int(digits or "0"))
        return m.group(0), m.end()

    text = _rewrite(sql, _PLACEHOLDER_AT, placeholder)
    if count and highest:
        raise InvalidInput("use either ? or $n placeholders in one query, not both")
    if count > MAX_PARAMETERS:
        raise _too_many(f"{count} ? placeholders")
    return text, max(count, highest)


def _too_many(what: str) -> InvalidInput:
    return InvalidInput(f"a query takes at most {MAX_PARAMETERS} parameters (this one: {what})")


def _rewrite(sql: str, start: re.Pattern[str], token: Callable[[str, int], tuple[str, int] | None]) -> str:
    """``sql`` with every token that ``token(sql, i)`` recognizes at ``i`` replaced by the text it
    returns (with the index just past the token); strings, quoted names and comments are copied
    as they are, never looked into. ``start`` finds where a token or one of those may begin:
    the text between is copied in one piece."""
    out: list[str] = []
    i, n = 0, len(sql)
    while i < n:
        m = start.search(sql, i)
        if m is None:
            out.append(sql[i:])
            break
        at = m.start()
        out.append(sql[i:at])
        end = _opaque_end(sql, at)
        if end is not None:
            out.append(sql[at:end])
        else:
            hit = token(sql, at)
            if hit is None:
                out.append(sql[at])
                end = at + 1
            else:
                text, end = hit
                out.append(text)
        i = end
    return "".join(out)


def _opaque_end(sql: str, i: int) -> int | None:
    """If a string, quoted name or comment starts at ``i``, the index just past it (copied as is)."""
    c = sql[i]
    if (
        c == "'"
        and i > 0
        and sql[i - 1] in "eE"
        and not (i > 1 and (sql[i - 2].isalnum() or sql[i - 2] in "_$"))
    ):
        return _escaped_closing(sql, i)  # E'...': a backslash escapes the next character
    if c in ("'", '"', "`"):
        return _closing(sql, i, c)
    if c == "$":
        m = _DOLLAR_QUOTE.match(sql, i)
        if m is None:
            return None
        end = sql.find(m.group(0), m.end())
        return len(sql) if end < 0 else end + len(m.group(0))
    if sql.startswith("--", i):
        end = sql.find("\n", i)
        return len(sql) if end < 0 else end
    if sql.startswith("/*", i):
        end = sql.find("*/", i + 2)
        return len(sql) if end < 0 else end + 2
    return None


def _escaped_closing(sql: str, start: int) -> int:
    """The index just past an E'...' string opened at ``start`` (as DataFusion's parser reads
    it: ``\\'`` and ``''`` are quotes inside it); read as a plain string, ``E'\\''`` ended
    early and the text after it was taken for a string: checks skipped it, rewrites changed it."""
    i, n = start + 1, len(sql)
    while i < n:
        if sql[i] == "\\":
            i += 2
        elif sql[i] == "'":
            if i + 1 < n and sql[i + 1] == "'":
                i += 2
                continue
            return i + 1
        else:
            i += 1
    return n


def _closing(sql: str, start: int, quote: str) -> int:
    i = start + 1
    n = len(sql)
    while i < n:
        if sql[i] == quote:
            if i + 1 < n and sql[i + 1] == quote:  # doubled quote escapes itself
                i += 2
                continue
            return i + 1
        i += 1
    return n


_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def qualify_nested(sql: str, is_namespace: Callable[[str, str], bool]) -> str:
    """Let nested namespaces be written unquoted: ``w.ns.sub.t`` -> ``w."ns.sub".t``.

    DataFusion's parser takes at most three name parts, and a nested namespace is one schema
    named ``ns.sub``. A dotted chain of four or more plain identifiers (outside strings, quoted
    names and comments) is rewritten only if its middle names a known namespace
    (``is_namespace(warehouse, db_schema)``): as ``warehouse.ns...table``, or failing that as
    ``warehouse.ns...table.column``. The table may be a quoted name last in the chain
    (time travel: ``w.ns.sub."t@v3"``).
    """

    def chain(sql: str, i: int) -> tuple[str, int] | None:
        if not _IDENT.match(sql, i) or (i > 0 and (sql[i - 1].isalnum() or sql[i - 1] in "_$.")):
            return None
        parts, end = [], i
        while True:
            m = _IDENT.match(sql, end)
            if not m:
                break
            parts.append(m.group(0))
            end = m.end()
            if end < len(sql) and sql[end] == "." and _IDENT.match(sql, end + 1):
                end += 1
                continue
            break
        if len(parts) >= 3 and sql.startswith('."', end):
            # A quoted table name last (time travel: ``w.ns.sub."t@v3"``) is copied as written.
            close = _closing(sql, end + 1, '"')
            if not sql.startswith(".", close):
                parts.append(sql[end + 1 : close])
                end = close
        return (_qualified(parts, is_namespace) if len(parts) >= 4 else sql[i:end]), end

    return _rewrite(sql, _NAME_AT, chain)


def _qualified(parts: list[str], is_namespace: Callable[[str, str], bool]) -> str:
    low = [p.lower() for p in parts]
    if is_namespace(low[0], ".".join(low[1:-1])):
        return f'{parts[0]}."{".".join(low[1:-1])}".{parts[-1]}'
    if len(parts) >= 5 and is_namespace(low[0], ".".join(low[1:-2])):
        return f'{parts[0]}."{".".join(low[1:-2])}".{parts[-2]}.{parts[-1]}'
    return ".".join(parts)
