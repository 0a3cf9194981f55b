"""A cascade interrupted midway and run again must end exactly as one uninterrupted cascade:
one namespace trash record listing every table, each table in the trash once under that
record's cascade id, and one ``undrop_namespace`` bringing everything back.

The interruption is a hook that raises at a named step (nothing in the cascade catches it, so
the registry is left as a crash leaves it; the SIGKILL suite in test_fault_kills.py does the
same with real kills). Nothing here sleeps.
"""

from __future__ import annotations

import pytest

from lake_platform.catalog.catalog import Catalog
from lake_platform.errors import ConcurrentModification, NamespaceNotFound
from lake_platform.naming import NamespaceName
from lake_platform.registry import keys
from lake_platform.registry.records import TrashRecord, decode
from lake_platform_tests.catalog.conftest import Lake, ids_of, rows
from lake_platform_tests.catalog.faults import Background, Pause

NS = "p.w.ns.box"
A, B = f"{NS}.a", f"{NS}.sub.b"


class Crash(Exception):
    """The writer dies here."""


class CrashAt:
    def __init__(self, point: str, nth: int = 1) -> None:
        self.point, self.nth, self.seen = point, nth, 0

    def __call__(self, point: str) -> None:
        if point == self.point:
            self.seen += 1
            if self.seen == self.nth:
                raise Crash(point)


def _box(c: Catalog) -> None:
    c.containers.create_namespace(NS)
    c.containers.create_namespace(f"{NS}.sub")
    c.policies.set_policy(NS, {"retain_versions": 3})
    c.tables.create_table(A, rows([1]))
    c.tables.create_table(B, rows([2]))


def namespace_records(c: Catalog, target: str) -> list[TrashRecord]:
    return [
        decode(TrashRecord, i.value, i.key)
        for i in c.store.scan_prefix(keys.trash_prefix(target + "/"))
        if decode(TrashRecord, i.value, i.key).kind == "namespace"
    ]


def interrupted_drop(lake: Lake, point: str, nth: int) -> None:
    crashing = lake.new_catalog(hook=CrashAt(point, nth))
    try:
        with pytest.raises(Crash):
            crashing.cascade.drop_namespace(NS, cascade=True)
    finally:
        crashing.close()


@pytest.mark.parametrize(
    ("point", "nth"),
    [
        ("drop-namespace:marked", 1),  # nothing filed yet: the retry files the record
        ("drop-namespace:filed", 1),  # record filed, no table moved
        ("drop-namespace:table", 2),  # the first table moved, the second not
        ("drop-namespace:before-commit", 2),  # ... stopped under the second table's lease
        ("drop-namespace:detached", 1),  # every table moved, namespaces still there
        ("drop-namespace:namespace", 2),  # the deepest namespace removed, the root not
    ],
)
def test_retried_cascade_continues_the_interrupted_one(lake: Lake, point: str, nth: int) -> None:
    c = lake.catalog
    _box(c)
    interrupted_drop(lake, point, nth)
    before = [(i.key, i.revision) for i in c.store.scan_prefix("")]
    with pytest.raises((ConcurrentModification, NamespaceNotFound)):
        c.trash.undrop_namespace(NS)  # an undrop waits for the interrupted drop to be finished
    assert [(i.key, i.revision) for i in c.store.scan_prefix("")] == before

    result = c.cascade.drop_namespace(NS, cascade=True)

    for space in (NS, f"{NS}.sub"):
        assert c.store.get(keys.namespace(NamespaceName.parse(space))) is None, space
    [record] = namespace_records(c, NS)
    assert result.commit_id == record.cascade_id  # the retry reports the cascade it finished
    assert [n.name for n in record.namespaces] == [NS, f"{NS}.sub"]
    assert record.policies and all(n.state == "active" for n in record.namespaces)
    tables = [
        decode(TrashRecord, i.value, i.key)
        for i in (c.store.get(k) for k in record.table_trash_keys)
        if i is not None
    ]
    assert sorted(t.target for t in tables) == [A, B], "the record does not list every table it moved"
    assert {t.cascade_id for t in tables} == {record.cascade_id}
    assert {t.expires_at_ms for t in tables} == {record.expires_at_ms}
    for name in (A, B):
        assert len([t for t in c.trash.list_trash(name) if t.target == name and t.kind == "table"]) == 1, name
    assert len([e for e in c.reads.history(NS) if e.operation == "drop namespace cascade"]) == 1

    c.trash.undrop_namespace(NS)  # one undrop undoes the one drop

    assert (ids_of(c.reads.open_table(A)), ids_of(c.reads.open_table(B))) == ([1], [2])
    assert c.trash.list_trash(NS) == []
    assert c.policies.effective_policy(A).policy.retain_versions == 3


def test_retry_does_not_continue_an_earlier_finished_cascade(lake: Lake) -> None:
    """An older cascade of the same name (finished, still in the trash) is not the one the
    retry continues: the retry files its own record and each undrop restores its own tables."""
    c = lake.catalog
    c.containers.create_namespace(NS)
    c.tables.create_table(f"{NS}.old", rows([9]))
    c.cascade.drop_namespace(NS, cascade=True)
    _box(c)
    interrupted_drop(lake, "drop-namespace:marked", 1)

    c.cascade.drop_namespace(NS, cascade=True)

    older, newer = namespace_records(c, NS)
    assert len(older.table_trash_keys) == 1 and len(newer.table_trash_keys) == 2
    c.trash.undrop_namespace(NS)
    assert (ids_of(c.reads.open_table(A)), ids_of(c.reads.open_table(B))) == ([1], [2])
    assert c.trash.list_trash(f"{NS}.old")  # still in the trash, under the older record
    c.cascade.drop_namespace(NS, cascade=True)
    c.trash.undrop_namespace(NS)  # newest first again: a, b back; the older record is still there
    assert len(namespace_records(c, NS)) == 1


