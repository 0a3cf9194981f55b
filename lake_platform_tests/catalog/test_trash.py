"""Recoverable drops: a dropped table goes to the trash with its data, comes back by undrop (in
place, under another name, or a chosen incarnation), is purged when its grace runs out (at once
with a zero grace), and a namespace cascade and its undrop (resumable when interrupted) carry
every table below them; an undrop racing the expiry has exactly one winner."""

from __future__ import annotations

import threading
import time
from datetime import timedelta
from typing import Any

import pytest

from lake_platform.catalog.catalog import Catalog
from lake_platform.catalog.policies import parse_assignments
from lake_platform.engine import lance_engine as engine
from lake_platform.errors import (
    NamespaceNotFound,
    TableAlreadyExists,
    TableNotFound,
)
from lake_platform.maintenance import orphans
from lake_platform_tests.catalog.conftest import Lake, ids_of, rows, state
from lake_platform_tests.catalog.registry_calls import RegistryCalls

T = "p.w.ns.t"


def files(lake: Lake, location: str) -> list[Any]:
    return list(engine.list_files(location, lake.settings.storage_options(location)))


def test_drop_recreate_undrop_refused_then_undrop_as(lake: Lake) -> None:
    lake.catalog.tables.create_table(T, rows([1, 2]))
    first = lake.catalog.reads.open_table(T).record
    lake.catalog.trash.drop_table(T)
    with pytest.raises(TableNotFound):
        lake.catalog.reads.open_table(T)
    assert files(lake, first.location)  # the data stays
    lake.catalog.tables.create_table(T, rows([9]))
    second = lake.catalog.reads.open_table(T).record
    assert second.incarnation != first.incarnation and second.location != first.location
    with pytest.raises(TableAlreadyExists, match="--as"):
        lake.catalog.trash.undrop_table(T)
    lake.catalog.trash.undrop_table(T, as_name="p.w.ns.t_restored")
    assert ids_of(lake.catalog.reads.open_table("p.w.ns.t_restored")) == [1, 2]
    assert ids_of(lake.catalog.reads.open_table(T)) == [9]
    lake.catalog.tables.append("p.w.ns.t_restored", rows([3]))  # a restored table takes writes
    assert ids_of(lake.catalog.reads.open_table("p.w.ns.t_restored")) == [1, 2, 3]
    assert lake.catalog.trash.list_trash() == []


def test_a_declared_table_never_written_drops_undrops_and_purges(lake: Lake) -> None:
    """A declared table (a name and location, no version) answered TableNotFound to drop, so
    it could not be removed and kept its namespace from being dropped (lake conformance)."""
    declared = lake.catalog.tables.declare_table(T)
    lake.catalog.trash.drop_table(T)
    assert list(lake.catalog.reads.list_tables("p.w.ns")) == []
    assert [e.target for e in lake.catalog.trash.list_trash()] == [T]
    lake.catalog.trash.undrop_table(T)
    assert lake.catalog.trash.list_trash() == []
    with pytest.raises(TableAlreadyExists):  # the declaration is back, with its location
        lake.catalog.tables.declare_table(T)
    lake.catalog.trash.drop_table(T)
    assert [e.table.location for e in lake.catalog.trash.list_trash()] == [declared.location]
    lake.catalog.trash.undrop_table(T)
    lake.catalog.tables.declare_table("p.w.ns.other")
    lake.catalog.trash.drop_table("p.w.ns.other", purge=True)
    assert [e.target for e in lake.catalog.trash.list_trash()] == []


def test_undrop_picks_incarnation(lake: Lake) -> None:
    lake.catalog.tables.create_table(T, rows([1]))
    first = lake.catalog.reads.open_table(T).record.incarnation
    lake.catalog.trash.drop_table(T)
    lake.catalog.tables.create_table(T, rows([2]))
    lake.catalog.trash.drop_table(T)
    trashed = lake.catalog.trash.list_trash("p.w.ns.t")
    assert len(trashed) == 2
    lake.catalog.trash.undrop_table(T, incarnation=first)
    assert ids_of(lake.catalog.reads.open_table(T)) == [1]
    with pytest.raises(TableNotFound):
        lake.catalog.trash.undrop_table("p.w.ns.t", incarnation="0" * 32)


