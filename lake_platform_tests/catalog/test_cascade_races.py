"""A cascade drop racing single-table drops and recreates, driven through the hook points.

The invariant checked at every step: every incarnation a test created is referenced by exactly
one registry record (its registration or one trash record) and still has its data on storage,
until an explicit purge. Nothing here sleeps: the hooks run the racing operation at an exact step.
"""

from __future__ import annotations

import threading
from typing import Any

import pytest

from lake_platform.catalog.catalog import Catalog
from lake_platform.engine import lance_engine as engine
from lake_platform.errors import NamespaceNotFound, Protected
from lake_platform.registry.records import TableRecord, TrashRecord, decode
from lake_platform_tests.catalog.conftest import Lake, ids_of, rows

T = "p.w.ns.t"


def references(catalog: Catalog) -> dict[str, list[str]]:
    """incarnation → the registry keys that reference it (registrations and trash records)."""
    found: dict[str, list[str]] = {}
    for item in catalog.store.scan_prefix("tbl/"):
        found.setdefault(decode(TableRecord, item.value, item.key).incarnation, []).append(item.key)
    for item in catalog.store.scan_prefix("trs/"):
        trash = decode(TrashRecord, item.value, item.key)
        if trash.table is not None:
            found.setdefault(trash.table.incarnation, []).append(item.key)
    return found


def assert_nothing_lost(lake: Lake, created: dict[str, TableRecord]) -> None:
    refs = references(lake.catalog)
    for incarnation, record in created.items():
        assert len(refs.get(incarnation, [])) == 1, (record.name, incarnation, refs.get(incarnation))
        assert list(engine.list_files(record.location, lake.settings.storage_options(record.location))), (
            record.name
        )


def test_cascade_recreate_never_detaches_the_replacement(lake: Lake) -> None:
    """drop + recreate of a table between the cascade's listing and its mark: the cascade must
    detach the incarnation it finds under the mark (the replacement), conditional on it, and
    must not file a second trash record for the old one."""
    c = lake.catalog
    c.tables.create_table(T, rows([1]))
    c.tables.create_table("p.w.ns.u", rows([7]))
    created = {
        r.incarnation: r for r in (c.reads.open_table(T).record, c.reads.open_table("p.w.ns.u").record)
    }
    old = c.reads.open_table(T).record
    seen: list[str] = []
    replacement: list[TableRecord] = []

    def race(point: str) -> None:
        seen.append(point)
        if point == "drop-namespace:checked":
            c.trash.drop_table(T)
            c.tables.create_table(T, rows([2]))  # same name, same commit count: same registry revision
            replacement.append(c.reads.open_table(T).record)
            created[replacement[0].incarnation] = replacement[0]
        assert_nothing_lost(lake, created)

    racer = lake.new_catalog(hook=race)
    try:
        racer.cascade.drop_namespace("p.w.ns", cascade=True)
    finally:
        racer.close()
    assert {"drop-namespace:checked", "drop-namespace:marked", "drop-namespace:table"} <= set(seen)
    assert_nothing_lost(lake, created)
    new_incarnation = replacement[0].incarnation
    trashed = sorted(
        r.table.incarnation for r in c.trash.list_trash(T) if r.table is not None and r.target == T
    )
    assert trashed == sorted([old.incarnation, new_incarnation])
    c.trash.undrop_namespace("p.w.ns")  # brings back what the cascade detached: the replacement
    assert c.reads.open_table(T).record.incarnation == new_incarnation and ids_of(c.reads.open_table(T)) == [
        2
    ]
    assert ids_of(c.reads.open_table("p.w.ns.u")) == [7]
    c.trash.undrop_table(T, as_name="p.w.ns.t_old", incarnation=old.incarnation)
    assert ids_of(c.reads.open_table("p.w.ns.t_old")) == [1]
    assert_nothing_lost(lake, created)


def test_cascade_skips_a_table_a_racing_drop_took(lake: Lake) -> None:
    """A single-table drop holding the table's lease when the cascade reaches that table: the
    cascade waits for the lease, sees the incarnation gone and leaves it to the drop's own
    trash record (one record, data intact), then finishes."""
    c = lake.catalog
    c.tables.create_table(T, rows([1]))
    record = c.reads.open_table(T).record
    paused, resume = threading.Event(), threading.Event()
    errors: list[BaseException] = []

    def hold_in_drop(point: str) -> None:
        if point == "drop:before-commit":
            paused.set()
            assert resume.wait(60)

    dropper = lake.new_catalog(hook=hold_in_drop)

    def drop() -> None:
        try:
            dropper.trash.drop_table(T)
        except BaseException as exc:  # noqa: BLE001 - reported by the assertion below
            errors.append(exc)

    thread = threading.Thread(target=drop)
    thread.start()
    assert paused.wait(60)

    def let_drop_finish(point: str) -> None:
        if point == "drop-namespace:table":
            resume.set()  # the cascade now blocks on the lease until the drop has committed

    racer = lake.new_catalog(hook=let_drop_finish)
    try:
        racer.cascade.drop_namespace("p.w.ns", cascade=True)
    finally:
        thread.join(60)
        racer.close()
        dropper.close()
    assert errors == []
    assert_nothing_lost(lake, {record.incarnation: record})
    assert [r.table.incarnation for r in c.trash.list_trash(T) if r.table is not None] == [record.incarnation]
    assert "cascade_id" not in next(e for e in c.reads.history(T) if e.operation == "drop").detail


