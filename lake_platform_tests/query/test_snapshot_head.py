"""``latest_view``: one registry read of a table's head per request; the snapshot's own view when
it is current (so plans cached over it stay valid), the table brought up to the head otherwise."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pytest

from lake_platform.catalog.catalog import Catalog
from lake_platform.naming import TableName
from lake_platform.query.snapshot_cache import SnapshotCache
from lake_platform.query.snapshot_head import latest_view
from lake_platform_tests.flight.helpers import CountingStore
from lake_platform_tests.maintenance.helpers import make_lake

T = TableName.parse("p.w.ns.t")
WHERE = ("w", "ns", "t")


@pytest.fixture
def catalog(tmp_path: Path) -> Iterator[Catalog]:
    with make_lake(tmp_path / "home") as catalog:
        yield catalog


def ids(n: int) -> pa.RecordBatchReader:
    return pa.table({"id": pa.array(range(n), pa.int64())}).to_reader()


def loaded(catalog: Catalog) -> SnapshotCache:
    cache = SnapshotCache.for_store(catalog.store, ttl=600, max_stale=600)
    cache.refresh()
    return cache


def test_a_current_snapshot_is_answered_as_it_is_for_one_get(catalog: Catalog) -> None:
    catalog.tables.create_table(str(T), ids(3))
    cache = loaded(catalog)
    store = CountingStore(catalog.store)
    view = latest_view(cache, store, T)
    assert view is cache.current().project("p")  # the very view: plans kept over it still hold
    # One multi-get: the head, and the version key above the snapshot's (a multi-table commit's).
    assert (store.gets, store.scans) == (1, 0)


def test_a_commit_since_the_snapshot_is_seen_and_kept(catalog: Catalog) -> None:
    catalog.tables.create_table(str(T), ids(3))
    cache = loaded(catalog)
    before = cache.current()
    catalog.tables.append(str(T), ids(2))
    view = latest_view(cache, catalog.store, T)
    table = view.table(*WHERE)
    assert table is not None and table.ref is not None and table.ref.version == 2
    assert sorted(table.versions) == [1, 2]
    # The cache now holds the head: the next request is answered from it with one get again.
    assert cache.current() is not before and cache.current().project("p") is view
    store = CountingStore(catalog.store)
    assert latest_view(cache, store, T) is view and store.scans == 0


def test_a_table_new_since_the_snapshot_is_seen(catalog: Catalog) -> None:
    cache = loaded(catalog)
    assert cache.current().project("p").table(*WHERE) is None
    catalog.tables.create_table(str(T), ids(1))
    table = latest_view(cache, catalog.store, T).table(*WHERE)
    assert table is not None and table.ref is not None and table.ref.version == 1


def test_a_table_dropped_since_the_snapshot_is_gone(catalog: Catalog) -> None:
    catalog.tables.create_table(str(T), ids(1))
    cache = loaded(catalog)
    catalog.trash.drop_table(str(T))
    assert latest_view(cache, catalog.store, T).table(*WHERE) is None


def test_a_refresh_in_between_is_not_overwritten(catalog: Catalog) -> None:
    catalog.tables.create_table(str(T), ids(1))
    cache = loaded(catalog)
    seen = cache.current()
    cache.refresh()
    newer = cache.current()
    assert cache.advance(seen, seen) is False and cache.current() is newer
