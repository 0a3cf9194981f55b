"""The snapshot cache: cached snapshots answer exactly what Lance answers, a new version is never
served from an older entry, the budget holds (LRU by size; a snapshot larger than the budget is
never admitted), two tenants never share an entry, admission follows the ``cache`` policy, and
query memory pressure makes it give memory back."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pyarrow as pa
import pytest

from lake_platform.catalog.catalog import Catalog
from lake_platform.query.engine import QueryEngine
from lake_platform.query.limits import QueryLimits
from lake_platform.query.snapshot import load_snapshot
from lake_platform_tests.flight.conftest import t_rows

QUERIES = [
    "SELECT * FROM w.ns.hot ORDER BY id",
    "SELECT s, x * 2 AS y FROM w.ns.hot WHERE id % 7 = 3 ORDER BY s",
    "SELECT id % 10 AS k, count(*) AS n, sum(x) AS total FROM w.ns.hot GROUP BY id % 10 ORDER BY k",
    "SELECT a.id FROM w.ns.hot a JOIN w.ns.t b USING (id) WHERE a.id < 50 ORDER BY a.id",
    "SELECT max(s) AS m FROM w.ns.hot WHERE x BETWEEN 10 AND 20",
]


@pytest.fixture(scope="module")
def hot(lake: tuple[Any, Catalog]) -> Catalog:
    catalog = lake[1]
    catalog.tables.create_table("p.w.ns.hot", t_rows(3000).to_reader())
    catalog.policies.set_policy("p.w.ns.hot", {"cache": "hot"})
    catalog.tables.create_table("q.w.ns.hot", pa.table({"id": pa.array([-5], pa.int64())}).to_reader())
    catalog.policies.set_policy("q.w.ns.hot", {"cache": "hot"})
    return catalog


def engine_with(lake: tuple[Any, Catalog], **limits: Any) -> QueryEngine:
    return QueryEngine(lake[0], QueryLimits(memory_limit_bytes=64 << 20, **limits))


@pytest.fixture
def cached(lake: tuple[Any, Catalog], hot: Catalog) -> Iterator[QueryEngine]:
    engine = engine_with(lake, cache_bytes=64 << 20)
    yield engine
    engine.close()


def rows(engine: QueryEngine, sql: str, project: str = "p", catalog: Catalog | None = None) -> pa.Table:
    assert catalog is not None
    view = load_snapshot(catalog.store).project(project)
    planned = engine.plan(sql, view)
    # What DoGet does: plan again against exactly the captured refs, then stream.
    pinned = engine.plan_pinned(planned.sql, planned.refs)
    assert pinned.schema == planned.schema
    return pa.Table.from_batches(list(engine.stream(pinned)), pinned.schema)


def warm(
    engine: QueryEngine, catalog: Catalog, sql: str = "SELECT count(*) FROM w.ns.hot", project: str = "p"
) -> None:
    rows(engine, sql, project, catalog)
    assert engine.cache.wait_idle()


def test_cached_rows_equal_lances(lake: tuple[Any, Catalog], hot: Catalog, cached: QueryEngine) -> None:
    plain = engine_with(lake, cache_bytes=0)
    warm(cached, hot)
    assert cached.cache.stats()["entries"] == 1
    hits = cached.cache.stats()["hits"]
    for sql in QUERIES:
        assert rows(cached, sql, catalog=hot).equals(rows(plain, sql, catalog=hot)), sql
    # planning and DoGet's re-planning both hit
    assert cached.cache.stats()["hits"] >= hits + 2 * len(QUERIES)
    plan = rows(cached, "EXPLAIN SELECT sum(x) FROM w.ns.hot", catalog=hot).column(1).to_pylist()
    assert any("DataSourceExec" in line and "partitions=" in line for line in plan), plan
    assert not any("Lance" in line for line in plan), plan


def test_a_new_version_is_never_served_from_an_older_entry(
    lake: tuple[Any, Catalog], hot: Catalog, cached: QueryEngine
) -> None:
    hot.tables.create_table("p.w.ns.grows", t_rows(10).to_reader())
    hot.policies.set_policy("p.w.ns.grows", {"cache": "hot"})
    warm(cached, hot, "SELECT count(*) FROM w.ns.grows")
    assert rows(cached, "SELECT count(*) AS n FROM w.ns.grows", catalog=hot).column("n")[0].as_py() == 10
    hot.tables.append("p.w.ns.grows", t_rows(5, start=10).to_reader())
    # 15, not the cached 10: the entry of version 1 is not the new version's. (Counting hits here
    # would race the new version's own background load, which planning this query starts.)
    assert rows(cached, "SELECT count(*) AS n FROM w.ns.grows", catalog=hot).column("n")[0].as_py() == 15
    assert cached.cache.wait_idle()
    assert cached.cache.stats()["entries"] == 2  # one entry per version, side by side
    assert rows(cached, "SELECT count(*) AS n FROM w.ns.grows", catalog=hot).column("n")[0].as_py() == 15
    # The old version is still its own entry, for time travel.
    hits = cached.cache.stats()["hits"]
    old = rows(cached, 'SELECT count(*) AS n FROM w.ns."grows@v1"', catalog=hot)
    assert old.column("n")[0].as_py() == 10 and cached.cache.stats()["hits"] > hits


def test_the_budget_holds(lake: tuple[Any, Catalog], hot: Catalog) -> None:
    size = pa.Table.from_batches([b for b in t_rows(3000).to_batches()]).nbytes
    for name in ("b1", "b2", "b3"):
        hot.tables.create_table(f"p.w.ns.{name}", t_rows(3000).to_reader())
        hot.policies.set_policy(f"p.w.ns.{name}", {"cache": "hot"})
    engine = engine_with(lake, cache_bytes=int(size * 2.5))
    try:
        for name in ("b1", "b2", "b3", "b1"):
            warm(engine, hot, f"SELECT count(*) FROM w.ns.{name}")
        stats = engine.cache.stats()
        assert stats["entries"] == 2 and stats["evictions"] >= 1
        assert stats["used_bytes"] <= stats["budget_bytes"] and stats["peak_bytes"] <= stats["budget_bytes"]
    finally:
        engine.close()
    small = engine_with(lake, cache_bytes=size // 2)  # smaller than one snapshot: never admitted
    try:
        for _ in range(3):
            warm(small, hot, "SELECT count(*) FROM w.ns.b1")
        assert small.cache.stats()["entries"] == 0 and small.cache.peak_bytes == 0
        assert rows(small, "SELECT count(*) AS n FROM w.ns.b1", catalog=hot).column("n")[0].as_py() == 3000
    finally:
        small.close()


def test_two_tenants_never_share_an_entry(hot: Catalog, cached: QueryEngine) -> None:
    warm(cached, hot, "SELECT count(*) FROM w.ns.hot", "p")
    assert rows(cached, "SELECT id FROM w.ns.hot", "q", hot).column("id").to_pylist() == [-5]  # q's own
    warm(cached, hot, "SELECT count(*) FROM w.ns.hot", "q")
    assert cached.cache.stats()["entries"] == 2
    assert rows(cached, "SELECT id FROM w.ns.hot", "q", hot).column("id").to_pylist() == [-5]
    assert rows(cached, "SELECT count(*) AS n FROM w.ns.hot", "p", hot).column("n")[0].as_py() == 3000
    # The entries are keyed by each table's own incarnation: a tenant can only form keys of
    # snapshots its own catalog resolves.
    snap = load_snapshot(hot.store)
    refs = {snap.project(p).table("w", "ns", "hot").ref for p in ("p", "q")}
    assert {k[1] for k in cached.cache.keys()} == {r.incarnation for r in refs if r is not None}


def test_admission_follows_the_policy(lake: tuple[Any, Catalog], hot: Catalog) -> None:
    hot.tables.create_table("p.w.ns.auto", t_rows(100).to_reader())
    hot.tables.create_table("p.w.ns.never", t_rows(100).to_reader())
    hot.policies.set_policy("p.w.ns.never", {"cache": "off"})
    engine = engine_with(lake, cache_bytes=64 << 20, cache_admit_after=3)
    try:
        for n in range(1, 5):
            warm(engine, hot, "SELECT count(*) FROM w.ns.auto")
            warm(engine, hot, "SELECT count(*) FROM w.ns.never")
            assert engine.cache.stats()["entries"] == (1 if n >= 3 else 0)
    finally:
        engine.close()


def test_memory_pressure_gives_memory_back(hot: Catalog, cached: QueryEngine) -> None:
    warm(cached, hot)
    held = cached.cache.stats()["used_bytes"]
    assert held > 0
    cached.cache.pressure()
    assert cached.cache.stats()["used_bytes"] <= held // 2
    rows(cached, "SELECT count(*) FROM w.ns.hot", catalog=hot)
    assert cached.cache.wait_idle() and cached.cache.stats()["entries"] == 0  # nothing admitted meanwhile


# -- kept plans (query.plans) and the cache ---------------------------------------------------

KEPT = "SELECT id % 10 AS k, count(*) AS n FROM w.ns.hot GROUP BY id % 10 ORDER BY k"


def test_a_plan_kept_before_the_load_is_not_reused_after_it(
    lake: tuple[Any, Catalog], hot: Catalog, cached: QueryEngine
) -> None:
    """The first query of a hot table is planned on Lance (a miss starts the load) and kept;
    once the snapshot is loaded, the same query by the same principal runs on the cached
    batches rather than on the kept Lance plan, for as long as that plan would be kept."""
    view = load_snapshot(hot.store).project("p")
    first = cached.plan(KEPT, view, scope="alice")
    assert not first.cached
    assert cached.cache.wait_idle() and cached.cache.stats()["entries"] == 1
    again = cached.plan(KEPT, view, scope="alice")
    assert again is not first and again.cached
    pinned = cached.plan_pinned(first.sql, first.refs, scope="alice")  # DoGet of the first ticket
    assert pinned.cached
    assert pa.Table.from_batches(list(cached.stream(pinned)), pinned.schema).equals(
        pa.Table.from_batches(list(cached.stream(first)), first.schema)
    )


def test_a_plan_over_cached_batches_is_planned_once(
    lake: tuple[Any, Catalog], hot: Catalog, cached: QueryEngine
) -> None:
    warm(cached, hot)
    view = load_snapshot(hot.store).project("p")
    planned = cached.plan(KEPT, view, scope="alice")
    assert planned.cached
    cached.remember("alice", planned, None)  # GetFlightInfo keeps it for DoGet
    hits = cached.cache.stats()["hits"]
    assert cached.plan(KEPT, view, scope="alice") is planned  # GetFlightInfo of the prepared statement
    assert cached.plan_pinned(planned.sql, planned.refs, scope="alice") is planned  # DoGet
    assert cached.cache.stats()["hits"] == hits  # nothing planned again
    # Never across principals: another scope plans its own.
    other = cached.plan(KEPT, view, scope="bob")
    assert other is not planned and other.cached
    assert cached.plan_pinned(planned.sql, planned.refs, scope="bob") is not planned


@pytest.mark.parametrize("evict", ["clear", "pressure"])
def test_an_eviction_drops_the_plans_that_hold_cached_batches(
    lake: tuple[Any, Catalog], hot: Catalog, cached: QueryEngine, evict: str
) -> None:
    """A kept plan references the entry's in-memory table: kept past an eviction, it would hold
    the batches beyond the cache's budget."""
    warm(cached, hot)
    view = load_snapshot(hot.store).project("p")
    planned = cached.plan(KEPT, view, scope="alice")
    cached.remember("alice", planned, None)
    lance = cached.plan("SELECT count(*) AS n FROM w.ns.t", view, scope="alice")  # not cached
    assert planned.cached and not lance.cached and len(cached.plans) == 3
    getattr(cached.cache, evict)()
    assert cached.cache.stats()["entries"] == 0
    assert len(cached.plans) == 1  # only the plan on Lance's provider is still kept
    again = cached.plan(KEPT, view, scope="alice")
    assert again is not planned and not again.cached  # the entry is gone: planned on Lance
