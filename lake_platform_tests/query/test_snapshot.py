"""Loading the catalog snapshot: a refresh reads what changed (one read per feed shard when
nothing did, then the changed keys), a cold load reads current heads and never the history, and
a refresh keeps the view of a project it did not change."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from lake_platform.catalog.catalog import Catalog
from lake_platform.query.snapshot import load_snapshot
from lake_platform.registry import keys
from lake_platform.registry.changes import DEFAULT_SHARDS, RING
from lake_platform.registry.sqlite import SqliteMetaStore
from lake_platform.settings import load_settings
from lake_platform_tests.flight.conftest import build_catalog
from lake_platform_tests.registry.catalog_records import Reads, commit, write_catalog


@pytest.fixture
def store(tmp_path: Path) -> SqliteMetaStore:
    return SqliteMetaStore(tmp_path / "registry.db")


def test_incremental_refresh_reuses_unchanged_tables(lake: tuple[Any, Catalog]) -> None:
    _, catalog = lake
    first = load_snapshot(catalog.store)
    second = load_snapshot(catalog.store, first)
    assert second.project("p").table("w", "ns", "t") is first.project("p").table("w", "ns", "t")


@pytest.mark.parametrize("tables", [200, 4000])
def test_a_refresh_reads_a_constant_when_nothing_changed_and_the_changed_keys_otherwise(
    store: SqliteMetaStore, tables: int
) -> None:
    names = write_catalog(store, "p", namespaces=tables // 20, per_namespace=20, versions=3)
    reads = Reads(store)
    snap = load_snapshot(reads, None)
    reads.reset()
    snap = load_snapshot(reads, snap)
    assert (reads.count, reads.scanned) == (DEFAULT_SHARDS, [keys.change_records(s) for s in range(16)])
    commit(store, names[7])
    reads.reset()
    snap = load_snapshot(reads, snap)
    assert reads.count == DEFAULT_SHARDS + 1  # the shard reads, then one get_many of the keys
    assert snap.project("p").table("w", "ns00000", "t0007").ref.version == 4  # type: ignore[union-attr]
    for name in names[:150]:  # 300 keys changed: three get_many
        commit(store, name)
    reads.reset()
    snap = load_snapshot(reads, snap)
    assert DEFAULT_SHARDS + 3 <= reads.count <= DEFAULT_SHARDS + 3 + 16  # + a shard's next page
    assert snap.project("p").table("w", "ns00000", "t0007").ref.version == 5  # type: ignore[union-attr]
    assert snap.project("p").table("w", "ns00007", "t0009").ref.version == 4  # type: ignore[union-attr]
    assert snap.project("p").table("w", "ns00007", "t0010").ref.version == 3  # type: ignore[union-attr]
    assert snap.table_count() == tables


def test_a_cold_load_reads_current_heads_never_the_history(store: SqliteMetaStore) -> None:
    write_catalog(store, "p", namespaces=10, per_namespace=30, versions=5)
    reads = Reads(store)
    snap = load_snapshot(reads)
    assert not any(prefix.startswith("ver/") for prefix in reads.scanned)
    cached = snap.project("p").table("w", "ns00003", "t0004")
    assert cached is not None and cached.ref is not None and cached.ref.version == 5
    reads.reset()
    assert cached.ref_at(5, "v5") == cached.ref.__class__(**{**cached.ref.__dict__, "at": "v5"})
    assert reads.count == 0  # the current version needs no history
    assert sorted(cached.versions) == [1, 2, 3, 4, 5] and reads.scanned == ["ver/p-w-ns00003-t0004/"]
    assert cached.ref_at(2, "v2").version == 2 and cached.tags == {}  # type: ignore[union-attr]
    assert reads.count == 1  # read once, kept


def test_a_tag_set_since_is_seen_by_the_next_refresh(store: SqliteMetaStore) -> None:
    names = write_catalog(store, "p", namespaces=1, per_namespace=3, versions=2)
    first = load_snapshot(store)
    before = first.project("p").table("w", "ns00000", "t0001")
    assert before is not None and before.tags == {}
    commit(store, names[1], tags=("eod",))
    snap = load_snapshot(store, first)
    other = ("w", "ns00000", "t0000")
    assert snap.project("p").table(*other) is first.project("p").table(*other)
    after = snap.project("p").table("w", "ns00000", "t0001")
    assert after is not None and after.tags == {"eod": 3} and after.ref.version == 3  # type: ignore[union-attr]


def test_an_old_registry_without_a_feed_is_followed_once_one_is_written(store: SqliteMetaStore) -> None:
    names = write_catalog(store, "p", namespaces=1, per_namespace=4, versions=1)
    for item in list(store.scan_prefix("chg/")):  # as a release before the feed left it
        store.compare_and_delete(item.key, item.revision)
    snap = load_snapshot(store)
    assert snap.state is not None and snap.state.feed is None
    reads = Reads(store)
    snap = load_snapshot(reads, snap)
    assert reads.count == 1  # is there a feed now? no: nothing was written since
    commit(SqliteMetaStore(store.path), names[2])  # a writer of this release
    snap = load_snapshot(store, snap)
    assert snap.project("p").table("w", "ns00000", "t0002").ref.version == 2  # type: ignore[union-attr]


def test_a_replica_further_behind_than_the_ring_loads_cold(store: SqliteMetaStore) -> None:
    store.put_if_absent("chg/meta", json.dumps({"shards": 1}).encode())
    names = write_catalog(store, "p", namespaces=1, per_namespace=5, versions=1)
    snap = load_snapshot(store)
    for _ in range(RING + 1):
        commit(store, names[0])
    commit(store, names[4])
    snap = load_snapshot(store, snap)
    views = snap.project("p")
    assert views.table("w", "ns00000", "t0000").ref.version == RING + 2  # type: ignore[union-attr]
    assert views.table("w", "ns00000", "t0004").ref.version == 2  # type: ignore[union-attr]


def test_drops_policies_and_principals_follow_the_feed(tmp_path: Path) -> None:
    _, catalog = build_catalog(tmp_path / "home")
    try:
        snap = load_snapshot(catalog.store)
        incarnation = snap.project("p").table("w", "ns", "t").record.incarnation  # type: ignore[union-attr]
        catalog.trash.drop_table("p.w.ns.t")
        catalog.policies.set_policy("q.w", {"cache": "off"})
        late = catalog.access.add_user("late", project="q", role="reader", password="pw-late-12345")
        snap = load_snapshot(catalog.store, snap)
        assert snap.project("p").table("w", "ns", "t") is None and snap.is_dropped(incarnation)
        assert snap.principals is not None
        assert snap.principals.users["late"] == ("q", "reader", late.user_id) and late.user_id
        assert snap.project("q").table("w", "ns", "t").cache == "off"  # type: ignore[union-attr]
        catalog.trash.undrop_table("p.w.ns.t")
        catalog.access.remove_user("late")
        snap = load_snapshot(catalog.store, snap)
        assert not snap.is_dropped(incarnation)
        assert snap.project("p").table("w", "ns", "t").record.incarnation == incarnation  # type: ignore[union-attr]
        assert "late" not in snap.principals.users  # type: ignore[union-attr]
    finally:
        catalog.close()


def test_a_refresh_keeps_the_view_of_a_project_it_did_not_change(tmp_path: Path) -> None:
    """Plans are kept per project view: a refresh that changed nothing in a project must keep
    its view object (or every kept plan is planned again after each refresh interval), and one
    that changed anything there must give a new view."""
    _, catalog = build_catalog(tmp_path / "home")
    try:
        first = load_snapshot(catalog.store)
        second = load_snapshot(catalog.store, first)
        assert second.project("p") is first.project("p")
        assert second.project("q") is first.project("q")
        catalog.tables.append("q.w.ns.t", pa.table({"id": pa.array([-3], pa.int64())}).to_reader())
        third = load_snapshot(catalog.store, second)
        assert third.project("p") is second.project("p")
        assert third.project("q") is not second.project("q")
        assert third.project("q").table("w", "ns", "t").ref.version == 2  # type: ignore[union-attr]
        catalog.containers.create_namespace("p.w.other")  # a name, not a table: still a change
        fourth = load_snapshot(catalog.store, third)
        assert fourth.project("p") is not third.project("p")
        assert ("w", "other") in fourth.project("p").namespaces
    finally:
        catalog.close()


def test_settings_reader_is_independent(tmp_path: Path) -> None:
    settings = load_settings(home=tmp_path)
    assert settings.home == tmp_path


def test_a_dropped_table_leaves_the_snapshot_with_its_policy_and_versions(tmp_path: Path) -> None:
    """A drop that purges the table's record, version records and policy in one refresh: the
    changed policy and versions must not rebuild the table from the cached record."""
    _, catalog = build_catalog(tmp_path / "home")
    catalog.tables.create_table("p.w.ns.doomed", pa.table({"id": pa.array([1, 2], pa.int64())}).to_reader())
    catalog.policies.set_policy("p.w.ns.doomed", {"cache": "off"})
    snap = load_snapshot(catalog.store)
    assert snap.project("p").table("w", "ns", "doomed") is not None
    catalog.trash.drop_table("p.w.ns.doomed", purge=True)
    snap = load_snapshot(catalog.store, snap)
    assert snap.project("p").table("w", "ns", "doomed") is None