def test_zero_grace_destroys_at_once(lake: Lake) -> None:
    lake.catalog.policies.set_policy("p.w", parse_assignments(["trash_grace=0s"]))
    lake.catalog.tables.create_table(T, rows([1]))
    location = lake.catalog.reads.open_table(T).record.location
    lake.catalog.trash.drop_table(T)
    assert lake.catalog.trash.list_trash() == [] and files(lake, location) == []


def test_expire_trash_purges_only_expired(lake: Lake) -> None:
    lake.catalog.tables.create_table(T, rows([1]))
    location = lake.catalog.reads.open_table(T).record.location
    lake.catalog.trash.drop_table(T)
    record = lake.catalog.trash.list_trash()[0]
    assert lake.catalog.trash.expire_trash(now_ms=record.expires_at_ms - 1) == []
    purged = lake.catalog.trash.expire_trash(now_ms=record.expires_at_ms)
    assert [p.table for p in purged] == [T]
    assert files(lake, location) == [] and lake.catalog.trash.list_trash() == []
    assert lake.catalog.reads.history(T)[-1].operation == "purge"


def test_cascade_drop_then_interrupted_namespace_undrop_resumes(lake: Lake) -> None:
    c = lake.catalog
    c.containers.create_namespace("p.w.ns.a")
    c.containers.create_namespace("p.w.ns.a.b")
    for name, ids in (
        ("p.w.ns.t1", [1]),
        ("p.w.ns.a.t2", [2]),
        ("p.w.ns.a.b.t3", [3]),
        ("p.w.ns.a.b.t4", [4]),
    ):
        c.tables.create_table(name, rows(ids))
    files_before = state(lake)[1]
    c.cascade.drop_namespace("p.w.ns", cascade=True)
    assert state(lake)[1] == files_before  # no destructive storage call
    trash = c.trash.list_trash("p.w.ns")
    assert len({r.expires_at_ms for r in trash}) == 1  # one shared deadline
    assert sorted(r.target for r in trash if r.kind == "table") == [
        "p.w.ns.a.b.t3",
        "p.w.ns.a.b.t4",
        "p.w.ns.a.t2",
        "p.w.ns.t1",
    ]
    with pytest.raises(NamespaceNotFound):
        c.tables.create_table("p.w.ns.a.t9", rows([9]))

    calls = {"n": 0}

    def crash_after_two_tables(point: str) -> None:
        if point == "undrop-namespace:table":
            calls["n"] += 1
            if calls["n"] == 2:
                raise RuntimeError("operator pressed Ctrl-C")

    flaky = lake.new_catalog(hook=crash_after_two_tables)
    with pytest.raises(RuntimeError):
        flaky.trash.undrop_namespace("p.w.ns")
    restored = sorted(r.name for r in c.reads.list_tables("p.w.ns"))
    assert len(restored) == 2
    c.trash.undrop_namespace("p.w.ns")  # resume: idempotent
    assert sorted(r.name for r in c.reads.list_tables("p.w.ns")) == [
        "p.w.ns.a.b.t3",
        "p.w.ns.a.b.t4",
        "p.w.ns.a.t2",
        "p.w.ns.t1",
    ]
    assert ids_of(c.reads.open_table("p.w.ns.a.b.t4")) == [4]
    assert c.trash.list_trash() == []
    with pytest.raises(NamespaceNotFound):
        c.trash.undrop_namespace("p.w.ns")
    flaky.close()


