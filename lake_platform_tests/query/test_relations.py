"""What ``query.relations`` counts, and that 0 lifts the bound (the refusal over the wire:
``flight/test_wide_plans.py``)."""

from __future__ import annotations

import pytest
from datafusion import SessionContext

from lake_platform.query.errors import RelationsTooMany
from lake_platform.query.limits import QueryLimits
from lake_platform.query.relations import check_relations, count_relations

SHAPES = {
    "SELECT 1": 1,
    "SELECT 1 UNION ALL SELECT 2 UNION ALL SELECT 3": 3,
    "SELECT * FROM (VALUES (1), (2)) a, (SELECT 1) b, generate_series(1, 3) c": 3,
    "WITH RECURSIVE r AS (SELECT 1 AS n UNION ALL SELECT n + 1 FROM r WHERE n < 3) SELECT * FROM r": 2,
    "SELECT 1 AS a WHERE 1 IN (SELECT 1)": 1,  # a subquery in an expression is opaque
}


@pytest.mark.parametrize(("sql", "relations"), SHAPES.items(), ids=range(len(SHAPES)))
def test_relations_are_the_leaves_of_the_unoptimized_plan(sql: str, relations: int) -> None:
    assert count_relations(SessionContext().sql(sql).logical_plan()) == relations


def test_the_bound_names_its_label_and_zero_lifts_it() -> None:
    df = SessionContext().sql(" UNION ALL ".join(["SELECT 1 AS a"] * 5))
    check_relations(df, QueryLimits(max_relations=5))
    check_relations(df, QueryLimits(max_relations=0))
    with pytest.raises(RelationsTooMany, match=r"combines 5 relations .* more than MAX=4"):
        check_relations(df, QueryLimits(max_relations=4, labels={"max_relations": "MAX"}))
