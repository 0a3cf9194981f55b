"""A name the snapshot misses is read from the registry once: found, it is planned on what the
registry holds; still missing, it is NOT_FOUND as before, and asking again over the same
snapshot view reads nothing more. A plain name never shows part of a multi-table commit."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pyarrow as pa
import pytest

from lake_platform.catalog.catalog import Catalog
from lake_platform.errors import (
    LakeError,
    ServiceUnavailable,
    TableNotFound,
    TableTagNotFound,
    TableVersionNotFound,
)
from lake_platform.query.branch_refs import BranchRefs
from lake_platform.query.engine import QueryEngine
from lake_platform.query.limits import QueryLimits
from lake_platform.query.snapshot import ProjectView, load_snapshot
from lake_platform_tests.doubles import ManualClock
from lake_platform_tests.flight.helpers import CountingStore
from lake_platform_tests.maintenance.helpers import make_lake


@pytest.fixture
def catalog(tmp_path: Path) -> Iterator[Catalog]:
    with make_lake(tmp_path / "home") as catalog:
        yield catalog


def ids(*values: int) -> pa.RecordBatchReader:
    return pa.table({"id": pa.array(values, pa.int64())}).to_reader()


def engine_over(catalog: Catalog, store: CountingStore) -> QueryEngine:
    return QueryEngine(catalog.settings, QueryLimits(memory_limit_bytes=64 << 20), branches=BranchRefs(store))


def count(engine: QueryEngine, view: ProjectView, name: str) -> int:
    planned = engine.plan(f"SELECT count(*) AS n FROM w.ns.{name}", view)
    return sum(batch.column(0)[0].as_py() for batch in engine.stream(planned))


def reads(store: CountingStore) -> int:
    return store.gets + store.scans


def test_what_was_committed_since_the_snapshot_is_read_once(catalog: Catalog) -> None:
    catalog.tables.create_table("p.w.ns.t", ids(1, 2, 3))
    view = load_snapshot(catalog.store).project("p")
    catalog.tables.append("p.w.ns.t", ids(4, 5))
    catalog.tags.create_tag("p.w.ns.t", "fresh", 2)
    catalog.tables.create_table("p.w.ns.new", ids(7))
    store = CountingStore(catalog.store)
    engine = engine_over(catalog, store)
    assert count(engine, view, '"t@v2"') == 5
    # The table's record, then its head with the version above: two requests, nothing scanned.
    assert (store.gets, store.scans) == (2, 0)
    assert count(engine, view, '"t@tag:fresh"') == 5  # a tag reads the table's history too
    assert count(engine, view, "new") == 1
    assert count(engine, view, "t") == 3  # the snapshot's own table is not moved
    before = reads(store)
    for name, answer in (('"t@v2"', 5), ('"t@tag:fresh"', 5), ("new", 1)):
        assert count(engine, view, name) == answer
    assert reads(store) == before  # each name was read once for this view


@pytest.mark.parametrize(
    ("name", "error", "message"),
    [
        ('"t@v9"', TableVersionNotFound, "version 9 of p.w.ns.t does not exist or was cleaned up"),
        ('"t@tag:nope"', TableTagNotFound, "no tag nope on p.w.ns.t"),
        ('"nothing@v1"', TableNotFound, "table w.ns.nothing not found"),
        ("nothing", TableNotFound, "table w.ns.nothing not found"),
    ],
)
def test_a_name_that_does_not_exist_is_read_once_per_view(
    catalog: Catalog, name: str, error: type[LakeError], message: str
) -> None:
    catalog.tables.create_table("p.w.ns.t", ids(1))
    store = CountingStore(catalog.store)
    engine = engine_over(catalog, store)
    view = load_snapshot(catalog.store).project("p")
    with pytest.raises(error, match=message):
        count(engine, view, name)
    first = reads(store)
    assert first > 0
    for _ in range(3):
        with pytest.raises(error, match=message):
            count(engine, view, name)
    assert reads(store) == first
    # A new view (a refresh that changed the project) reads again: the name may exist now.
    catalog.tables.append("p.w.ns.t", ids(2))
    with pytest.raises(error, match=message):
        count(engine, load_snapshot(catalog.store).project("p"), name)
    assert reads(store) > first


def test_a_version_below_the_snapshots_head_is_not_read_again(catalog: Catalog) -> None:
    """A version the snapshot's head is past was cleaned up (or never committed): no lag to read."""
    catalog.tables.create_table("p.w.ns.t", ids(1))
    catalog.tables.append("p.w.ns.t", ids(2))
    clock = ManualClock()
    clock.advance(10)
    settings = catalog.settings.model_copy(
        update={"ticket_lifetime_seconds": 1.0, "reader_max_stale_seconds": 0.0}
    )
    with Catalog(settings, clock=clock, heartbeat=False) as maintainer:
        maintainer.versions.cleanup("p.w.ns.t", retention=timedelta(0))
    view = load_snapshot(catalog.store).project("p")
    store = CountingStore(catalog.store)
    engine = engine_over(catalog, store)
    with pytest.raises(TableVersionNotFound, match="version 1 of p.w.ns.t does not exist or was cleaned up"):
        count(engine, view, '"t@v1"')
    assert reads(store) == 0  # the history was the snapshot's own read (through its loader's store)


def test_a_plain_name_never_shows_part_of_a_multi_table_commit(catalog: Catalog) -> None:
    """``a`` is new to the view and its head is a commit that also moved ``b``, which the view
    holds at its older version: ``a`` waits for the refresh (which brings both); named by its
    version it is read, as any version is."""
    catalog.tables.create_table("p.w.ns.b", ids(1))
    view = load_snapshot(catalog.store).project("p")
    catalog.tables.create_table("p.w.ns.a", ids(10))
    with catalog.transaction() as tx:
        tx.append("p.w.ns.a", ids(11))
        tx.append("p.w.ns.b", ids(2))
    engine = engine_over(catalog, CountingStore(catalog.store))
    with pytest.raises(TableNotFound, match="table w.ns.a not found"):
        count(engine, view, "a")
    assert count(engine, view, '"a@v2"') == 2
    fresh = load_snapshot(catalog.store).project("p")
    assert (count(engine, fresh, "a"), count(engine, fresh, "b")) == (2, 2)


def test_a_registry_that_cannot_be_read_is_unavailable_not_missing(catalog: Catalog) -> None:
    """A miss the registry cannot answer is UNAVAILABLE (the name may exist), and nothing is kept."""
    catalog.tables.create_table("p.w.ns.t", ids(1))
    view = load_snapshot(catalog.store).project("p")
    catalog.tables.append("p.w.ns.t", ids(2))
    store = CountingStore(catalog.store)
    engine = engine_over(catalog, store)
    store.failing = True
    with pytest.raises(ServiceUnavailable, match="registry backend unreachable"):
        count(engine, view, '"t@v2"')
    store.failing = False
    assert count(engine, view, '"t@v2"') == 2
