"""Pooled DataFusion sessions: a context planning for tenant A and then for tenant B never shows B
anything of A's (tables, warehouses), between requests it holds no catalogs at all, and a
DataFrame planned on it keeps reading its own snapshots while later requests reuse the context."""

from __future__ import annotations

import gc
import weakref
from collections.abc import Iterator
from typing import Any

import pyarrow as pa
import pytest

from lake_platform.catalog.catalog import Catalog
from lake_platform.errors import InvalidInput, TableNotFound
from lake_platform.query.engine import QueryEngine
from lake_platform.query.limits import QueryLimits
from lake_platform.query.snapshot import load_snapshot


@pytest.fixture(scope="module")
def engine(lake: tuple[Any, Catalog]) -> Iterator[QueryEngine]:
    settings, catalog = lake
    # p gets a warehouse q does not have: a leaked catalog would be reachable by name.
    catalog.containers.create_warehouse("p.pw")
    catalog.containers.create_namespace("p.pw.ns")
    catalog.tables.create_table("p.pw.ns.only_p", pa.table({"v": pa.array([7, 8], pa.int64())}).to_reader())
    yield QueryEngine(settings, QueryLimits(session_pool_size=1, memory_limit_bytes=64 << 20))


def _views(catalog: Catalog) -> tuple[Any, Any]:
    snap = load_snapshot(catalog.store)
    return snap.project("p"), snap.project("q")


def _rows(engine: QueryEngine, planned: Any) -> list[dict[str, Any]]:
    return pa.Table.from_batches(list(engine.stream(planned)), planned.schema).to_pylist()


def test_one_reused_context_never_leaks_a_tenants_catalog(
    lake: tuple[Any, Catalog], engine: QueryEngine
) -> None:
    p, q = _views(lake[1])
    a = engine.plan("SELECT v FROM pw.ns.only_p ORDER BY v", p)
    created = engine.sessions.created
    for sql in ("SELECT * FROM pw.ns.only_p", "SELECT * FROM w.ns.multi", "SELECT * FROM w.ns.sub.u"):
        with pytest.raises((TableNotFound, InvalidInput)):
            engine.plan(sql, q)
    b = engine.plan("SELECT code FROM w.ns.secret", q)
    assert engine.sessions.created == created  # the very same context served every request
    # A's DataFrame, planned before B's requests on that context, still reads A's snapshot ...
    assert _rows(engine, a) == [{"v": 7}, {"v": 8}]
    assert _rows(engine, b) == [{"code": "bob-only"}]
    # ... and A sees its own tables again after B.
    assert _rows(engine, engine.plan("SELECT count(*) AS n FROM pw.ns.only_p", p)) == [{"n": 2}]


def test_an_idle_context_holds_no_catalogs(lake: tuple[Any, Catalog]) -> None:
    """Seen from outside: once a request is done (its result read and dropped), nothing of its
    project view stays alive, though the context it planned on waits in the pool for the next
    request. A context that kept the request's catalogs would keep the view (and every table
    provider it opened) until another request took it."""
    settings, catalog = lake
    engine = QueryEngine(settings, QueryLimits(session_pool_size=1, memory_limit_bytes=64 << 20))

    def served(sql: str) -> tuple[weakref.ref[Any], int | None]:
        view = load_snapshot(catalog.store).project("p")
        try:
            rows: int | None = len(_rows(engine, engine.plan(sql, view)))
        except TableNotFound:  # a failed planning lets go of them too
            rows = None
        return weakref.ref(view), rows

    for sql, rows in (("SELECT * FROM w.ns.t", 1000), ("SELECT * FROM w.ns.nope", None)):
        view, got = served(sql)
        gc.collect()
        assert got == rows
        assert view() is None, sql  # not held by the pooled context
        assert engine.sessions.created == 1 and engine.sessions.idle() == 1  # the same context, back


def test_a_stream_survives_reuse_of_its_context(lake: tuple[Any, Catalog], engine: QueryEngine) -> None:
    """A result streamed while another tenant plans (and runs) on the context it was planned on."""
    p, q = _views(lake[1])
    planned = engine.plan("SELECT id FROM w.ns.multi ORDER BY id", p)
    stream = engine.stream(planned)
    first = next(stream)
    assert _rows(engine, engine.plan("SELECT id FROM w.ns.t ORDER BY id", q)) == [{"id": -2}, {"id": -1}]
    rest = list(stream)
    ids = pa.Table.from_batches([first, *rest]).column("id").to_pylist()
    assert ids == list(range(500))


def test_concurrent_requests_take_different_contexts(lake: tuple[Any, Catalog]) -> None:
    from concurrent.futures import ThreadPoolExecutor

    settings, catalog = lake
    engine = QueryEngine(settings, QueryLimits(session_pool_size=4, memory_limit_bytes=64 << 20))
    p, q = _views(catalog)

    def run(i: int) -> list[dict[str, Any]]:
        view, sql = (
            (p, "SELECT count(*) AS n FROM w.ns.t") if i % 2 else (q, "SELECT count(*) AS n FROM w.ns.t")
        )
        return _rows(engine, engine.plan(sql, view))

    with ThreadPoolExecutor(4) as pool:
        got = list(pool.map(run, range(40)))
    assert got == [[{"n": 1000}] if i % 2 else [{"n": 2}] for i in range(40)]
    assert engine.sessions.idle() <= 4
