"""The access path of a cached snapshot: a key lookup on an indexed column reads Lance's scalar
index instead of the cached batches, with the same rows; anything else still reads the cache;
the choice is made per exact snapshot (a new version, an older pinned version, another tenant's
table of the same name each get their own)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pyarrow as pa
import pytest
from datafusion import SessionContext

from lake_platform.catalog.catalog import Catalog
from lake_platform.query.access import lookup_columns
from lake_platform.query.engine import QueryEngine
from lake_platform.query.limits import QueryLimits
from lake_platform.query.snapshot import load_snapshot
from lake_platform_tests.flight.conftest import t_rows

POINT = "SELECT id, s FROM w.ns.keyed WHERE id = {}"


@pytest.fixture(scope="module")
def keyed(lake: tuple[Any, Catalog]) -> Catalog:
    catalog = lake[1]
    for project, start in (("p", 0), ("q", 10_000)):
        catalog.tables.create_table(f"{project}.w.ns.keyed", t_rows(3000, start=start).to_reader())
        catalog.policies.set_policy(f"{project}.w.ns.keyed", {"cache": "hot"})
    catalog.indexes.create_index("p.w.ns.keyed", "id", "btree")
    return catalog


@pytest.fixture
def engine(lake: tuple[Any, Catalog], keyed: Catalog) -> Iterator[QueryEngine]:
    engine = QueryEngine(lake[0], QueryLimits(memory_limit_bytes=64 << 20, cache_bytes=64 << 20))
    yield engine
    engine.close()


def run(engine: QueryEngine, catalog: Catalog, sql: str, project: str = "p") -> tuple[pa.Table, Any]:
    """Plan as GetFlightInfo does, then plan the pinned refs and stream as DoGet does."""
    planned = engine.plan(sql, load_snapshot(catalog.store).project(project))
    pinned = engine.plan_pinned(planned.sql, planned.refs)
    assert pinned.schema == planned.schema
    return pa.Table.from_batches(list(engine.stream(pinned)), pinned.schema), planned


def warm(engine: QueryEngine, catalog: Catalog, project: str = "p") -> None:
    run(engine, catalog, "SELECT count(*) FROM w.ns.keyed", project)
    assert engine.cache.wait_idle()
    assert engine.cache.get(*_ref_schema(engine, catalog, project)) is not None


def _ref_schema(engine: QueryEngine, catalog: Catalog, project: str) -> tuple[Any, pa.Schema]:
    planned = engine.plan("SELECT * FROM w.ns.keyed", load_snapshot(catalog.store).project(project))
    return planned.refs[0], engine.dataset(planned.refs[0]).schema


def explain(engine: QueryEngine, catalog: Catalog, sql: str, project: str = "p") -> str:
    table, _ = run(engine, catalog, f"EXPLAIN {sql}", project)
    return "\n".join(table.column(1).to_pylist())


def test_a_point_query_on_an_indexed_cached_table_reads_the_index(
    engine: QueryEngine, keyed: Catalog
) -> None:
    warm(engine, keyed)
    plan = explain(engine, keyed, POINT.format(1234))
    assert "ScalarIndexExec" in plan and "DataSourceExec" not in plan, plan
    before = engine.index_lookups
    rows, _ = run(engine, keyed, POINT.format(1234))
    assert rows.to_pylist() == [{"id": 1234, "s": "row-1234"}]
    assert engine.index_lookups == before + 2  # GetFlightInfo's planning and DoGet's
    rows, _ = run(engine, keyed, "SELECT id FROM w.ns.keyed WHERE id IN (3, 2999, 5000) ORDER BY id")
    assert rows.column("id").to_pylist() == [3, 2999]
    # Anything else is still answered from the cache.
    plan = explain(engine, keyed, "SELECT sum(x) FROM w.ns.keyed")
    assert "DataSourceExec" in plan and "Lance" not in plan and "ScalarIndex" not in plan, plan
    plan = explain(engine, keyed, "SELECT id FROM w.ns.keyed WHERE x = 5.0")  # x has no index
    assert "DataSourceExec" in plan and "ScalarIndex" not in plan, plan


def test_an_unindexed_tenants_table_of_the_same_name_stays_cached(
    engine: QueryEngine, keyed: Catalog
) -> None:
    warm(engine, keyed, "q")
    warm(engine, keyed, "p")
    plan = explain(engine, keyed, POINT.format(10_005), "q")
    assert "DataSourceExec" in plan and "ScalarIndex" not in plan, plan
    rows, _ = run(engine, keyed, POINT.format(10_005), "q")
    assert rows.to_pylist() == [{"id": 10_005, "s": "row-10005"}]
    rows, _ = run(engine, keyed, POINT.format(10_005), "p")  # p's table has no such row
    assert rows.num_rows == 0


def test_a_new_version_is_found_and_a_pinned_one_still_reads_its_rows(
    lake: tuple[Any, Catalog], engine: QueryEngine
) -> None:
    catalog = lake[1]
    catalog.tables.create_table("p.w.ns.grows", t_rows(100).to_reader())
    catalog.policies.set_policy("p.w.ns.grows", {"cache": "hot"})
    catalog.indexes.create_index("p.w.ns.grows", "id", "btree")
    sql = "SELECT id, s FROM w.ns.grows WHERE id = 150"
    run(engine, catalog, "SELECT count(*) FROM w.ns.grows")
    assert engine.cache.wait_idle()
    rows, v1 = run(engine, catalog, sql)
    assert rows.num_rows == 0
    catalog.tables.append("p.w.ns.grows", t_rows(100, start=100).to_reader())  # not in the index yet
    rows, v2 = run(engine, catalog, sql)
    assert rows.to_pylist() == [{"id": 150, "s": "row-150"}]
    assert v2.refs[0].version > v1.refs[0].version
    # A ticket pinned to the first version still reads it (cached or through its index).
    old = engine.plan_pinned(v1.sql, v1.refs)
    assert pa.Table.from_batches(list(engine.stream(old)), old.schema).num_rows == 0
    assert engine.cache.wait_idle()
    rows, _ = run(engine, catalog, sql)  # the new version, cached now: still through the index
    assert rows.to_pylist() == [{"id": 150, "s": "row-150"}]


def _plan(sql: str) -> Any:
    ctx = SessionContext()
    ctx.register_record_batches("t", [[pa.record_batch({"a": [1], "b": [2], "c": ["x"]})]])
    return ctx.sql(sql).logical_plan()


@pytest.mark.parametrize(
    ("where", "expected"),
    [
        ("a = 1", [{"a"}]),
        ("1 = a AND b > 2", [{"a"}]),
        ("a IN (1, 2)", [{"a"}]),
        ("a = 1 OR b = 2", [{"a", "b"}]),
        ("CAST(a AS BIGINT) = 3 AND c = 'x'", [{"a"}, {"c"}]),
        ("a > 1", []),
        ("a NOT IN (1, 2)", []),
        ("a = 1 OR b > 2", []),
        ("a = b", []),
        # a function call: no lookup (DataFusion's Python binding cannot convert one)
        ("abs(a) = 1", []),
        ("abs(a) = 1 AND c = 'x'", [{"c"}]),
        ("abs(a) IN (1, 2)", [set()]),
    ],
)
def test_lookup_columns(where: str, expected: list[set[str]]) -> None:
    assert sorted(map(sorted, lookup_columns(_plan(f"SELECT * FROM t WHERE {where}")))) == sorted(
        map(sorted, expected)
    )


def test_index_lookups_do_not_count_toward_caching_a_snapshot(
    lake: tuple[Any, Catalog], keyed: Catalog
) -> None:
    catalog = lake[1]
    catalog.tables.create_table("p.w.ns.looked", t_rows(500).to_reader())  # cache=auto (the default)
    catalog.indexes.create_index("p.w.ns.looked", "id", "btree")
    engine = QueryEngine(
        lake[0], QueryLimits(memory_limit_bytes=64 << 20, cache_bytes=64 << 20, cache_admit_after=2)
    )
    try:
        for i in range(5):
            run(engine, catalog, f"SELECT s FROM w.ns.looked WHERE id = {i}")
        assert engine.cache.wait_idle()
        assert engine.cache.stats()["entries"] == 0 and engine.cache.stats()["loads"] == 0
        for _ in range(2):  # an aggregate reads the whole table: it counts
            run(engine, catalog, "SELECT sum(x) FROM w.ns.looked")
        assert engine.cache.wait_idle()
        assert engine.cache.stats()["loads"] == 1
    finally:
        engine.close()
