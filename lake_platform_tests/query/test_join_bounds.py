"""Joins without an equality key refused past ``max_join_pairs`` (issue 44, row 2): DataFusion
cannot stop them once they run, so the work they may do is bounded before they do: the row
pairs they may compare (from a table's rows, table functions' generators, VALUES, ungrouped
aggregates) times what each pair costs (``row_costs``: the condition and what is computed per
row above the join)."""

from __future__ import annotations

import re

import pytest
from datafusion import SessionContext

from lake_platform.query.errors import JoinTooLarge
from lake_platform.query.join_bounds import check_joins
from lake_platform.query.limits import QueryLimits

LIMITS = QueryLimits(max_join_pairs=10**6, labels={"max_join_pairs": "LAKE_FLIGHT_MAX_JOIN_PAIRS"})


@pytest.fixture(scope="module")
def ctx() -> SessionContext:
    ctx = SessionContext()
    ctx.sql(
        "CREATE TABLE t AS SELECT value AS x, 'row-' || value AS s FROM generate_series(1, 2000)"
    ).collect()
    return ctx


def rows_of(fqn: tuple[str, ...]) -> int | None:
    """The tables' rows as the engine counts them: ``t`` has 2000."""
    return 2000 if fqn[-1] == "t" else None


@pytest.mark.parametrize(
    ("sql", "pairs"),
    [
        ("SELECT count(*) FROM t a, t b WHERE a.x < b.x", "up to 4000000"),
        ("SELECT count(*) FROM t a CROSS JOIN t b", "up to 4000000"),
        ("SELECT count(*) FROM t a JOIN t b ON a.x < b.x JOIN t c ON b.x < c.x", "up to 8000000000"),
        ("SELECT count(*) FROM generate_series(1, 200000) a, range(200000) b", "up to 40000400001"),
        ("SELECT count(*) FROM t a, range(1, 1000) b", "up to 2000000"),
        ("SELECT count(*) FROM t a, unnest([1, 2]) b", "an unknown number of"),
        ("SELECT count(*) FROM t a, other b", "an unknown number of"),
    ],
)
def test_a_keyless_join_past_the_bound_is_refused_naming_the_setting(
    ctx: SessionContext, sql: str, pairs: str
) -> None:
    ctx.sql("CREATE TABLE IF NOT EXISTS other AS SELECT 1 AS y").collect()
    refusal = f"compare {pairs} row pairs, more than LAKE_FLIGHT_MAX_JOIN_PAIRS=1000000"
    with pytest.raises(JoinTooLarge, match=refusal):
        check_joins(ctx.sql(sql), rows_of, LIMITS)


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT count(*) FROM t a JOIN t b ON a.x = b.x",  # hash joins stop: not bounded
        "SELECT count(*) FROM t a, t b WHERE a.x = b.x",  # the optimizer makes it an equi-join
        "SELECT count(*) FROM t a, (SELECT max(x) AS m FROM t) b WHERE a.x < b.m",  # one row
        "SELECT count(*) FROM t a, (VALUES (1), (2)) b(v) WHERE a.x > b.v",
        "SELECT count(*) FROM t a, generate_series(1, 500) b WHERE a.x > b.value",  # 10^6
        "SELECT count(*) FROM t",
    ],
)
def test_joins_that_can_be_stopped_or_are_small_are_planned(ctx: SessionContext, sql: str) -> None:
    check_joins(ctx.sql(sql), rows_of, LIMITS)


@pytest.mark.parametrize(
    ("sql", "cost"),
    [
        # 200,000 pairs: well under the bound with a comparison (planned below), not with md5 of each
        (
            "SELECT count(*) FROM t a, generate_series(1, 100) b WHERE md5(a.s || b.value) < '1'",
            "70 simple comparisons each (md5, ||)",
        ),
        # a pattern that is not a literal is compiled for every row: 15 us a pair, measured
        (
            "SELECT count(*) FROM t a, range(100) b WHERE regexp_like(a.s, b.value::varchar)",
            "8211 simple comparisons each (~, ~ compiling its pattern per row)",
        ),
        # computed once per row the join produces, in the loop that reads it: as costly as a condition
        ("SELECT max(md5(a.s)) FROM t a CROSS JOIN range(100) b", "65 simple comparisons each (md5)"),
        (
            "SELECT a.x FROM t a, range(100) b WHERE a.x < b.value ORDER BY sha256(a.s) LIMIT 3",
            "65 simple comparisons each (sha256)",
        ),
    ],
)
def test_a_keyless_join_whose_pairs_cost_more_than_a_comparison_is_weighed_by_their_cost(
    ctx: SessionContext, sql: str, cost: str
) -> None:
    with pytest.raises(JoinTooLarge, match=rf"compare up to \d+ row pairs at the cost of {re.escape(cost)}"):
        check_joins(ctx.sql(sql), rows_of, LIMITS)


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT count(*) FROM t a, generate_series(1, 100) b WHERE a.s < b.value::varchar",  # 2 each
        "SELECT count(*) FROM (SELECT md5(s) AS m FROM t) a, range(100) b WHERE a.m < b.value::varchar",
        "SELECT count(*) FROM t a, (VALUES ('x'), ('y')) b(v) WHERE md5(a.s || b.v) < '1'",  # 4,000 pairs
        "SELECT md5(a.s || b.s) FROM t a JOIN t b ON a.x = b.x",  # hash joins stop: not bounded
        "SELECT md5(max(a.s)) FROM t a, range(100) b",  # md5 once, of the aggregate
    ],
)
def test_a_costly_computation_outside_the_pairs_or_over_few_pairs_is_planned(
    ctx: SessionContext, sql: str
) -> None:
    check_joins(ctx.sql(sql), rows_of, LIMITS)


