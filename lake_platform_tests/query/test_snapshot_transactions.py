"""A catalog snapshot never holds part of an atomic multi-table commit, on both registry
backends: the table scan may page around the commit, the snapshot reads the rest of it; a
commit over several registry writes whose heads did not all move yet is read through its
transaction record."""

from __future__ import annotations

import pytest

from lake_platform.catalog.catalog import Catalog
from lake_platform.catalog.transaction import Transaction
from lake_platform.engine import lance_engine as engine
from lake_platform.naming import TableName
from lake_platform.query.snapshot import CatalogSnapshot, load_snapshot
from lake_platform.query.snapshot_transactions import (
    committed_transactions,
    complete_transactions,
    manifests_on_storage,
)
from lake_platform.registry import keys
from lake_platform.registry.records import TableRecord, VersionRecord, decode
from lake_platform_tests.catalog.conftest import backend_settings, rows  # noqa: F401 - the fixture
from lake_platform_tests.catalog.test_transaction import catalog  # noqa: F401 - the fixture

A, B, C = "p.w.ns.a", "p.w.ns.b", "p.w.ns.c"


def tables(c: Catalog) -> dict[str, TableRecord]:
    items = c.store.scan_prefix(keys.tables_under())
    return {r.name: r for r in (decode(TableRecord, i.value, i.key) for i in items)}


def versions(c: Catalog) -> dict[str, dict[int, VersionRecord]]:
    out: dict[str, dict[int, VersionRecord]] = {}
    for item in c.store.scan_prefix(keys.all_versions()):
        ver = decode(VersionRecord, item.value, item.key)
        out.setdefault(ver.incarnation, {})[ver.version] = ver
    return out


def version_of(c: Catalog, name: str, version: int) -> VersionRecord:
    item = c.store.get(keys.version(tables(c)[name].incarnation, version))
    assert item is not None
    return decode(VersionRecord, item.value, item.key)


def create_tables(c: Catalog) -> None:
    for i, name in enumerate((A, B, C)):
        c.tables.create_table(name, rows([i]))


def transact(c: Catalog) -> None:
    with c.transaction() as tx:
        tx.append(A, rows([10]))
        tx.append(B, rows([11]))


def test_each_version_of_the_commit_names_the_others(catalog: Catalog) -> None:  # noqa: F811
    create_tables(catalog)
    transact(catalog)
    heads = tables(catalog)
    item = catalog.store.get(keys.version(heads[A].incarnation, 2))
    assert item is not None and decode(VersionRecord, item.value).transaction == {B: 2}


def test_a_table_scanned_before_the_commit_is_read_again(catalog: Catalog) -> None:  # noqa: F811
    create_tables(catalog)
    before = tables(catalog)
    transact(catalog)
    after = tables(catalog)
    # The scan saw a after the commit, b and c before it.
    torn = [after[A], before[B], before[C]]
    done = {r.name: r.current_version for r in complete_transactions(catalog.store, torn, versions(catalog))}
    assert done == {A: 2, B: 2, C: 1}


def test_a_head_committed_after_the_version_scan_is_read_with_its_siblings(catalog: Catalog) -> None:  # noqa: F811
    create_tables(catalog)
    before, old_versions = tables(catalog), versions(catalog)
    transact(catalog)
    torn = [before[A], tables(catalog)[B], before[C]]  # only b scanned after, and no version of it
    done = {r.name: r for r in complete_transactions(catalog.store, torn, old_versions)}
    assert {n: r.current_version for n, r in done.items()} == {A: 2, B: 2, C: 1}
    assert 2 in old_versions[done[A].incarnation] and 2 in old_versions[done[B].incarnation]


def versions_seen(snap: CatalogSnapshot) -> dict[str, int]:
    view = snap.project("p")
    got = {n: view.table("w", "ns", TableName.parse(n).table) for n in (A, B, C)}
    return {n: t.ref.version for n, t in got.items() if t is not None and t.ref is not None}


