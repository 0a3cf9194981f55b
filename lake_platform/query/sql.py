"""Lexical checks on SQL text before DataFusion sees it: size, statement kind, placeholders.

DataFusion's own SQLOptions (no DDL, DML or statements) are the main guard; this is the cheap
first line: it rejects what is not a query by its first keyword and rewrites JDBC/ODBC-style
``?`` placeholders into DataFusion's ``$1, $2, ...``.
"""

from __future__ import annotations

import re

from lake_platform.errors import InvalidInput

#: Statements a reader may run: queries (with CTEs), VALUES, and EXPLAIN of a query.
ALLOWED_FIRST_WORDS = frozenset({"select", "with", "values", "explain"})
_WORD = re.compile(r"[A-Za-z_]+")
_DOLLAR = re.compile(r"\$([0-9]+)")


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
    first = word.group(0).lower() if word else sql[head:head + 10]
    if first not in ALLOWED_FIRST_WORDS:
        raise InvalidInput(f"only read-only queries (SELECT, WITH, VALUES, EXPLAIN) are allowed, not {first.upper()!r}")
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
    out: list[str] = []
    i, n, count = 0, len(sql), 0
    highest = 0
    while i < n:
        c = sql[i]
        if c in ("'", '"'):
            end = _closing(sql, i, c)
            out.append(sql[i:end])
            i = end
        elif sql.startswith("--", i):
            end = sql.find("\n", i)
            end = n if end < 0 else end
            out.append(sql[i:end])
            i = end
        elif sql.startswith("/*", i):
            end = sql.find("*/", i + 2)
            end = n if end < 0 else end + 2
            out.append(sql[i:end])
            i = end
        elif c == "?":
            count += 1
            out.append(f"${count}")
            i += 1
        elif c == "$":
            m = _DOLLAR.match(sql, i)
            if m:
                highest = max(highest, int(m.group(1)))
                out.append(m.group(0))
                i = m.end()
            else:
                out.append(c)
                i += 1
        else:
            out.append(c)
            i += 1
    if count and highest:
        raise InvalidInput("use either ? or $n placeholders in one query, not both")
    return "".join(out), max(count, highest)


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
