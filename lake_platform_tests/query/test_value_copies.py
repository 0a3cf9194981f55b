"""Growth driven by column data (``value_copies``): an expression may build at most
``MAX_COPIES`` copies of any column it reads. A column's values counted as nothing, so nested
``encode(..., 'hex')`` (twice the bytes a level: exponential in a few hundred bytes of SQL), CTE
chains of ``v || v``, ``regexp_match`` with many groups, group references of ``regexp_replace``,
``replace`` of the empty pattern and ``array_to_string(string_to_array(s, NULL), sep)`` passed
over any table. Refusals are asserted at planning: nothing here builds a large value."""

from __future__ import annotations

import pytest
from datafusion import SessionContext

from lake_platform_tests.query.value_checks import encoded, refused, rows_answered, table_context


@pytest.fixture(scope="module")
def ctx() -> SessionContext:
    return table_context(capped=True)


CHAIN = "WITH a0 AS (SELECT s AS v FROM t), " + ", ".join(
    f"a{i} AS (SELECT v || v AS v FROM a{i - 1})" for i in range(1, 6)
)


@pytest.mark.parametrize(
    ("sql", "refusal"),
    [
        (f"SELECT {encoded(5)} AS r FROM t", r"encode may build 32 copies of column s"),
        (f"SELECT length({encoded(40)}) AS n FROM t", r"encode may build 32 copies"),
        (CHAIN + " SELECT v FROM a5", r"\|\| may build 32 copies of column s"),
        (
            "SELECT regexp_match(s, '" + "(" * 17 + "x" + ")" * 17 + "') AS r FROM t",
            "regexp_match may build 17",
        ),
        # each group reference inserts what its group matched, at most the string again
        ("SELECT regexp_replace(s, '(.*)', '" + "$1" * 20 + "') AS r FROM t", "regexp_replace may build"),
        (
            "SELECT regexp_replace(s, '(.)', '\\1\\1\\1\\1\\1\\1\\1\\1', 'g') AS r FROM t",
            "regexp_replace may",
        ),
        # the empty pattern matches at every position: the replacement inserted between each two bytes
        ("SELECT replace(s, '', '" + "y" * 20 + "') AS r FROM t", "replace may build 21 copies of column s"),
        ("SELECT regexp_replace(s, 'z*', '" + "y" * 20 + "', 'g') AS r FROM t", "regexp_replace may build"),
        ("SELECT replace(s, '1', s) AS r FROM t", "replace of a column's value by a column's"),
        (
            "SELECT array_to_string(string_to_array(s, NULL), '" + "-" * 20 + "') AS r FROM t",
            "array_to_string may build 23 copies of column s",
        ),
        ("SELECT repeat(s, 100) AS r FROM t", "repeat may build 100 copies"),
        # a repeat by a column's count is kept within the cap for a batch: 34 of them were 2.2 GB
        (
            "SELECT concat(" + ", ".join(["a"] * 17) + ") AS r FROM (SELECT repeat(s, x) AS a FROM t)",
            r"concat may build 17 copies of repeat\(\) a value",
        ),
        (
            "SELECT regexp_match(s, x) AS r FROM (SELECT s, CAST(x AS VARCHAR) x FROM t)",
            "regexp_match's pattern",
        ),
        # through a subquery, and several columns of one projection together
        (f"SELECT v || v || v AS r FROM (SELECT {encoded(3)} AS v FROM t)", r"\|\| may build 24 copies"),
        (
            "SELECT " + ", ".join(f"s || s AS c{i}" for i in range(9)) + " FROM t",
            "Projection together may build 18 copies",
        ),
        # a long format string: 16 bytes of text a byte of it (``%c`` is 24)
        (
            "SELECT to_char(to_timestamp(x), '" + "%c" * 100 + "') AS r FROM t",
            "to_char of a literal may build",
        ),
    ],
)
def test_growth_past_the_copies_factor_is_refused_at_planning(
    ctx: SessionContext, sql: str, refusal: str
) -> None:
    refused(ctx, sql, refusal)


@pytest.mark.parametrize(
    "sql",
    [
        f"SELECT {encoded(1)} AS a, {encoded(3)} AS b, encode(s, 'base64') AS c FROM t",
        "SELECT concat_ws(',', s, s, s, s, s, s, s, s, s, s) AS r FROM t",
        "SELECT concat_ws(',', s, CAST(x AS VARCHAR), upper(s), lower(s), trim(s)) AS r FROM t",
        "SELECT replace(s, ',', '<br/>') AS r, replace(s, '', '-') AS q FROM t",
        "SELECT replace('template {x}', '{x}', s) AS r FROM t",
        "SELECT regexp_replace(s, '(\\d)', '<$1>', 'g') AS r, regexp_replace(s, 'a', 'bcdefgh') AS q FROM t",
        "SELECT regexp_match(s, '(\\d)(\\d)?') AS r FROM t",
        "SELECT array_to_string(string_to_array(s, ','), ';') AS r FROM t",
        "SELECT " + ", ".join(f"upper(s) AS u{i}" for i in range(20)) + " FROM t",
        "SELECT " + ", ".join(f"max(CASE WHEN x = {i} THEN s END) AS p{i}" for i in range(20)) + " FROM t",
        "SELECT repeat(s, 3) AS r, repeat('-', x) AS q FROM t",
        "SELECT to_char(to_timestamp(x), '%Y-%m-%d %H:%M') AS r FROM t",
        CHAIN.split(", a3")[0] + " SELECT v || 'x' AS r FROM a2",  # 4 copies, and a literal
        "SELECT x FROM t WHERE encode(s, 'hex') = '31' OR " + " OR ".join(f"x = {i}" for i in range(50)),
    ],
)
def test_growth_within_the_copies_factor_answers(ctx: SessionContext, sql: str) -> None:
    assert rows_answered(ctx, sql) >= 0