def _race_undrop_and_expiry(catalog: Catalog, name: str, deadline: int) -> dict[str, Any]:
    """Run an undrop and a trash expiry of ``name`` released together by a barrier."""
    barrier = threading.Barrier(2)
    results: dict[str, Any] = {}

    def undrop() -> None:
        barrier.wait()
        try:
            results["undrop"] = catalog.trash.undrop_table(name)
        except TableNotFound as exc:
            results["undrop"] = exc

    def expire() -> None:
        barrier.wait()
        results["expire"] = catalog.trash.expire_trash(now_ms=deadline, only=None)

    threads = [threading.Thread(target=undrop), threading.Thread(target=expire)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return results


def test_undrop_racing_expiry_has_exactly_one_winner(lake: Lake) -> None:
    outcomes = {"undrop": 0, "expire": 0}
    for i in range(12):
        name = f"p.w.ns.race{i}"
        lake.catalog.tables.create_table(name, rows([i]))
        location = lake.catalog.reads.open_table(name).record.location
        lake.catalog.trash.drop_table(name)
        deadline = lake.catalog.trash.list_trash(name)[0].expires_at_ms
        results = _race_undrop_and_expiry(lake.catalog, name, deadline)
        undropped = not isinstance(results["undrop"], Exception)
        expired = any(r.table == name for r in results["expire"])
        assert undropped != expired, i  # exactly one
        if undropped:
            outcomes["undrop"] += 1
            assert ids_of(lake.catalog.reads.open_table(name)) == [i]  # whole: data intact
            assert files(lake, location)
        else:
            outcomes["expire"] += 1
            assert files(lake, location) == []  # whole: nothing left behind
            with pytest.raises(TableNotFound):
                lake.catalog.reads.open_table(name)
        assert lake.catalog.trash.list_trash(name) == []
    assert sum(outcomes.values()) == 12


def test_a_namespace_undrop_whose_table_name_is_taken_is_refused_whole(lake: Lake) -> None:
    """Before, the undrop skipped ``ns.t`` (a WARNING line only), restored the rest, deleted the
    namespace's undo list and answered success: the caller was not told that ``t`` stayed in
    the trash."""
    c = lake.catalog
    c.containers.create_namespace("p.w.ns.sub")
    c.tables.create_table("p.w.ns.t", rows([1]))
    c.tables.create_table("p.w.ns.sub.u", rows([2]))
    c.cascade.drop_namespace("p.w.ns", cascade=True)
    c.containers.create_namespace("p.w.ns")
    c.tables.create_table("p.w.ns.t", rows([9]))
    before = state(lake)
    with pytest.raises(TableAlreadyExists, match=r"p\.w\.ns\.t"):
        c.trash.undrop_namespace("p.w.ns")
    assert state(lake) == before
    c.trash.drop_table("p.w.ns.t")  # the name is free again: the whole subtree comes back
    c.trash.undrop_namespace("p.w.ns")
    assert ids_of(c.reads.open_table("p.w.ns.t")) == [1]
    assert ids_of(c.reads.open_table("p.w.ns.sub.u")) == [2]


def test_undrop_under_another_name_brings_the_branches_along(lake: Lake) -> None:
    """The dropped table's branches (live and in the trash) come back under the name it is
    undropped as, and the orphan scan of that name counts their Lance branches as named. Before,
    their records stayed under the old name: the table came back with no branches and a scan
    past the age gate listed them as unknown (a reclaim deletes those)."""
    c = lake.catalog
    c.tables.create_table(T, rows([1, 2]))
    c.branches.create_branch(T, "dev")
    c.branch_writes.append(T, "dev", rows([3]))
    c.branches.create_branch(T, "gone")
    c.branch_trash.delete_branch(T, "gone")
    c.trash.drop_table(T)
    c.trash.undrop_table(T, as_name="p.w.ns.u")
    assert [b.branch for b in c.branches.list_branches("p.w.ns.u", include_trashed=True)] == ["dev", "gone"]
    assert ids_of(c.branches.open_branch("p.w.ns.u", "dev")) == [1, 2, 3]
    report = orphans.scan(c, "p.w.ns.u", min_age=timedelta(hours=1), now=time.time() + 2 * 86400)
    assert report.unknown_branches == [] and len(report.branches) == 2
    c.tables.create_table(T, rows([9]))
    assert c.branches.list_branches(T, include_trashed=True) == []


def test_the_trash_of_one_table_reads_no_other_tables_records(lake: Lake) -> None:
    # DescribeTrash of p.w.ns.t (and `lake table drop`, which lists the name's trash after)
    # scanned trs/p.w.ns.t: every trash record of t2, tt, t10... too.
    for name in (T, "p.w.ns.t2", "p.w.ns.tt"):
        lake.catalog.tables.create_table(name, rows([1]))
        lake.catalog.trash.drop_table(name)
    calls = RegistryCalls(lake.catalog.store)
    with Catalog(lake.settings, calls) as counted:
        assert [r.target for r in counted.trash.list_trash(T)] == [T]
    assert calls.items_scanned == 1
