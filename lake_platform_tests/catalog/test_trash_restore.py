"""A namespace undrop killed (SIGKILL, ``faults.kill_writer``) after claiming its cascade's trash
record ("restoring"), on SQLite and on DynamoDB (moto): a claim nobody holds any more must not
keep the cascade's tables in the trash for ever. Past the deadline, trash expiry takes the dead
undrop's claim back and purges what it had not restored; an undrop still running keeps its
claim, and each table ends either restored or purged, once."""

from __future__ import annotations

import signal
from typing import Any

import pytest

from lake_platform.catalog.catalog import Catalog
from lake_platform.errors import NamespaceNotFound, TableAlreadyExists
from lake_platform.naming import NamespaceName
from lake_platform.registry import keys
from lake_platform.settings import LakeSettings
from lake_platform_tests.catalog import faults
from lake_platform_tests.catalog.conftest import ids_of, rows
from lake_platform_tests.catalog.faults import Background, Pause

NS = "p.w.ns.box"
A, B = f"{NS}.a", f"{NS}.sub.b"
#: Far past every deadline the tests set.
LATER = 2**45


def op_undrop(catalog: Catalog, commit_id: str) -> Any:
    return catalog.trash.undrop_namespace(NS)


@pytest.fixture
def dropped(backend_settings: LakeSettings) -> LakeSettings:
    """``NS`` (A [1], sub with B [2]) cascade-dropped, then its undrop killed once the root
    namespace was back: the record claimed, nothing else restored."""
    with Catalog(backend_settings) as c:
        c.containers.create_namespace(NS)
        c.containers.create_namespace(f"{NS}.sub")
        c.tables.create_table(A, rows([1]))
        c.tables.create_table(B, rows([2]))
        c.cascade.drop_namespace(NS, cascade=True)
    return backend_settings


def kill_undrop(settings: LakeSettings, point: str = "undrop-namespace:namespace") -> None:
    code, _ = faults.kill_writer(settings, op_undrop, point, 1, "undrop-kill-1")
    assert code == -signal.SIGKILL, f"the undrop never reached {point}; exit code {code}"


def trash_of(c: Catalog) -> list[tuple[str, str]]:
    return sorted((r.target, r.state) for r in c.trash.list_trash(NS))


def test_expiry_purges_what_a_killed_undrop_left_when_its_retry_is_refused(dropped: LakeSettings) -> None:
    """The undrop dies after the root came back; a newer A takes the name, so its retry is
    refused (as it should be). Before: the record stayed "restoring" and expiry skipped it and
    its tables for ever (the old A and B never purged)."""
    kill_undrop(dropped)
    with Catalog(dropped) as c:
        c.tables.create_table(A, rows([7]))
        with pytest.raises(TableAlreadyExists):
            c.trash.undrop_namespace(NS)

        purged = c.trash.expire_trash(now_ms=LATER)

        assert sorted(p.table for p in purged) == [A, B]
        assert trash_of(c) == []
        assert ids_of(c.reads.open_table(A)) == [7]  # the newer A is untouched
        assert c.store.get(keys.namespace(NamespaceName.parse(NS))) is not None  # what came back stays


def test_expiry_purges_a_killed_undrop_a_new_drop_hid(dropped: LakeSettings) -> None:
    """The undrop dies; the half-restored namespace is dropped again (a new cascade, a newer
    record). Expiry past both deadlines leaves nothing of either in the trash."""
    kill_undrop(dropped)
    with Catalog(dropped) as c:
        c.tables.create_table(f"{NS}.x", rows([9]))
        c.cascade.drop_namespace(NS, cascade=True)

        purged = c.trash.expire_trash(now_ms=LATER)

        assert sorted(p.table for p in purged) == sorted([A, B, f"{NS}.x"])
        assert trash_of(c) == []


def test_a_retry_still_finishes_a_killed_undrop_before_expiry(dropped: LakeSettings) -> None:
    kill_undrop(dropped, "undrop-namespace:table")
    with Catalog(dropped) as c:
        c.trash.undrop_namespace(NS)
        assert (ids_of(c.reads.open_table(A)), ids_of(c.reads.open_table(B))) == ([1], [2])
        assert trash_of(c) == []
        for name in (A, B):
            assert len([e for e in c.reads.history(name) if e.operation == "undrop"]) == 1, name


def test_expiry_leaves_a_running_undrop_its_claim(dropped: LakeSettings) -> None:
    """An undrop parked after the root came back is alive: expiry past the deadline changes
    nothing of its cascade, and the undrop then brings every table back."""
    pause = Pause("undrop-namespace:namespace")
    undropper = Catalog(dropped, hook=pause)
    try:
        running = Background(lambda: undropper.trash.undrop_namespace(NS))
        assert pause.reached.wait(60)
        with Catalog(dropped) as c:
            before = trash_of(c)
            assert c.trash.expire_trash(now_ms=LATER) == []
            assert trash_of(c) == before
            pause.release()
            running.result()
            assert (ids_of(c.reads.open_table(A)), ids_of(c.reads.open_table(B))) == ([1], [2])
            assert trash_of(c) == []
    finally:
        pause.release()
        undropper.close()


def test_a_namespace_comes_back_only_under_its_parent(dropped: LakeSettings) -> None:
    """The undrop is parked once the root is back (empty yet), and the root is dropped. The
    undrop then must not put sub back under a root that is gone (before: sub was registered
    with no parent, and the undrop failed on the next table). Its rerun brings back it all."""
    pause = Pause("undrop-namespace:namespace")
    undropper = Catalog(dropped, hook=pause)
    try:
        running = Background(lambda: undropper.trash.undrop_namespace(NS))
        assert pause.reached.wait(60)
        with Catalog(dropped) as c:
            c.cascade.drop_namespace(NS)
            pause.release()
            with pytest.raises(NamespaceNotFound):
                running.result()
            assert c.store.get(keys.namespace(NamespaceName.parse(f"{NS}.sub"))) is None

            c.trash.undrop_namespace(NS)

            assert (ids_of(c.reads.open_table(A)), ids_of(c.reads.open_table(B))) == ([1], [2])
            assert trash_of(c) == []
    finally:
        pause.release()
        undropper.close()