def test_undrop_after_a_resumed_cascade_survives_its_own_interruption(lake: Lake) -> None:
    """The namespace undrop of a resumed cascade, interrupted after the first table, then run
    again, restores the rest once."""
    c = lake.catalog
    _box(c)
    interrupted_drop(lake, "drop-namespace:table", 2)
    c.cascade.drop_namespace(NS, cascade=True)
    crashing = lake.new_catalog(hook=CrashAt("undrop-namespace:table", 1))
    try:
        with pytest.raises(Crash):
            crashing.trash.undrop_namespace(NS)
    finally:
        crashing.close()
    c.trash.undrop_namespace(NS)
    assert (ids_of(c.reads.open_table(A)), ids_of(c.reads.open_table(B))) == ([1], [2])
    assert c.trash.list_trash(NS) == []
    for name in (A, B):
        assert len([e for e in c.reads.history(name) if e.operation == "undrop"]) == 1, name


def test_retry_does_not_continue_a_record_an_undrop_began_to_undo(lake: Lake) -> None:
    """An undrop interrupted after putting the namespaces back leaves its record (same
    namespaces, same identity) in the trash. A later cascade of the restored namespace,
    interrupted and retried, files its own record with its own deadline: it must not pour its
    tables into the old record (they would inherit the old, earlier deadline)."""
    c = lake.catalog
    _box(c)
    c.cascade.drop_namespace(NS, cascade=True)
    [first] = namespace_records(c, NS)
    crashing = lake.new_catalog(hook=CrashAt("undrop-namespace:table", 1))  # root, sub and one table back
    try:
        with pytest.raises(Crash):
            crashing.trash.undrop_namespace(NS)
    finally:
        crashing.close()
    c.tables.create_table(f"{NS}.c", rows([3]))
    interrupted_drop(lake, "drop-namespace:marked", 1)

    c.cascade.drop_namespace(NS, cascade=True)

    older, newer = namespace_records(c, NS)
    assert older.cascade_id == first.cascade_id and older.table_trash_keys == first.table_trash_keys
    assert newer.cascade_id != first.cascade_id and newer.dropped_at_ms > first.dropped_at_ms
    assert sorted(k.split("/")[1] for k in newer.table_trash_keys) in ([A, f"{NS}.c"], [B, f"{NS}.c"])
    c.trash.undrop_namespace(NS)  # the newer drop's tables
    c.trash.undrop_namespace(NS)  # what the interrupted undrop had not brought back yet
    assert (
        ids_of(c.reads.open_table(A)),
        ids_of(c.reads.open_table(B)),
        ids_of(c.reads.open_table(f"{NS}.c")),
    ) == (
        [1],
        [2],
        [3],
    )
    assert c.trash.list_trash(NS) == []


def _one_cascade(c: Catalog, cascade_id: str) -> None:
    """What one uninterrupted cascade of the box leaves, under ``cascade_id``."""
    [record] = namespace_records(c, NS)
    assert record.cascade_id == cascade_id
    for name in (A, B):
        [trash] = [t for t in c.trash.list_trash(name) if t.target == name and t.kind == "table"]
        assert trash.cascade_id == cascade_id
    c.trash.undrop_namespace(NS)
    assert (ids_of(c.reads.open_table(A)), ids_of(c.reads.open_table(B))) == ([1], [2])
    assert c.trash.list_trash(NS) == []


@pytest.mark.parametrize("first_at", ["drop-namespace:filed", "drop-namespace:table"])
def test_retry_while_the_first_attempt_still_runs(lake: Lake, first_at: str) -> None:
    """A retry (a client that timed out) arrives while the first attempt is parked after
    filing: the retry finishes the cascade under the first attempt's record, and the first
    attempt then finds its remaining work done."""
    c = lake.catalog
    _box(c)
    pause = Pause(first_at)
    first = lake.new_catalog(hook=pause)
    retry = lake.new_catalog()
    try:
        running = Background(lambda: first.cascade.drop_namespace(NS, cascade=True))
        assert pause.reached.wait(60)
        again = retry.cascade.drop_namespace(NS, cascade=True)
        pause.release()
        assert running.result().commit_id == again.commit_id
    finally:
        first.close()
        retry.close()
    _one_cascade(c, again.commit_id)


def test_two_runs_racing_to_file_file_once(lake: Lake) -> None:
    """The first attempt is parked after its marks, before filing; the retry files and parks.
    The first attempt's filing then fails on the root's revision, and it continues under the
    retry's record: one record, whichever run files first."""
    c = lake.catalog
    _box(c)
    first_pause, retry_pause = Pause("drop-namespace:marked"), Pause("drop-namespace:filed")
    first, retry = lake.new_catalog(hook=first_pause), lake.new_catalog(hook=retry_pause)
    try:
        running = Background(lambda: first.cascade.drop_namespace(NS, cascade=True))
        assert first_pause.reached.wait(60)
        retrying = Background(lambda: retry.cascade.drop_namespace(NS, cascade=True))
        assert retry_pause.reached.wait(60)  # the retry has filed its record
        first_pause.release()
        outcome = running.result()  # files nothing: moves both tables under the retry's record
        retry_pause.release()
        assert retrying.result().commit_id == outcome.commit_id
    finally:
        first.close()
        retry.close()
    _one_cascade(c, outcome.commit_id)
