"""``lpad``, ``rpad``, ``array_repeat``, ``array_resize`` and the scalar ``range``/``generate_series`` under
``max_value_bytes`` (issue 44), checked at planning: a size not given by literals, or one that
could build more than the cap (for one value when every argument is a literal and the query
has no ``FROM``, else for a batch), is refused before anything runs; a call the check cannot see
is refused too. Below the cap the answers are DataFusion's."""

from __future__ import annotations

import pytest
from datafusion import SessionContext

from lake_platform_tests.query.value_checks import encoded, refused, rows_answered, table_context


@pytest.fixture(scope="module")
def ctx() -> SessionContext:
    return table_context()


@pytest.mark.parametrize(
    ("sql", "refusal"),
    [
        ("SELECT lpad('x', 2000000000)", "lpad to 2000000000 characters may build 8000000000 bytes, more"),
        ("SELECT rpad('x', 20000000, 'ab')", "rpad to 20000000 characters may build 80000000 bytes, more"),
        ("SELECT lpad(s, 600) FROM t", "may build 78643200 bytes for a batch of 32768 values"),
        ("SELECT max(length(RPAD(s, 1000))) FROM t", "rpad to 1000 characters"),
        ("SELECT x FROM t ORDER BY lpad(s, 100000)", "lpad to 100000 characters"),
        ("SELECT rpad(s, x) FROM t", "rpad's length must be an integer literal"),
        ("SELECT lpad('x', 1000000000 * 2)", "lpad's length must be an integer literal"),
        ("SELECT x FROM t WHERE x IN (SELECT length(lpad(s, 5)) FROM t)", "in a subquery"),
        # a literal made a column of a batch: one copy per row
        ("SELECT lpad('x', 1000000) AS r FROM t", "may build 131072000000 bytes for a batch of 32768 values"),
        (
            "SELECT array_repeat(1, 50000000)",
            "array_repeat to 50000000 elements may build 400000000 bytes, more",
        ),
        (
            "SELECT list_repeat('abcdefgh', 10000000)",
            "array_repeat to 10000000 elements may build 120000000 bytes",
        ),
        ("SELECT array_repeat(x, 2) FROM t", "array_repeat's element must be a literal"),
        ("SELECT array_repeat(1, x) FROM t", "array_repeat's count must be an integer literal"),
        ("SELECT cardinality(array_repeat(1, 300)) FROM t", "for a batch of 32768 values"),
        ("SELECT range(50000000)", "range to 50000000 elements may build 400000000 bytes, more"),
        ("SELECT range(8388609)", "range to 8388609 elements"),
        ("SELECT range(-100000000, 0, 10)", "range to 10000000 elements"),
        ("SELECT generate_series(0, 8388608)", "generate_series to 8388609 elements"),
        ("SELECT range(-9223372036854775807, 9223372036854775807)", "range to 18446744073709551614 elements"),
        ("SELECT generate_series(10, -90000000, -3)", "generate_series to 30000004 elements"),
        ("SELECT range(x) FROM t", "range's bounds and step must be integer literals"),
        (
            "SELECT generate_series(1, 10, x) FROM t",
            "generate_series's bounds and step must be integer literals",
        ),
        ("SELECT range(DATE '2020-01-01', DATE '2021-01-01', INTERVAL '1' DAY)", "must be integer literals"),
        ("SELECT x FROM t WHERE x IN (SELECT cardinality(range(5)) FROM t)", "in a subquery"),
        ("SELECT x FROM t WHERE x IN (SELECT cardinality(array_repeat(1, 5)) FROM t)", "in a subquery"),
        # array_resize grew a list to a number of elements: 100M per row of a REST filter took the
        # server past its memory (OOM-killed)
        ("SELECT array_resize(make_array(x), 100000000) FROM t", "array_resize to 100000000 elements"),
        ("SELECT list_resize(make_array(1), 50000000, 7)", "array_resize to 50000000 elements may build"),
        ("SELECT array_resize(make_array(s), 5, s) FROM t", "array_resize's value must be a literal"),
        ("SELECT array_resize(make_array(x), x) FROM t", "array_resize's size must be an integer literal"),
        ("SELECT count(*) FILTER (WHERE lpad(s, 5) > 'a') FROM t", r"in an expression \(AggregateFunction\)"),
        ("SELECT sum(x) OVER (PARTITION BY lpad(s, 1000)) FROM t", "lpad to 1000 characters"),
        # a cast to a fixed-size type builds its whole width for a NULL: 8 MB a row from nothing
        (
            "SELECT arrow_cast(NULL, 'FixedSizeList(1000000, Int64)') AS b FROM t",
            r"arrow_cast to FixedSizeList\(1000000, Int64\) may build 262144000000 bytes for a batch",
        ),
        (
            "SELECT arrow_cast(NULL, 'FixedSizeBinary(2000000000)') AS b",
            r"may build 2000000000 bytes \(2000000000 bytes a value, NULL or not\), more",
        ),
        (
            "SELECT arrow_try_cast(NULL, 'List(FixedSizeList(100, FixedSizeBinary(100)))') AS b FROM t",
            "10000 bytes a",
        ),
        (
            "SELECT arrow_cast(NULL, 'Struct(\"a\": FixedSizeBinary(3000))') IS NULL AS b FROM t",
            "3000 bytes a",
        ),
        ("SELECT arrow_cast(NULL, 'FixedSizeList(70000 x Utf8)') AS b FROM t", "FixedSizeList"),
        (
            "SELECT x FROM t WHERE x IN "
            "(SELECT cardinality(arrow_cast(NULL, 'FixedSizeList(2, Int8)')) FROM t)",
            "subquery",
        ),
        # several columns of one batch, each within the cap: together 3 times it
        (
            "SELECT lpad(s, 500) AS a, rpad(s, 500) AS b, lpad(s, 500, '-') AS c FROM t",
            "the columns of one Projection may build 196608000 bytes for a batch of 32768 rows",
        ),
        (
            "SELECT lpad('x', 16000000) AS a, rpad('y', 16000000) AS b",
            "the columns of one Projection may build 128000000 bytes together, more",
        ),
        (
            "SELECT s, max(lpad(s, 500)) AS a, min(rpad(s, 500)) AS b FROM t GROUP BY s",
            "the columns of one Aggregate may build 131072000 bytes",
        ),
        # a literal is copied to every row of a batch: 3,000 bytes are 98 MB a batch of 32768
        ("SELECT '" + "x" * 3000 + "' AS r FROM t", "may build 98304000 bytes for a batch of 32768 rows"),
        ("SELECT s, '" + "x" * 1500 + "' AS a, '" + "y" * 1500 + "' AS b FROM t", "may build 98304000"),
        ("SELECT s FROM t GROUP BY s, '" + "x" * 3000 + "'", "the columns of one Aggregate may build"),
    ],
)
def test_a_call_that_could_build_past_the_cap_is_refused_before_it_runs(
    ctx: SessionContext, sql: str, refusal: str
) -> None:
    assert "LAKE_FLIGHT_MAX_VALUE_BYTES=67108864" in refused(ctx, sql, refusal)


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT lpad('x', 16777216) AS r",  # one value of at most 64 MiB
        "SELECT lpad(s, 20, '0') AS r FROM t",
        "SELECT rpad(s, 512) AS r FROM t",
        "SELECT lpad(s, 5) AS r FROM t WHERE lpad(s, 3, 'x') > '1' GROUP BY lpad(s, 5)",
        "SELECT lpad('x', -5) AS r",
        "SELECT 'lpad(' AS r",
        "SELECT range(8388608) AS r",
        "SELECT generate_series(0, 8388607) AS r",
        "SELECT range(10, 0, -1) AS r",
        "SELECT list_repeat('ab', 1000) AS r",
        "SELECT array_repeat(NULL, 100) AS r",
        "SELECT array_resize(make_array(x), 3) AS r FROM t",
        "SELECT list_resize(make_array('a'), 100, 'b') AS r",
        "SELECT x, range(1, 10) AS r FROM t WHERE x > 1",
        "SELECT value FROM range(1, 100000000) LIMIT 1",  # the table function, which streams
        "SELECT count(*) AS n FROM generate_series(1, 100000000)",
        "SELECT arrow_cast(NULL, 'FixedSizeBinary(16)') AS b FROM t",
        "SELECT lpad(s, 200) AS a, rpad(s, 200) AS b, lpad(s, 20) AS c FROM t",
        "SELECT lpad('x', 8000000) AS a, rpad('y', 8000000) AS b",
        "SELECT arrow_cast(make_array(1.0, 2.0, 3.0), 'FixedSizeList(3, Float32)') AS v FROM t",
        "SELECT arrow_cast(NULL, 'FixedSizeList(1000000, Int8)') AS b",  # one value of 1 MB
        "SELECT arrow_cast(s, 'Utf8View') AS v, arrow_try_cast(s, 'Int64') AS n FROM t",
        "SELECT '" + "x" * 100000 + "' AS r",  # one value, once
        "SELECT '" + "x" * 2000 + "' AS r FROM t",  # 65.5 MB a batch
        # compared, matched, looked for: the literal is not copied to the rows
        "SELECT x FROM t WHERE x > 0 OR s = '" + "x" * 3000 + "' OR s IN ('a', '" + "x" * 3000 + "')",
        "SELECT s LIKE '" + "x" * 3000 + "%' AS a, regexp_like(s, '" + "x" * 3000 + "') AS b FROM t",
        "SELECT strpos(s, '" + "x" * 3000 + "') AS a, length('" + "x" * 3000 + "') AS b FROM t",
    ],
)
def test_calls_within_the_cap_answer_what_datafusion_answers(ctx: SessionContext, sql: str) -> None:
    assert rows_answered(ctx, sql) >= 1


