"""What a plan's structure says (``query/facts.py``): whether its order is part of the answer,
whether it is a point query, a row-wise read of one table (what may be split) or rows of its
tables (what may be spooled); each worked out once per plan."""

from __future__ import annotations

from typing import Any

import pytest

from lake_platform.catalog.catalog import Catalog
from lake_platform.query.engine import QueryEngine
from lake_platform.query.facts import PlanFacts
from lake_platform.query.snapshot import load_snapshot


@pytest.fixture(scope="module")
def engine(lake: tuple[Any, Catalog]) -> QueryEngine:
    return QueryEngine(lake[0])


def facts(engine: QueryEngine, lake: tuple[Any, Catalog], sql: str) -> PlanFacts:
    return engine.plan(sql, load_snapshot(lake[1].store).project("p")).facts


@pytest.mark.parametrize(
    ("sql", "ordered", "point", "row_wise", "table_rows"),
    [
        ("SELECT id, s FROM w.ns.t", False, False, True, True),
        ("SELECT id FROM w.ns.t WHERE x > 3", False, False, True, True),
        ("SELECT id FROM w.ns.t WHERE id = 5", False, True, False, False),  # a key lookup: few rows
        ("SELECT id FROM w.ns.t WHERE id IN (5, 6)", False, True, False, False),
        ("SELECT id FROM w.ns.t WHERE id = 5 OR id = 6", False, True, False, False),
        ("SELECT id FROM w.ns.t WHERE abs(id) = 5", False, False, True, True),  # a function: no lookup
        ("SELECT id FROM w.ns.t WHERE abs(id) = 5 OR id = 6", False, False, True, True),
        ("SELECT id FROM w.ns.t ORDER BY id", True, False, False, True),
        ("SELECT id FROM w.ns.t ORDER BY id LIMIT 5", True, False, False, False),  # a top-n: the sort's fetch
        ("SELECT id FROM w.ns.t LIMIT 5", False, False, False, False),  # the scan's fetch
        ("SELECT id FROM (SELECT id FROM w.ns.t ORDER BY x DESC LIMIT 3) AS top", True, False, False, False),
        ("SELECT s, x FROM w.ns.t ORDER BY x", True, False, False, True),  # a full sort: every row
        ("SELECT count(*) AS n FROM w.ns.t", False, False, False, False),
        ("SELECT DISTINCT s FROM w.ns.t", False, False, False, False),
        ("SELECT a.id FROM w.ns.t a JOIN w.ns.multi b ON a.id = b.id", False, False, False, True),
    ],
)
def test_what_a_plan_says(
    engine: QueryEngine,
    lake: tuple[Any, Catalog],
    sql: str,
    ordered: bool,
    point: bool,
    row_wise: bool,
    table_rows: bool,
) -> None:
    found = facts(engine, lake, sql)
    assert (found.ordered, found.point, found.row_wise, found.table_rows) == (
        ordered,
        point,
        row_wise,
        table_rows,
    )


class _Frame:
    """A DataFusion frame that counts how often its plans are asked for."""

    def __init__(self, df: Any) -> None:
        self.df = df
        self.asked = 0

    def logical_plan(self) -> Any:
        self.asked += 1
        return self.df.logical_plan()

    def optimized_logical_plan(self) -> Any:
        self.asked += 1
        return self.df.optimized_logical_plan()


def test_each_fact_is_worked_out_once(engine: QueryEngine, lake: tuple[Any, Catalog]) -> None:
    planned = engine.plan("SELECT id FROM w.ns.t WHERE x > 3", load_snapshot(lake[1].store).project("p"))
    frame = _Frame(planned.df)
    once = PlanFacts(frame)
    for _ in range(3):
        assert not once.ordered and not once.point and once.row_wise and once.table_rows
    assert frame.asked == 4