@pytest.mark.parametrize("purge", [False, True])
def test_cascade_detaches_the_latest_registration(lake: Lake, purge: bool) -> None:
    """The trash record holds the registration read under the mark, not the one listed first."""
    c = lake.catalog
    c.tables.create_table(T, rows([1]))

    def append_before_mark(point: str) -> None:
        if point == "drop-namespace:checked":
            c.tables.append(T, rows([2]))

    racer = lake.new_catalog(hook=append_before_mark)
    location = c.reads.open_table(T).record.location
    try:
        racer.cascade.drop_namespace("p.w.ns", cascade=True, purge=purge)
    finally:
        racer.close()
    if purge:
        assert [r for r in c.trash.list_trash() if r.kind == "table"] == []
        assert list(engine.list_files(location, lake.settings.storage_options(location))) == []
        return
    [trash] = [r for r in c.trash.list_trash(T) if r.table is not None]
    assert trash.table is not None and trash.table.current_version == 2
    c.trash.undrop_namespace("p.w.ns")
    assert ids_of(c.reads.open_table(T)) == [1, 2]


def test_nothing_under_a_cascade_changes_midway(lake: Lake) -> None:
    """After the mark, protection and policy changes in the subtree are refused, so no detach
    condition can fail halfway through the cascade."""
    c = lake.catalog
    c.tables.create_table(T, rows([1]))
    c.tables.create_table("p.w.ns.u", rows([2]))
    refused: list[str] = []

    def meddle(point: str) -> None:
        if point == "drop-namespace:table" and not refused:
            for change in (
                lambda: c.containers.set_protected("p.w.ns.u"),
                lambda: c.policies.set_policy("p.w.ns.u", {"retain_versions": 2}),
                lambda: c.policies.set_policy("p.w.ns", {"retain_versions": 2}),
                lambda: c.containers.set_protected("p.w.ns"),
            ):
                with pytest.raises(NamespaceNotFound, match="being dropped"):
                    change()
                refused.append(point)

    racer = lake.new_catalog(hook=meddle)
    try:
        racer.cascade.drop_namespace("p.w.ns", cascade=True)
    finally:
        racer.close()
    assert len(refused) == 4
    assert sorted(r.target for r in c.trash.list_trash() if r.kind == "table") == ["p.w.ns.t", "p.w.ns.u"]
    assert c.store.get("nsp/p/w/ns") is None


@pytest.mark.slow
def test_cascade_recreate_and_policies_on_the_scale_out_pair(scale_out: Any) -> None:
    """The same race on DynamoDB + S3, with a policy on each incarnation: each goes with its own."""
    settings, c = scale_out
    c.tables.create_table(T, rows([1]))
    c.policies.set_policy(T, {"retain_versions": 3})
    old = c.reads.open_table(T).record

    def race(point: str) -> None:
        if point == "drop-namespace:checked":
            c.trash.drop_table(T)
            c.tables.create_table(T, rows([2]))
            assert c.policies.effective_policy(T).source is None  # the replacement inherits nothing
            c.policies.set_policy(T, {"retain_versions": 4})

    racer = Catalog(settings, hook=race)
    try:
        racer.cascade.drop_namespace("p.w.ns", cascade=True)
    finally:
        racer.close()
    assert len([r for r in c.trash.list_trash(T) if r.table is not None]) == 2
    c.trash.undrop_namespace("p.w.ns")
    assert ids_of(c.reads.open_table(T)) == [2] and c.policies.effective_policy(T).policy.retain_versions == 4
    c.trash.undrop_table(T, as_name="p.w.ns.t_old", incarnation=old.incarnation)
    assert ids_of(c.reads.open_table("p.w.ns.t_old")) == [1]
    assert c.policies.effective_policy("p.w.ns.t_old").policy.retain_versions == 3


def test_protection_set_before_the_mark_still_stops_the_cascade(lake: Lake) -> None:
    c = lake.catalog
    c.tables.create_table(T, rows([1]))

    def protect(point: str) -> None:
        if point == "drop-namespace:checked":
            c.containers.set_protected(T)

    racer = lake.new_catalog(hook=protect)
    try:
        with pytest.raises(Protected):
            racer.cascade.drop_namespace("p.w.ns", cascade=True)
    finally:
        racer.close()
    assert c.trash.list_trash() == [] and ids_of(c.reads.open_table(T)) == [1]
    c.tables.create_table("p.w.ns.u", rows([2]))  # unmarked: the namespace takes creates again
