"""Expressions the pinned datafusion-python does not expose to the value check (``value_hidden``):
the sets of ``GROUPING SETS``/``ROLLUP``/``CUBE`` and the lists of ``DISTINCT ON`` are evaluated for
a batch like a projection's, so what their text may build is refused, and what cannot grow answers."""

from __future__ import annotations

import pytest
from datafusion import SessionContext

from lake_platform.query.value_hidden import may_grow
from lake_platform_tests.query.value_checks import encoded, refused, rows_answered, table_context

LONG = "'" + "y" * 3000 + "'"
ENCODED_AB = encoded(20, "'ab'")  # of literals only: 2^20 times 'ab'


@pytest.fixture(scope="module")
def ctx() -> SessionContext:
    return table_context()


@pytest.mark.parametrize(
    ("sql", "refusal"),
    [
        (f"SELECT s, count(*) AS n FROM t GROUP BY ROLLUP ({encoded(6)}, s)", "encode in GROUPING SETS"),
        (f"SELECT count(*) AS n FROM t GROUP BY CUBE (s, {LONG})", "a literal that may be longer than 2048"),
        (f"SELECT count(*) AS n FROM t GROUP BY GROUPING SETS ((s), ({encoded(6)}))", "encode in GROUPING"),
        ("SELECT count(*) AS n FROM t GROUP BY ROLLUP (s || s || s, x)", r"\|\| in GROUPING SETS"),
        (f"SELECT DISTINCT ON ({encoded(6)}) x FROM t", "encode in DISTINCT ON"),
        (f"SELECT DISTINCT ON (x) x, {LONG} AS r FROM t ORDER BY x", "a literal that may be longer"),
        (f"SELECT DISTINCT ON (x) x, {encoded(6)} AS r FROM t ORDER BY x", "encode in DISTINCT ON"),
    ],
)
def test_what_hidden_expressions_may_build_is_refused(ctx: SessionContext, sql: str, refusal: str) -> None:
    assert "compute it in a subquery in FROM" in refused(ctx, sql, refusal)


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT s, x % 3 AS k, count(*) AS n FROM t GROUP BY ROLLUP (s, x % 3)",
        "SELECT upper(s) AS u, count(*) AS n FROM t GROUP BY CUBE (upper(s), x > 10)",
        "SELECT s, count(*) AS n FROM t GROUP BY GROUPING SETS ((s), (x), ())",
        "SELECT DISTINCT ON (x % 5) x % 5 AS k, s FROM t ORDER BY x % 5, x DESC",
        "SELECT DISTINCT ON (s) s, x, 'label' AS l FROM t ORDER BY s",
        # computed below, where the walk sees it: the grouping only names the column
        f"SELECT e, count(*) AS n FROM (SELECT {encoded(2)} AS e, s FROM t) GROUP BY ROLLUP (e, s)",
    ],
)
def test_ordinary_grouping_sets_and_distinct_on_answer(ctx: SessionContext, sql: str) -> None:
    assert rows_answered(ctx, sql) >= 1


def test_a_literal_is_measured_to_the_end_of_the_text_as_its_quotes_are_not_escaped() -> None:
    assert may_grow('t.s = Utf8("a") AND t.x > Int64(1)', 2048) == ""
    assert may_grow('Utf8("a") OR b") ' + "y" * 3000, 2048).startswith("a literal")
    assert may_grow("upper(t.s)", 2048) == ""
    assert may_grow("concat(t.s, t.s)", 2048) == "concat"


@pytest.mark.parametrize(
    ("sql", "refusal"),
    [
        # a subquery's plan is not exposed: a literal or growth in it was not checked at all
        (f"SELECT x, (SELECT max(s) || {LONG} FROM t) AS q FROM t", r"\|\| in a subquery"),
        (f"SELECT x FROM t WHERE s IN (SELECT concat(s, {LONG}) FROM t)", "concat in a subquery"),
        (
            f"SELECT x FROM t WHERE EXISTS (SELECT {encoded(6)} FROM t u WHERE u.x = t.x)",
            "encode in a subquery",
        ),
        # the optimizer folds a call of literals by running it: 2^20 times 'ab' at planning
        (f"SELECT x FROM t WHERE x IN (SELECT length({ENCODED_AB}))", "encode in a subquery"),
        (f"SELECT x FROM t WHERE s IN (SELECT {LONG})", "a literal of 3000 bytes in a subquery"),
        (
            "SELECT x FROM t WHERE s IN (SELECT s FROM t WHERE x IN "
            f"(SELECT length(replace(s, '', {LONG})) FROM t))",
            "replace in a subquery",
        ),
        ("SELECT x, (SELECT string_agg(s, ',') FROM t) AS a FROM t", "string_agg in a subquery"),
        ("SELECT x FROM t WHERE s IN (SELECT to_char(now(), '%Y') FROM t)", "to_char in a subquery"),
    ],
)
def test_what_a_subquery_may_build_is_refused(ctx: SessionContext, sql: str, refusal: str) -> None:
    assert "compute it in the outer query" in refused(ctx, sql, refusal)


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT x FROM t WHERE x > (SELECT avg(x) FROM t)",
        "SELECT x FROM t WHERE x IN (SELECT x FROM t WHERE s LIKE '1%' AND s <> 'abc')",
        "SELECT x FROM t WHERE EXISTS (SELECT 1 FROM t u WHERE u.x = t.x AND upper(u.s) = '1')",
        "SELECT x, (SELECT max(s) FROM t) AS m FROM t",
        "SELECT x, (SELECT max(s) FROM t) || '-' || s AS m FROM t",  # the growth in the outer query
        "SELECT x FROM t WHERE s NOT IN (SELECT lower(trim(s)) FROM t WHERE x > 15)",
        f"SELECT x FROM t WHERE (s IN ('a', {LONG}) OR x > 0) AND x IN (SELECT x FROM t)",
    ],
)
def test_ordinary_subqueries_answer(ctx: SessionContext, sql: str) -> None:
    assert rows_answered(ctx, sql) >= 1


@pytest.mark.parametrize(
    ("sql", "refusal"),
    [
        # a subquery in a subquery is shown as <subquery> only: the optimizer folded this lpad
        (
            "SELECT x FROM t WHERE s IN (SELECT s FROM t WHERE x IN (SELECT length(lpad('x', 2000000000))))",
            "nested",
        ),
        (
            f"SELECT x FROM t WHERE s IN (SELECT s FROM t WHERE x IN (SELECT length({ENCODED_AB})))",
            "encode",
        ),
    ],
)
def test_a_subquery_nested_in_a_subquery_is_read_from_the_querys_text(
    ctx: SessionContext, sql: str, refusal: str
) -> None:
    refused(ctx, sql, refusal)


def test_a_plain_nested_subquery_answers(ctx: SessionContext) -> None:
    sql = "SELECT x FROM t WHERE s IN (SELECT s FROM t WHERE x IN (SELECT max(x) - 1 FROM t WHERE s <> 'a'))"
    assert rows_answered(ctx, sql) == 1