def test_a_snapshot_loaded_after_the_commit_holds_all_of_it(catalog: Catalog) -> None:  # noqa: F811
    create_tables(catalog)
    first = load_snapshot(catalog.store)
    transact(catalog)
    assert versions_seen(load_snapshot(catalog.store, first)) == {A: 2, B: 2, C: 1}


def test_a_snapshot_refreshed_over_a_commit_half_moved_holds_all_of_it(catalog: Catalog) -> None:  # noqa: F811
    # A commit over several registry writes (2 ops a write: one table's version a chunk), stopped
    # after moving A's head only: B's new version sits above its head, named by A's and by the
    # committed transaction record.
    create_tables(catalog)
    first = load_snapshot(catalog.store)
    moved: list[str] = []

    def stop(point: str) -> None:
        if point == "transaction:rolled-forward":
            moved.append(point)
            raise SystemExit("stopped after the first head moved")

    with Catalog(catalog.settings, hook=stop) as c, pytest.raises(SystemExit):
        with Transaction(c.tables, max_ops=4) as tx:
            tx.append(A, rows([10]))
            tx.append(B, rows([11]))
    assert moved and [r.current_version for r in (tables(catalog)[A], tables(catalog)[B])] == [2, 1]
    for snap in (load_snapshot(catalog.store, first), load_snapshot(catalog.store)):  # by change, cold
        assert versions_seen(snap) == {A: 2, B: 2, C: 1}
    torn = [tables(catalog)[A], tables(catalog)[B], tables(catalog)[C]]
    done = complete_transactions(catalog.store, torn, versions(catalog))
    assert {r.name: r.current_version for r in done} == {A: 2, B: 2, C: 1}


def test_a_commit_past_its_commit_point_with_no_head_moved_is_seen_whole(catalog: Catalog) -> None:  # noqa: F811
    # A commit over several registry writes (one table's version a chunk), its writer stopped
    # right after the commit point: no head moved, its versions sit above the heads, and only
    # the committed transaction record leads to them. A refresh by change loaded before the
    # commit point (the versions above the heads announced, not yet committed), one from before
    # the commit, and a cold load must all hold it whole, as a single-table reader sees it.
    create_tables(catalog)
    first = load_snapshot(catalog.store)
    between: list[CatalogSnapshot] = []

    def stop(point: str) -> None:
        if point == "transaction:chunk-registered":
            between.append(load_snapshot(catalog.store, between[-1] if between else first))
        elif point == "transaction:committed":
            raise SystemExit("stopped at the commit point")

    with Catalog(catalog.settings, hook=stop) as c, pytest.raises(SystemExit):
        with Transaction(c.tables, max_ops=4) as tx:
            tx.append(A, rows([10]))
            tx.append(B, rows([11]))
    assert between and all(versions_seen(s) == {A: 1, B: 1, C: 1} for s in between)
    assert [tables(catalog)[n].current_version for n in (A, B)] == [1, 1]  # no head moved
    for snap in (
        load_snapshot(catalog.store, between[-1]),  # by change, over the commit point
        load_snapshot(catalog.store, first),  # by change, over the whole commit
        load_snapshot(catalog.store),  # cold
    ):
        assert versions_seen(snap) == {A: 2, B: 2, C: 1}
        # A refresh that finds nothing new keeps it (the heads still lag).
        assert versions_seen(load_snapshot(catalog.store, snap)) == {A: 2, B: 2, C: 1}
    assert [tables(catalog)[n].current_version for n in (A, B)] == [1, 1]  # a snapshot writes nothing


def test_a_table_record_written_while_its_head_lags_does_not_take_the_table_back(catalog: Catalog) -> None:  # noqa: F811
    # Past the commit point with no head moved, protecting A writes A's table record as it is
    # (its head still at 1): the refresh that reads it must keep A where the commit put it, with
    # the new flag, not show B new and A old.
    create_tables(catalog)

    def stop(point: str) -> None:
        if point == "transaction:committed":
            raise SystemExit("stopped at the commit point")

    with Catalog(catalog.settings, hook=stop) as c, pytest.raises(SystemExit):
        with Transaction(c.tables, max_ops=4) as tx:
            tx.append(A, rows([10]))
            tx.append(B, rows([11]))
    seen = load_snapshot(catalog.store)
    assert versions_seen(seen) == {A: 2, B: 2, C: 1}
    catalog.containers.set_protected(A)
    assert tables(catalog)[A].current_version == 1 and tables(catalog)[A].protected
    after = load_snapshot(catalog.store, seen)
    assert versions_seen(after) == {A: 2, B: 2, C: 1}
    cached = after.project("p").table("w", "ns", "a")
    assert cached is not None and cached.record.protected


