"""Complete reference extraction: planning through the request-local catalog captures exactly the
tables a query reads (joins, subqueries, CTEs, CTE names shadowing a real table's name, UNION,
EXPLAIN), each once, and re-planning against the captured snapshots alone reproduces the same
set (what DoGet checks)."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from lake_platform.catalog.catalog import Catalog
from lake_platform.errors import InvalidInput, TableNotFound, TableVersionNotFound
from lake_platform.query.engine import QueryEngine
from lake_platform.query.limits import QueryLimits
from lake_platform.query.providers import canonical_manifest
from lake_platform.query.snapshot import load_snapshot
from lake_platform.query.snapshot_cache import SnapshotCache
from lake_platform_tests.flight.conftest import build_catalog, wait_until

T, MULTI, U = "p.w.ns.t", "p.w.ns.multi", "p.w.ns.sub.u"

CASES: list[tuple[str, set[str]]] = [
    ("SELECT * FROM w.ns.t", {T}),
    ("SELECT a.id FROM w.ns.t a JOIN w.ns.multi b ON a.id = b.id", {T, MULTI}),
    ("SELECT * FROM w.ns.t LEFT JOIN w.ns.sub.u USING (id)", {T, U}),
    ("SELECT count(*) FROM w.ns.t a JOIN w.ns.t b USING (id) JOIN w.ns.t c USING (id)", {T}),  # self-joins
    ("SELECT * FROM w.ns.t WHERE id IN (SELECT id FROM w.ns.multi)", {T, MULTI}),
    ("SELECT * FROM w.ns.t WHERE EXISTS (SELECT 1 FROM w.ns.sub.u WHERE u.id = t.id)", {T, U}),
    ("SELECT (SELECT max(id) FROM w.ns.sub.u) AS m, id FROM w.ns.t", {T, U}),
    ("SELECT * FROM (SELECT id FROM (SELECT id FROM w.ns.multi) x) y", {MULTI}),
    ("WITH t AS (SELECT 1 AS id) SELECT * FROM t", set()),  # a CTE named like a real table is not it
    ('WITH "w.ns.t" AS (SELECT 1 AS id) SELECT * FROM "w.ns.t"', set()),
    ("WITH t AS (SELECT id FROM w.ns.multi) SELECT * FROM t JOIN w.ns.t USING (id)", {T, MULTI}),
    ("WITH t AS (SELECT * FROM w.ns.t) SELECT count(*) FROM t a JOIN t b USING (id)", {T}),
    (
        "WITH a AS (SELECT id FROM w.ns.t), b AS (SELECT id FROM a JOIN w.ns.sub.u USING (id)) SELECT * "
        "FROM b",
        {T, U},
    ),
    ("SELECT id FROM w.ns.t UNION ALL SELECT id FROM w.ns.sub.u", {T, U}),
    ("SELECT id FROM w.ns.t UNION SELECT id FROM w.ns.multi EXCEPT SELECT id FROM w.ns.sub.u", {T, MULTI, U}),
    ("SELECT id FROM w.ns.t INTERSECT SELECT id FROM w.ns.multi", {T, MULTI}),
    ("EXPLAIN SELECT * FROM w.ns.multi", {MULTI}),
    ("EXPLAIN SELECT * FROM w.ns.t JOIN w.ns.sub.u USING (id)", {T, U}),
    ("EXPLAIN VERBOSE WITH x AS (SELECT * FROM w.ns.t) SELECT * FROM x", {T}),
    ("SELECT * FROM w.ns.sub.u", {U}),  # nested namespace written unquoted
    ('SELECT * FROM w."ns.sub".u', {U}),
    ("SELECT id, row_number() OVER (ORDER BY id) FROM w.ns.multi", {MULTI}),
    ("VALUES (1), (2)", set()),
    ("SELECT 1", set()),
]


@pytest.fixture(scope="module")
def engine(lake: tuple[Any, Catalog]) -> QueryEngine:
    return QueryEngine(lake[0], QueryLimits(memory_limit_bytes=64 << 20))


@pytest.mark.parametrize(("sql", "expected"), CASES, ids=[c[0][:50] for c in CASES])
def test_captured_references_are_exactly_the_tables_read(
    lake: tuple[Any, Catalog], engine: QueryEngine, sql: str, expected: set[str]
) -> None:
    view = load_snapshot(lake[1].store).project("p")
    planned = engine.plan(sql, view)
    assert {r.name for r in planned.refs} == expected
    assert planned.lookups == len(expected)  # each table looked up once, however often it is named
    assert [r.name for r in planned.refs] == sorted(r.name for r in planned.refs)
    # What DoGet does: re-plan against the captured snapshots alone.
    pinned = engine.plan_pinned(sql, planned.refs)
    assert set(pinned.refs) == set(planned.refs)
    assert pinned.schema == planned.schema
    if not sql.startswith("EXPLAIN"):
        assert sum(b.num_rows for b in engine.stream(pinned)) == sum(
            b.num_rows for b in engine.stream(planned)
        )


def test_a_repeated_reference_resolves_to_one_snapshot_and_one_provider(
    lake: tuple[Any, Catalog], engine: QueryEngine
) -> None:
    view = load_snapshot(lake[1].store).project("p")
    planned = engine.plan(
        "SELECT count(*) AS n FROM w.ns.multi a JOIN w.ns.multi b USING (id) "
        "WHERE a.id IN (SELECT id FROM w.ns.multi)",
        view,
    )
    assert [r.name for r in planned.refs] == [MULTI] and planned.lookups == 1
    assert next(engine.stream(planned)).to_pylist() == [{"n": 500}]


def test_pinned_planning_sees_nothing_but_the_ticket(lake: tuple[Any, Catalog], engine: QueryEngine) -> None:
    view = load_snapshot(lake[1].store).project("p")
    refs = engine.plan("SELECT * FROM w.ns.t", view).refs
    with pytest.raises(InvalidInput, match="does not pin"):
        engine.plan_pinned("SELECT * FROM w.ns.t JOIN w.ns.multi USING (id)", refs)
    with pytest.raises(InvalidInput, match="do not match"):
        engine.plan_pinned("SELECT 1", refs)  # pins a table the query does not read
    with pytest.raises(TableNotFound):
        engine.plan_pinned("SELECT * FROM w.ns.nope", ())


def test_providers_are_cached_per_snapshot_with_a_bound(lake: tuple[Any, Catalog]) -> None:
    settings, catalog = lake
    engine = QueryEngine(settings, QueryLimits(dataset_cache_size=2, memory_limit_bytes=64 << 20))
    view = load_snapshot(catalog.store).project("p")
    for _ in range(3):
        engine.plan("SELECT * FROM w.ns.t JOIN w.ns.multi USING (id)", view)
    assert engine.opens == 2 and engine.cached_snapshots() == 2
    engine.plan("SELECT * FROM w.ns.sub.u", view)
    assert engine.opens == 3 and engine.cached_snapshots() == 2  # bounded: the oldest went
    # One runtime for every context: the memory pool is the process's, not each query's.
    assert engine.context() is not engine.context()
    assert engine.runtime is engine.runtime


def test_all_contexts_share_one_memory_pool(lake: tuple[Any, Catalog], tmp_path: Path) -> None:
    """Two queries that each fit the pool alone cannot both hold it at once: an operator that
    cannot spill (array_agg's accumulator) runs out while another query holds its memory.
    (With a pool per query, as before issue 7, the second would succeed.)"""
    from lake_platform.errors import Throttling

    settings, _ = lake
    engine = QueryEngine(
        settings, QueryLimits(memory_limit_bytes=48 << 20, spill_dir=tmp_path, target_partitions=1)
    )
    view = load_snapshot(lake[1].store).project("p")

    def agg(n: int) -> Iterator[pa.RecordBatch]:
        return engine.stream(engine.plan(f"SELECT array_agg(value) AS a FROM generate_series(1, {n})", view))

    assert len(next(agg(4_000_000)).column(0)[0]) == 4_000_000  # fits alone
    holder = agg(3_000_000)
    next(holder)  # its stream is still open: its reservation is still held
    try:
        with pytest.raises(Throttling, match="memory_limit_bytes=50331648"):
            next(agg(4_000_000))
    finally:
        holder.close()
    # DataFusion releases a dropped stream's reservation on its runtime threads, moments later
    # (much later on a loaded machine: the bound is generous, the wait ends at the release).
    assert wait_until(lambda: len(next(agg(4_000_000)).column(0)[0]) == 4_000_000, timeout=30)


def test_a_staging_manifest_finalized_since_capture_still_opens(lake: tuple[Any, Catalog]) -> None:
    """The catalog moves a committed version's manifest from its staging path to the canonical
    one moments after the commit; a snapshot (or ticket) captured in between still opens that
    same version, and a version whose manifests are both gone is reported gone."""
    settings, catalog = lake
    engine = QueryEngine(settings, QueryLimits(dataset_cache_size=0))
    ref = next(r for r in engine.plan("SELECT * FROM w.ns.t", load_snapshot(catalog.store).project("p")).refs)
    directory = ref.manifest_path.rpartition("/")[0]
    staged = dataclasses.replace(ref, manifest_path=f"{directory}/{ref.version}.manifest-0123456789abcdef")
    assert staged.staging and canonical_manifest(staged).manifest_path == ref.manifest_path
    assert (
        sum(b.num_rows for b in engine.stream(engine.plan_pinned("SELECT * FROM w.ns.t", (staged,)))) == 1000
    )
    gone = dataclasses.replace(staged, version=99)
    with pytest.raises(TableVersionNotFound, match="version 99 of p.w.ns.t is no longer available"):
        engine.plan_pinned("SELECT * FROM w.ns.t", (gone,))


def test_snapshot_rereads_a_staging_version_and_tracks_dropped_incarnations(tmp_path: Path) -> None:
    _, catalog = build_catalog(tmp_path / "home")
    try:
        cache = SnapshotCache.for_store(catalog.store, ttl=60, max_stale=60)
        first = load_snapshot(catalog.store)
        cached = first.project("p").table("w", "ns", "t")
        # Pretend the first load caught version 1 before the catalog finalized its manifest.
        stale = dataclasses.replace(
            cached,
            ref=dataclasses.replace(
                cached.ref, manifest_path=cached.ref.manifest_path.rpartition("/")[0] + "/1.manifest-0123"
            ),
        )
        view = first.project("p")
        assert first.state is not None
        first = dataclasses.replace(
            first,
            projects={
                **first.projects,
                "p": dataclasses.replace(view, tables=view.tables.changed({("w", "ns", "t"): stale})),
            },
            state=dataclasses.replace(first.state, staging=frozenset({"p.w.ns.t"})),
        )
        second = load_snapshot(catalog.store, first)
        assert second.project("p").table("w", "ns", "t").ref.manifest_path == cached.ref.manifest_path
        incarnation = cached.ref.incarnation
        catalog.trash.drop_table(T)
        catalog.tables.create_table(T, pa.table({"id": pa.array([1], pa.int64())}).to_reader())
        cache.refresh()
        snap = cache.latest()
        assert snap is not None and snap.is_dropped(incarnation)
        assert not snap.is_dropped(snap.project("p").table("w", "ns", "t").ref.incarnation)
        catalog.trash.undrop_table(T, as_name="p.w.ns.t_restored")
        assert not load_snapshot(catalog.store).is_dropped(incarnation)
    finally:
        catalog.close()
