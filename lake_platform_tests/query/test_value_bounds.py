"""``lpad`` and ``rpad`` under ``max_value_bytes`` (issue 44, row 3), checked at planning: a length
that is not an integer literal, or one that could build more than the cap (for one value when
every argument is a literal, else for a batch), is refused before anything runs; a call the
check cannot see is refused too. Below the cap the answers are DataFusion's."""

from __future__ import annotations

import pytest
from datafusion import SessionContext

from lake_platform.query.errors import ValueTooLarge
from lake_platform.query.limits import QueryLimits
from lake_platform.query.value_bounds import check_values

LIMITS = QueryLimits(labels={"max_value_bytes": "LAKE_FLIGHT_MAX_VALUE_BYTES"})


@pytest.fixture(scope="module")
def ctx() -> SessionContext:
    ctx = SessionContext()
    ctx.sql("CREATE TABLE t AS SELECT value AS x, CAST(value AS VARCHAR) s FROM range(1, 21)").collect()
    return ctx


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
        ("SELECT x FROM t WHERE x IN (SELECT length(lpad(s, 5)) FROM t)", "lpad or rpad in a subquery"),
        ("SELECT count(*) FILTER (WHERE lpad(s, 5) > 'a') FROM t", r"in an expression \(AggregateFunction\)"),
        ("SELECT sum(x) OVER (PARTITION BY lpad(s, 1)) FROM t", r"in a plan node \(WindowAggr\)"),
    ],
)
def test_a_call_that_could_build_past_the_cap_is_refused_before_it_runs(
    ctx: SessionContext, sql: str, refusal: str
) -> None:
    with pytest.raises(ValueTooLarge, match=refusal) as refused:
        check_values(sql, ctx.sql(sql), LIMITS)
    assert "LAKE_FLIGHT_MAX_VALUE_BYTES=67108864" in str(refused.value)


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT lpad('x', 16777216) AS r",  # one value of at most 64 MiB
        "SELECT lpad(s, 20, '0') AS r FROM t",
        "SELECT rpad(s, 512) AS r FROM t",
        "SELECT lpad(s, 5) AS r FROM t WHERE lpad(s, 3, 'x') > '1' GROUP BY lpad(s, 5)",
        "SELECT lpad('x', -5) AS r",
        "SELECT 'lpad(' AS r",
    ],
)
def test_calls_within_the_cap_answer_what_datafusion_answers(ctx: SessionContext, sql: str) -> None:
    check_values(sql, ctx.sql(sql), LIMITS)
    assert ctx.sql(sql).to_arrow_table().num_rows >= 1