def test_a_table_scanned_before_an_earlier_commit_of_it_is_read_again_before_it_is_viewed(
    catalog: Catalog,  # noqa: F811
) -> None:
    # The scan saw a, b and c at 1; then a and c committed together (a at 2), then a commit over
    # several registry writes of a and b stopped at its commit point (a 2 -> 3, b 1 -> 2). Viewing
    # a at 3 straight from the scan would hold the first commit's a without its c.
    create_tables(catalog)
    before, old_versions = tables(catalog), versions(catalog)
    with catalog.transaction() as tx:
        tx.append(A, rows([20]))
        tx.append(C, rows([22]))

    def stop(point: str) -> None:
        if point == "transaction:committed":
            raise SystemExit("stopped at the commit point")

    with Catalog(catalog.settings, hook=stop) as c, pytest.raises(SystemExit):
        with Transaction(c.tables, max_ops=4) as tx:
            tx.append(A, rows([10]))
            tx.append(B, rows([11]))
    committed = committed_transactions(catalog.store)
    assert [t.from_version for t in committed[0].tables] == [2, 1]
    done = complete_transactions(catalog.store, list(before.values()), old_versions, committed)
    assert {r.name: r.current_version for r in done} == {A: 3, B: 2, C: 2}


def test_a_commit_stopped_before_its_manifests_are_published_is_held_whole_at_its_last_published_state(
    catalog: Catalog,  # noqa: F811
) -> None:
    # Stopped at the commit point, no head moved and no manifest at its canonical path: a
    # snapshot that opens its tables holds every table at 1 (not at 2, which no reader can open
    # without writing), and reads the commit's record again at each refresh until all of it is
    # published, writing nothing.
    create_tables(catalog)
    first = load_snapshot(catalog.store)

    def stop(point: str) -> None:
        if point == "transaction:committed":
            raise SystemExit("stopped at the commit point")

    with Catalog(catalog.settings, hook=stop) as c, pytest.raises(SystemExit):
        with Transaction(c.tables, max_ops=4) as tx:
            tx.append(A, rows([10]))
            tx.append(B, rows([11]))
    published = manifests_on_storage(catalog.settings.storage_options)
    by_change, cold = (
        load_snapshot(catalog.store, first, published),
        load_snapshot(catalog.store, None, published),
    )
    for snap in (by_change, cold, load_snapshot(catalog.store, by_change, published)):
        assert versions_seen(snap) == {A: 1, B: 1, C: 1}
        assert snap.state is not None and len(snap.state.held) == 1
    new = {n: version_of(catalog, n, 2) for n in (A, B)}
    assert all(v.staged_from is not None for v in new.values())
    assert [tables(catalog)[n].current_version for n in (A, B)] == [1, 1]  # nothing written

    def publish(name: str) -> None:  # what the writer does after its registry step
        ver, location = new[name], tables(catalog)[name].folder_uri
        assert ver.staged_from is not None
        engine.finalize_manifest(location, 2, ver.staged_from, catalog.settings.storage_options(location))

    publish(A)
    half = load_snapshot(catalog.store, by_change, published)
    assert versions_seen(half) == {A: 1, B: 1, C: 1}  # never a without b
    publish(B)
    whole = load_snapshot(catalog.store, half, published)  # the feed names nothing new
    assert versions_seen(whole) == {A: 2, B: 2, C: 1}
    assert whole.state is not None and whole.state.held == frozenset()
    assert versions_seen(load_snapshot(catalog.store, None, published)) == {A: 2, B: 2, C: 1}
    assert [tables(catalog)[n].current_version for n in (A, B)] == [1, 1]