def test_zero_turns_the_bound_off(ctx: SessionContext) -> None:
    check_joins(ctx.sql("SELECT count(*) FROM t a, t b, t c"), rows_of, QueryLimits(max_join_pairs=0))


def long_strings(fqn: tuple[str, ...]) -> dict[str, float]:
    """The tables' columns' sizes as the engine reads them from Lance: ``t.s`` averages 10,000
    bytes."""
    return {"x": 8.0, "s": 10000.0} if fqn[-1] == "t" else {}


@pytest.mark.parametrize(
    ("sql", "refusal"),
    [
        # 20,000 pairs: planned over short strings (below), not over 10,000-byte ones
        (
            "SELECT count(*) FROM t a, range(5) b WHERE md5(a.s || b.value::varchar) < '1'",
            "up to 12000 row pairs at the cost of 7295 simple comparisons each (md5, || over strings "
            "of up to 10000 bytes), 87540000 in all",
        ),
        # through a subquery's alias and a projection that builds a longer string
        (
            "SELECT count(*) FROM (SELECT s || s AS d FROM t) a, range(5) b "
            "WHERE sha256(a.d) > b.value::varchar",
            "at the cost of 13338 simple comparisons each (sha256 over strings of up to 20000 bytes)",
        ),
        # computed per row above the join (an aggregate's call: over the columns its text names)
        (
            "SELECT max(upper(a.s || 'x')) FROM t a, range(50) b WHERE a.x < b.value",
            "at the cost of 1251 simple comparisons each (upper, || over strings of up to 10000 bytes)",
        ),
    ],
)
def test_a_call_over_long_strings_costs_its_bytes(ctx: SessionContext, sql: str, refusal: str) -> None:
    with pytest.raises(JoinTooLarge, match=re.escape(refusal)):
        check_joins(ctx.sql(sql), rows_of, LIMITS, long_strings)
    check_joins(ctx.sql(sql), rows_of, LIMITS)  # short strings: within the bound


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT count(*) FROM t a, range(100) b WHERE a.s < b.value::varchar",  # a comparison reads no more
        "SELECT count(*) FROM (SELECT md5(s) AS m FROM t) a, range(100) b WHERE upper(a.m) < 'x'",  # 64 bytes
    ],
)
def test_long_strings_read_outside_the_pairs_or_by_calls_that_do_not_scan_them_are_planned(
    ctx: SessionContext, sql: str
) -> None:
    check_joins(ctx.sql(sql), rows_of, LIMITS, long_strings)


def test_sizes_are_asked_only_for_a_keyless_join_within_the_bound(ctx: SessionContext) -> None:
    """A plan without a keyless join, or with one refused over short strings already, needs no
    statistics: Lance is not asked."""
    asked: list[tuple[str, ...]] = []

    def sizes_of(fqn: tuple[str, ...]) -> dict[str, float]:
        asked.append(fqn)
        return long_strings(fqn)

    check_joins(ctx.sql("SELECT md5(s) FROM t WHERE x = 5"), rows_of, LIMITS, sizes_of)
    check_joins(ctx.sql("SELECT md5(a.s) FROM t a JOIN t b ON a.x = b.x"), rows_of, LIMITS, sizes_of)
    with pytest.raises(JoinTooLarge):
        check_joins(ctx.sql("SELECT count(*) FROM t a, t b WHERE a.x < b.x"), rows_of, LIMITS, sizes_of)
    assert asked == []
    check_joins(
        ctx.sql("SELECT count(*) FROM t a, range(10) b WHERE a.x < b.value"), rows_of, LIMITS, sizes_of
    )
    assert ("t",) in asked


def test_a_condition_of_hundreds_of_terms_is_weighed(ctx: SessionContext) -> None:
    """A chain of 600 ORs is deeper than Python's recursion allows a recursive walk: weighed
    without one."""
    condition = " OR ".join(f"a.x + b.value = {i}" for i in range(600))
    sql = f"SELECT count(*) FROM t a, range(5) b WHERE {condition}"
    check_joins(ctx.sql(sql), rows_of, QueryLimits(max_join_pairs=10**9), long_strings)
