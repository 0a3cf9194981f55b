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
#: Where a string, a quoted name or a comment may begin (what the rewrites copy untouched) ...
_OPAQUE_AT = r"['\"]|--|/\*"
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
        highest = max(highest, int(m.group(1)))
        return m.group(0), m.end()

    text = _rewrite(sql, _PLACEHOLDER_AT, placeholder)
    if count and highest:
        raise InvalidInput("use either ? or $n placeholders in one query, not both")
    return text, max(count, highest)


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
    if c in ("'", '"'):
        return _closing(sql, i, c)
    if sql.startswith("--", i):
        end = sql.find("\n", i)
        return len(sql) if end < 0 else end
    if sql.startswith("/*", i):
        end = sql.find("*/", i + 2)
        return len(sql) if end < 0 else end + 2
    return None


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