@pytest.mark.parametrize(
    ("sql", "refusal"),
    [
        # a window function's argument is evaluated for every row of a batch, as a projection's
        (
            "SELECT x, first_value('" + "y" * 3000 + "') OVER (ORDER BY x) AS w FROM t",
            "first_value of a literal",
        ),
        (f"SELECT x, last_value({encoded(5)}) OVER (ORDER BY x) AS w FROM t", "encode may build 32 copies"),
        (f"SELECT row_number() OVER (PARTITION BY {encoded(5)}) AS w FROM t", "encode may build 32 copies"),
        (f"SELECT rank() OVER (ORDER BY {encoded(5)}) AS w FROM t", "encode may build 32 copies"),
        (
            "SELECT lag(s || '" + "y" * 3000 + "') OVER (ORDER BY x) AS w FROM t",
            r"\|\| of a literal may build",
        ),
        # the window's columns are built for one batch together, and its output is a column over it
        (
            "SELECT first_value(lpad(s, 400)) OVER (ORDER BY x) AS a, "
            "last_value(rpad(s, 400)) OVER (ORDER BY x) AS b FROM t",
            "the columns of one WindowExpr may build",
        ),
        (
            f"SELECT w || w || w AS r FROM (SELECT first_value({encoded(3)}) OVER (ORDER BY x) AS w FROM t)",
            r"\|\| may build 24 copies of column s",
        ),
        # a window's FILTER is not exposed: what it may build is refused, not guessed
        (
            f"SELECT count(x) FILTER (WHERE {encoded(1)} > 'a') OVER (ORDER BY x) AS w FROM t",
            r"in a window's FILTER",
        ),
    ],
)
def test_a_window_builds_what_its_expressions_do(ctx: SessionContext, sql: str, refusal: str) -> None:
    refused(ctx, sql, refusal)


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT x, row_number() OVER (PARTITION BY s ORDER BY x) AS n FROM t",
        "SELECT x, sum(x) OVER (ORDER BY x ROWS BETWEEN 2 PRECEDING AND CURRENT ROW) AS m FROM t",
        "SELECT s, lag(s || '-' || upper(s), 1) OVER (ORDER BY x) AS p FROM t",
        f"SELECT first_value({encoded(2)}) OVER (PARTITION BY x % 3 ORDER BY x) AS e FROM t",
        "SELECT count(x) FILTER (WHERE x > 3) OVER (ORDER BY x) AS c FROM t",
        "SELECT first_value(lpad(s, 200)) OVER (ORDER BY x) AS a FROM t",
    ],
)
def test_ordinary_windows_answer(ctx: SessionContext, sql: str) -> None:
    assert rows_answered(ctx, sql) == 20
