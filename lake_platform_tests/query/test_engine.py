"""The query layer on its own: spilling under a small memory pool, pinned refs, clean errors."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest

from lake_platform.catalog.catalog import Catalog
from lake_platform.errors import InvalidInput, TableVersionNotFound
from lake_platform.query.engine import QueryEngine
from lake_platform.query.errors import JoinTooLarge
from lake_platform.query.limits import QueryLimits
from lake_platform.query.snapshot import load_snapshot


def test_sort_larger_than_the_pool_spills_and_succeeds(lake: tuple[Any, Catalog], tmp_path: Path) -> None:
    settings, _ = lake
    spill = tmp_path / "spill"
    engine = QueryEngine(
        settings, QueryLimits(memory_limit_bytes=16 << 20, spill_dir=spill, target_partitions=1)
    )
    view = load_snapshot(_store(lake)).project("p")
    planned = engine.plan("SELECT value FROM generate_series(1, 3000000) ORDER BY value DESC", view)
    first = None
    rows = 0
    for batch in engine.stream(planned):
        first = first if first is not None else batch.column(0)[0].as_py()
        rows += batch.num_rows
    # 24 MB of sort input through a 16 MiB pool: only possible by spilling to the spill folder.
    assert rows == 3_000_000 and first == 3_000_000
    assert spill.is_dir()


def test_pinned_refs_only_and_gone_versions_fail(lake: tuple[Any, Catalog]) -> None:
    settings, _ = lake
    engine = QueryEngine(settings, QueryLimits(dataset_cache_size=0))
    view = load_snapshot(_store(lake)).project("p")
    planned = engine.plan("SELECT count(*) AS n FROM w.ns.t", view)
    (ref,) = planned.refs
    assert ref.name == "p.w.ns.t" and ref.version == 1
    with pytest.raises(InvalidInput, match="does not pin"):
        engine.plan_pinned("SELECT count(*) FROM w.ns.multi", planned.refs)
    # A purged incarnation: its location no longer exists.
    gone = dataclasses.replace(
        ref,
        location=ref.location + "-purged",
        manifest_path=ref.manifest_path.replace(".lance/", ".lance-purged/"),
    )
    with pytest.raises(TableVersionNotFound):
        engine.plan_pinned("SELECT count(*) AS n FROM w.ns.t", (gone,))
    with pytest.raises(InvalidInput, match="do not match"):
        engine.plan_pinned("SELECT 1", planned.refs)


def test_prepared_planning_leaves_parameters_unbound(lake: tuple[Any, Catalog]) -> None:
    settings, _ = lake
    engine = QueryEngine(settings)
    view = load_snapshot(_store(lake)).project("p")
    planned = engine.plan("SELECT id FROM w.ns.t WHERE id = ? OR s = ?", view, prepare=True)
    assert planned.parameters == 2 and planned.schema.names == ["id"]
    with pytest.raises(InvalidInput, match="2 parameter"):
        engine.plan("SELECT id FROM w.ns.t WHERE id = ? OR s = ?", view)


def test_a_prepared_statement_with_placeholders_is_planned_once_unbound(lake: tuple[Any, Catalog]) -> None:
    """A new prepared statement per execution (JDBC, a new ADBC cursor): its unbound plan is
    kept for the same principal and view, and never answers a call that binds nothing."""
    settings, _ = lake
    engine = QueryEngine(settings)
    view = load_snapshot(_store(lake)).project("p")
    sql = "SELECT id FROM w.ns.t WHERE id = ? OR s = ?"
    first = engine.plan(sql, view, prepare=True, scope="alice")
    assert engine.plan(sql, view, prepare=True, scope="alice") is first and engine.work.plannings == 1
    assert engine.plan(sql, view, prepare=True, scope="bob") is not first  # another principal
    with pytest.raises(InvalidInput, match="2 parameter"):  # planned, and refused as before
        engine.plan(sql, view, scope="alice")
    assert engine.work.plannings == 2  # that refusal comes before planning takes a context


def _store(lake: tuple[Any, Catalog]) -> Any:
    return lake[1].store


def test_a_keyless_join_is_bounded_by_its_tables_row_counts(lake: tuple[Any, Catalog]) -> None:
    """``w.ns.t`` has 1000 rows (Lance's count): two of it compare 10^6 pairs, three 10^9, past
    the default bound (``join_bounds``); planning pinned refs is bounded the same way."""
    settings, _ = lake
    engine = QueryEngine(settings)
    view = load_snapshot(_store(lake)).project("p")
    two = "SELECT count(*) AS n FROM w.ns.t a, w.ns.t b WHERE a.id < b.id"
    planned = engine.plan(two, view)
    assert [b.column(0)[0].as_py() for b in engine.stream(planned)] == [1000 * 999 // 2]
    three = "SELECT count(*) AS n FROM w.ns.t a, w.ns.t b, w.ns.t c WHERE a.id < b.id AND b.id < c.id"
    with pytest.raises(JoinTooLarge, match="up to 1000000000 row pairs, more than max_join_pairs=100000000"):
        engine.plan(three, view)
    with pytest.raises(JoinTooLarge):
        engine.plan_pinned(three, planned.refs)


def test_a_kept_plan_a_cache_load_made_stale_is_planned_again_not_a_hit(lake: tuple[Any, Catalog]) -> None:
    """``lake_query_plan_hits_total`` counts the plans answered from the plan cache: a kept one
    planned before the snapshot cache loaded its table is planned again (to read the cached
    batches), and is no hit."""
    settings, _ = lake
    engine = QueryEngine(settings, QueryLimits(cache_bytes=64 << 20, cache_admit_after=1))
    view = load_snapshot(_store(lake)).project("p")
    sql = "SELECT sum(id) AS n FROM w.ns.sub.u"
    engine.plan(sql, view, scope="alice")  # planned on Lance's provider; the table loads
    assert engine.cache.wait_idle() and engine.cache.stats()["entries"] == 1
    engine.plan(sql, view, scope="alice")
    assert engine.work.plannings == 2 and engine.plans.stats()["hits"] == 0
    engine.plan(sql, view, scope="alice")  # now kept over the cached batches
    assert engine.work.plannings == 2 and engine.plans.stats()["hits"] == 1


def test_integer_arithmetic_wraps_on_overflow_and_a_decimal_cast_is_exact(lake: tuple[Any, Catalog]) -> None:
    """DataFusion's integer +, -, * and sum wrap silently (no setting, ANSI mode included, makes
    them fail): docs/flight-sql.md says so and what to write instead. Fails if DataFusion changes
    it, and the docs with it."""
    settings, _ = lake
    engine = QueryEngine(settings, QueryLimits(memory_limit_bytes=64 << 20))
    view = load_snapshot(_store(lake)).project("p")

    def value(sql: str) -> Any:
        planned = engine.plan(sql, view)
        return next(b for b in engine.stream(planned) if b.num_rows).column(0)[0].as_py()

    assert value("SELECT 9223372036854775807 + 1 AS v") == -(2**63)
    assert value("SELECT sum(id * 4611686018427387904) AS v FROM w.ns.t WHERE id < 4") == -(
        2**63
    )  # 6 * 2**62 mod 2**64
    assert value("SELECT CAST(9223372036854775807 AS DECIMAL(38, 0)) + 1 AS v") == 2**63
    exact = "SELECT sum(CAST(id AS DECIMAL(38, 0)) * 4611686018427387904) AS v FROM w.ns.t WHERE id < 4"
    assert value(exact) == 6 * 2**62
