"""What a plan node's expressions cost per row, in simple comparisons (``row_costs``): the weight
``join_bounds`` gives a keyless join's pairs."""

from __future__ import annotations

import pytest
from datafusion import SessionContext

from lake_platform.query.row_costs import HEAVY, SEARCHING, STRING, node_cost, text_cost


@pytest.fixture(scope="module")
def ctx() -> SessionContext:
    ctx = SessionContext()
    ctx.sql("CREATE TABLE t AS SELECT value AS x, 'row-' || value AS s FROM generate_series(1, 10)").collect()
    return ctx


def projection_cost(ctx: SessionContext, select: str) -> tuple[int, frozenset[str]]:
    plan = ctx.sql(f"SELECT {select} FROM t").optimized_logical_plan()
    return node_cost(plan)


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
    ],
)
def test_each_call_costs_its_tiers_weight(
    ctx: SessionContext, select: str, cost: int, costly: set[str]
) -> None:
    assert projection_cost(ctx, select) == (cost, frozenset(costly))


def test_an_aggregates_calls_are_costed_from_its_text(ctx: SessionContext) -> None:
    """datafusion-python cannot take an aggregate call apart: its text's calls are costed, the
    aggregate itself as a comparison, a literal's type (``Int64(1)``) not at all."""
    aggregate = ctx.sql("SELECT count(*), max(md5(s)) FROM t").optimized_logical_plan().inputs()[0]
    assert "count(Int64(1))" in aggregate.display()
    assert node_cost(aggregate) == (HEAVY, frozenset({"md5"}))


def test_text_costs_calls_and_operators_but_not_columns_named_after_calls() -> None:
    assert text_cost('levenshtein(a.s, b.s) > Int32(1) AND a.s || Utf8("x") ILIKE b.s') == (
        HEAVY + 2 * STRING,
        frozenset({"levenshtein", "||", "ilike"}),
    )
    assert text_cost("x.md5(a.s) < CAST(b.s AS Utf8View)") == (0, frozenset())
