"""What a plan node's expressions cost per row, in simple comparisons (``row_costs``): the weight
``join_bounds`` gives a keyless join's pairs, scaled by the bytes a call reads."""

from __future__ import annotations

import pytest
from datafusion import SessionContext

from lake_platform.query.row_costs import (
    COMPILED_PATTERN,
    HEAVY,
    SEARCHING,
    STRING,
    Cost,
    node_cost,
    text_cost,
)


@pytest.fixture(scope="module")
def ctx() -> SessionContext:
    ctx = SessionContext()
    ctx.sql("CREATE TABLE t AS SELECT value AS x, 'row-' || value AS s FROM generate_series(1, 10)").collect()
    return ctx


def projection_cost(ctx: SessionContext, select: str, sizes: dict[str, float] | None = None) -> Cost:
    plan = ctx.sql(f"SELECT {select} FROM t").optimized_logical_plan()
    return node_cost(plan, None if sizes is None else lambda _, name: sizes.get(name, 0.0))


@pytest.mark.parametrize(
    ("select", "cost", "costly"),
    [
        ("x + 1 > 2 AND x < 5", 0, set()),  # operators cost no more than the comparison counted once
        ("md5(s) AS h", HEAVY, {"md5"}),  # an alias is its expression
        ("sha512(s || 'x')", HEAVY + STRING, {"sha512", "||"}),
        ("regexp_replace(s, 'r(o)w', 'x')", SEARCHING, {"regexp_replace"}),
        ("s NOT SIMILAR TO 'r%'", SEARCHING, {"not similar to"}),
        ("s ~* '^R.W-[0-9]+$'", SEARCHING, {"~*"}),
        ("upper(s) LIKE 'R%'", 2 * STRING, {"upper", "like"}),
        ("abs(x)", 1, set()),  # any other call: one comparison's worth
        # a pattern that is not a literal is compiled for every row
        (
            "regexp_like('row-1', s)",
            SEARCHING + COMPILED_PATTERN,
            {"~", "~ compiling its pattern per row"},  # DataFusion plans regexp_like as ~
        ),
        (
            "s ~ ('^' || s)",
            SEARCHING + STRING + COMPILED_PATTERN,
            {"~", "||", "~ compiling its pattern per row"},
        ),
    ],
)
def test_each_call_costs_its_tiers_weight(
    ctx: SessionContext, select: str, cost: int, costly: set[str]
) -> None:
    assert projection_cost(ctx, select) == Cost(cost, frozenset(costly))


@pytest.mark.parametrize(
    ("select", "cost"),
    [
        # md5 reads 3,001 bytes at 2/3 a byte, || 3,001 at 1/16
        ("md5(s || 'x') AS h", 2001 + 188),
        ("md5(md5(s))", 2000 + HEAVY),  # the inner hash reads the string, the outer 64 bytes
        ("regexp_like(s, 'r.*w')", 3004),  # a regular expression 1 a byte, its pattern's too
        ("upper(s) LIKE 'R%'", 188 + 188),  # upper's result is as long as s
        # every byte of one string with every byte of the other (a short one counts as 8 bytes)
        ("levenshtein(s, 'abc')", 3000 * 8 // 2),
        ("md5(repeat(s, 2))", 4000 + 3008),  # repeat reads 3,008 bytes (its count's 8) and makes 6,000
        ("md5(CAST(x AS VARCHAR))", HEAVY + 1),  # a number's text is short
        ("abs(x)", 1),  # no string read: the call's weight
    ],
)
def test_a_call_over_long_strings_costs_its_bytes_at_its_tiers_rate(
    ctx: SessionContext, select: str, cost: int
) -> None:
    """``s`` averages 3,000 bytes, ``x`` 8."""
    assert projection_cost(ctx, select, {"s": 3000.0, "x": 8.0}).units == cost


def test_the_longest_string_a_costly_call_reads_is_named(ctx: SessionContext) -> None:
    cost = projection_cost(ctx, "md5(s || s) < 'a' AND upper(s) > 'b'", {"s": 3000.0})
    assert cost == Cost(4000 + 375 + 188, frozenset({"md5", "||", "upper"}), 6000)


def test_an_aggregates_calls_are_costed_from_its_text(ctx: SessionContext) -> None:
    """datafusion-python cannot take an aggregate call apart: its text's calls are costed, the
    aggregate itself as a comparison, a literal's type (``Int64(1)``) not at all; over the
    columns its text names."""
    aggregate = ctx.sql("SELECT count(*), max(md5(s)) FROM t").optimized_logical_plan().inputs()[0]
    assert "count(Int64(1))" in aggregate.display()
    assert node_cost(aggregate) == Cost(HEAVY, frozenset({"md5"}))
    assert node_cost(aggregate, lambda _, name: 3000.0 if name == "s" else 0.0).units == 2000


def test_text_costs_calls_and_operators_but_not_columns_named_after_calls() -> None:
    assert text_cost('levenshtein(a.s, b.s) > Int32(1) AND a.s || Utf8("x") ILIKE b.s') == Cost(
        HEAVY + 2 * STRING, frozenset({"levenshtein", "||", "ilike"})
    )
    assert text_cost("x.md5(a.s) < CAST(b.s AS Utf8View)") == Cost()
