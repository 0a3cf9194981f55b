"""Calls over the sized calls ``value_bounds`` checks are bounded from their arguments' bounds
(``value_compose``). Checked one by one, ``replace(lpad(tag, 512, 'x'), 'x', lpad('y', 512, 'y'))``
passed (each ``lpad`` fits) and built about 800 MB on 2,000 rows (8.6 GB a batch of 32,768).
Refusals are asserted at planning: nothing here builds a large value."""

from __future__ import annotations

import pytest
from datafusion import SessionContext

from lake_platform_tests.query.value_checks import refused, rows_answered, table_context


@pytest.fixture(scope="module")
def ctx() -> SessionContext:
    return table_context(capped=True)


@pytest.mark.parametrize(
    ("sql", "refusal"),
    [
        # the colleague's query: 2,000 rows built about 800 MB
        (
            "SELECT length(replace(lpad(s, 512, 'x'), 'x', lpad('y', 512, 'y'))) AS n FROM t",
            "replace of lpad may build 137438953472 bytes for a batch of 32768 values",
        ),
        ("SELECT replace(lpad('x', 4096, 'x'), 'x', lpad('y', 4096, 'y')) AS r", "replace of lpad may build"),
        ("SELECT regexp_replace(rpad(s, 300), '', rpad('y', 300)) AS r FROM t", "regexp_replace of rpad"),
        ("SELECT lpad(s, 300) || lpad(s, 300) AS r FROM t", r"\|\| of lpad may build 78643200 bytes"),
        ("SELECT concat(s, rpad(s, 256), lpad(s, 256), '!') AS r FROM t", "concat of rpad, lpad may build"),
        ("SELECT concat_ws(lpad('-', 200), s, s, s, s) AS r FROM t", "concat_ws of lpad may build 78643200"),
        ("SELECT repeat(lpad(s, 100), 1000) AS r FROM t", "repeat of lpad may build 13107200000 bytes"),
        ("SELECT repeat(repeat(lpad('x', 10), 1000), 2000) AS r", "repeat of lpad may build 80000000 bytes,"),
        (
            "SELECT array_concat(range(100), range(100), range(100)) AS r FROM t",
            "array_concat of range may build",
        ),
        ("SELECT length(replace(s, '1', lpad('y', 2))) AS n FROM t", "replace's string must be a literal"),
        ("SELECT replace(lpad(s, 100), '', repeat('y', 200)) AS r FROM t", "replace of lpad may build"),
        ("SELECT replace(lpad(s, 10), 'x', s) AS r FROM t", "replace's replacement must be a literal"),
        ("SELECT repeat(lpad(s, 10), x) AS r FROM t", "repeat's count must be an integer literal"),
        ("SELECT string_agg(lpad(s, 5), ',') AS r FROM t", "string_agg of values built by lpad has no bound"),
        ("SELECT array_agg(range(3)) AS r FROM t", "array_agg of values built by range has no bound"),
        # a column carries the bound of the call that made it, through a CTE, a subquery, a join
        (
            "WITH q AS (SELECT lpad(s, 256, 'x') AS a, lpad('y', 256) AS b FROM t) "
            "SELECT replace(a, 'x', b) AS r FROM q",
            "replace of lpad may build 34359738368 bytes",
        ),
        ("SELECT concat(a, a) AS r FROM (SELECT lpad(s, 512) AS a FROM t) q WHERE a > 'x'", "concat of lpad"),
        (
            "SELECT q.a || u.b AS r FROM (SELECT x, rpad(s, 300) AS a FROM t) q "
            "JOIN (SELECT x, lpad(s, 300) AS b FROM t) u ON q.x = u.x",
            r"\|\| of rpad, lpad may build 78643200 bytes",
        ),
        (
            "SELECT string_agg(a, ',') AS r FROM (SELECT lpad(s, 3) AS a FROM t)",
            "string_agg of values built by lpad",
        ),
        # builders of lists, structs and maps hold all their arguments, not the largest one
        (
            "SELECT make_array(lpad('x', 16000000), lpad('x', 16000000), lpad('x', 16000000)) AS r",
            "make_array of lpad may build 192000000 bytes, more",
        ),
        ("SELECT named_struct('a', lpad(s, 300), 'b', rpad(s, 300)) AS r FROM t", "named_struct of lpad"),
        ("SELECT struct(lpad(s, 300), s, lpad(s, 300)) AS r FROM t", "struct of lpad may build 78643200"),
        ("SELECT arrays_zip(range(5000000), range(5000000)) AS r", "arrays_zip of range may build 80000000"),
        ("SELECT array_union(range(5000000), range(5000000)) AS r", "array_union of range may build"),
        (
            "SELECT map(make_array(lpad('k', 9000000)), make_array(lpad('y', 9000000))) AS r",
            "map of lpad may build",
        ),
        # a separator (or NULL's text) once per element: 1,000,000 elements of 'a'
        (
            "SELECT array_to_string(array_repeat('a', 1000000), lpad('-', 100)) AS r",
            "array_to_string of array_repeat, lpad may build 4\\d{8} bytes, more",
        ),
        (
            "SELECT array_to_string(array_repeat('a', 1000000), '" + "-" * 100 + "') AS r",
            "array_to_string of array_repeat may build 1\\d{8} bytes, more",
        ),
        (
            "SELECT array_to_string(array_repeat(NULL, 8000000), ',', '" + "N" * 20 + "') AS r",
            "array_to_string of array_repeat may build",
        ),
        # each matching element replaced by a built value
        (
            "SELECT array_replace_all(array_repeat('a', 1000000), 'a', lpad('b', 100)) AS r",
            "array_replace_all of array_repeat, lpad may build 4\\d{8} bytes",
        ),
        (
            "SELECT array_replace_n(array_repeat('a', 1000000), 'a', '" + "b" * 100 + "', 1000000) AS r",
            "array_replace_n of array_repeat may build",
        ),
        # a literal is a value of its length, copied to every row; the check ran only when the
        # query named a sized call, so none of these was walked
        (
            "SELECT concat(s, '" + "x" * 3000 + "') AS r FROM t",
            "concat of a literal may build 98304000 bytes",
        ),
        ("SELECT s || '" + "x" * 3000 + "' AS r FROM t", r"\|\| of a literal may build 98304000 bytes"),
        ("SELECT CASE WHEN x > 1 THEN '" + "x" * 3000 + "' END AS r FROM t", "may build 98304000 bytes"),
        ("SELECT coalesce(s, '" + "x" * 3000 + "') AS r FROM t", "coalesce of a literal may build"),
        (
            "WITH q AS (SELECT '" + "x" * 1500 + "' AS a FROM t) SELECT a || a AS r FROM q",
            r"\|\| of a literal",
        ),
        ("SELECT repeat('x', 5000) AS r FROM t", "repeat of a literal may build 163840000 bytes"),
        # a pattern that matches the empty string inserts the replacement at every position
        (
            "SELECT replace('" + "x" * 10000 + "', '', '" + "y" * 10000 + "') AS r",
            "replace of a literal may build 100020000 bytes, more",
        ),
        (
            "SELECT replace('" + "x" * 100 + "', '', '" + "y" * 100 + "') AS r FROM t",
            "replace of a literal may build 334233600 bytes",
        ),
        (
            "SELECT regexp_replace('" + "x" * 100 + "', 'z*', '" + "y" * 100 + "', 'g') AS r FROM t",
            "regexp_replace of a literal may build",
        ),
    ],
)
def test_a_composition_that_could_build_past_the_cap_is_refused_at_planning(
    ctx: SessionContext, sql: str, refusal: str
) -> None:
    assert "LAKE_FLIGHT_MAX_VALUE_BYTES=67108864" in refused(ctx, sql, refusal)


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT replace(lpad(s, 20, '0'), '0', '.') AS r FROM t",
        "SELECT replace(lpad('x', 1000, 'x'), 'x', lpad('y', 16, 'y')) AS r",  # 64,004 bytes, once
        "SELECT lpad(s, 100) || rpad(s, 100) || s AS r FROM t",
        "SELECT concat_ws('-', s, lpad(s, 8)) AS r FROM t",
        "SELECT upper(lpad(s, 300)) AS r FROM t",
        "SELECT length(lpad(s, 300)) + length(rpad(s, 300)) AS r FROM t",
        "SELECT CASE WHEN x > 1 THEN lpad(s, 300) ELSE rpad(s, 300) END AS r FROM t",
        "SELECT max(length(lpad(s, 300))) AS r FROM t",
        "SELECT repeat(lpad(s, 4), 3) AS r FROM t",
        "SELECT concat_ws(lpad('-', 200), s, s, s) AS r FROM t",  # 1,600 bytes a value
        "SELECT repeat(s, 3) AS r FROM t",  # a column repeated: capped.repeat checks it when it runs
        "SELECT repeat('x', 500) AS r FROM t",
        "SELECT replace(s, '1', repeat('y', 3)) IS NULL AS r FROM t WHERE x < 0",
        "SELECT string_agg(s, ',') AS r FROM t",
        "SELECT array_append(range(10), 5) AS r FROM t",
        "WITH q AS (SELECT lpad(s, 100) AS a FROM t) SELECT a || a AS r FROM q",
        "SELECT replace(a, '1', 'xy') AS r FROM (SELECT lpad(s, 200, '1') AS a FROM t GROUP BY s)",
        "SELECT make_array(lpad(s, 20), rpad(s, 20)) AS r FROM t",
        "SELECT named_struct('a', lpad(s, 20), 'b', s) AS r FROM t",
        "SELECT array_to_string(range(10), ', ') AS r FROM t",
        "SELECT array_to_string(array_repeat('a', 10), '-', 'null') AS r FROM t",
        "SELECT array_replace_all(array_repeat('a', 10), 'a', 'bb') AS r FROM t",
        "SELECT concat(s, '" + "x" * 1000 + "', s) AS r FROM t",
        "SELECT replace('" + "x" * 1000 + "', '', '" + "y" * 60 + "') AS r",  # 61 kB, once
        "SELECT replace(s, 'x', 'yyyy') AS r, regexp_replace(s, '" + "x" * 3000 + "', 'y') AS q FROM t",
        # regexp_replace without the 'g' flag replaces the first match only
        "SELECT regexp_replace('" + "x" * 100 + "', '', '" + "y" * 100 + "') AS r FROM t",
        "SELECT string_agg(s || ',', '') AS r FROM t",
        "SELECT repeat('*', x) AS r FROM t",  # capped.repeat checks a column's count when it runs
    ],
)
def test_compositions_within_the_cap_answer_what_datafusion_answers(ctx: SessionContext, sql: str) -> None:
    assert rows_answered(ctx, sql) >= 0
