"""Trash expiry when purging one record fails: every other due record (tables, a cascade's
namespace record, deleted branches) is still expired, the failed one stays in the trash as it
was left (claimed, so no undrop brings back half-deleted data) and the next expiry finishes it;
the run ends with TrashExpiryFailed naming each failure."""

from __future__ import annotations

import contextlib
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from lake_platform.engine import lance_engine as engine
from lake_platform.errors import InvalidTableState, TableNotFound, TrashExpiryFailed
from lake_platform.registry import keys
from lake_platform_tests.catalog.conftest import Lake, ids_of, rows, state

FAILS, OTHER, BRANCHED, CASCADED = "p.w.ns.a", "p.w.ns.b", "p.w.ns.c", "p.w.ns2.t3"
#: Far past every deadline the tests set.
LATER = 2**45


def files(lake: Lake, location: str) -> list[Any]:
    return list(engine.list_files(location, lake.settings.storage_options(location)))


def due_trash(lake: Lake) -> dict[str, str]:
    """FAILS and OTHER dropped, BRANCHED's branch dev deleted, namespace p.w.ns2 (with CASCADED)
    cascade-dropped: each a trash record; FAILS's record sorts first. The tables' locations."""
    cat = lake.catalog
    cat.containers.create_namespace("p.w.ns2")
    for name in (FAILS, OTHER, BRANCHED, CASCADED):
        cat.tables.create_table(name, rows([1]))
    locations = {n: cat.reads.open_table(n).record.location for n in (FAILS, OTHER, CASCADED)}
    cat.branches.create_branch(BRANCHED, "dev")
    cat.branch_trash.delete_branch(BRANCHED, "dev")
    cat.trash.drop_table(FAILS)
    cat.trash.drop_table(OTHER)
    cat.cascade.drop_namespace("p.w.ns2", cascade=True)
    return locations


def assert_the_rest_expired(lake: Lake, locations: dict[str, str]) -> None:
    assert [(r.target, r.state) for r in lake.catalog.trash.list_trash()] == [(FAILS, "purging")]
    assert files(lake, locations[OTHER]) == [] and files(lake, locations[CASCADED]) == []
    assert lake.catalog.branches.list_branches(BRANCHED, include_trashed=True) == []
    with pytest.raises(TableNotFound):  # claimed: its data is half gone, no undrop takes it
        lake.catalog.trash.undrop_table(FAILS)


def assert_finished_by_the_next_run(lake: Lake, locations: dict[str, str]) -> None:
    purged = lake.catalog.trash.expire_trash(now_ms=LATER)
    assert [p.table for p in purged] == [FAILS]
    assert lake.catalog.trash.list_trash() == [] and files(lake, locations[FAILS]) == []
    assert [e.operation for e in lake.catalog.reads.history(FAILS)][-2:] == ["drop", "purge"]


@contextlib.contextmanager
def undeletable(path: Path) -> Iterator[None]:
    """``path`` cannot be deleted (a real EPERM/EACCES from the file system) while inside."""
    if os.geteuid() != 0:  # a folder without write permission keeps its entries
        path.parent.chmod(0o555)
        try:
            yield
        finally:
            path.parent.chmod(0o755)
        return
    made = subprocess.run(["chattr", "+i", str(path)], capture_output=True, text=True, check=False)  # noqa: S607
    if made.returncode != 0:
        pytest.skip(f"cannot make a file immutable here: {made.stderr.strip()[:200]}")
    try:
        yield
    finally:
        subprocess.run(["chattr", "-i", str(path)], check=True)  # noqa: S607


@pytest.mark.parametrize("storage", ["local"], indirect=True)
def test_a_file_that_cannot_be_deleted_fails_its_record_alone(lake: Lake) -> None:
    """The local delete ignored every error: the record was deleted and the purge logged while
    the file stayed; and any storage error raised out of expiry stopped every later record."""
    locations = due_trash(lake)
    stuck = next(Path(locations[FAILS]).rglob("*.lance"))
    with undeletable(stuck):
        with pytest.raises(TrashExpiryFailed, match=f"{FAILS}:.*(not permitted|Permission denied)") as info:
            lake.catalog.trash.expire_trash(now_ms=LATER)
        assert [target for target, _ in info.value.failures] == [FAILS]
        assert_the_rest_expired(lake, locations)
        assert stuck.exists()
    assert_finished_by_the_next_run(lake, locations)


def test_a_storage_error_on_one_record_does_not_stop_the_others(lake: Lake) -> None:
    """The first purge's storage call failing (an outage on its prefix) ended expiry: nothing
    after it, branches included, was expired."""
    locations = due_trash(lake)
    seen: list[str] = []

    def outage(point: str) -> None:
        seen.append(point)
        if point == "expire:claimed" and seen.count(point) == 1:
            raise OSError("S3 error: 503 Slow Down on the first prefix")

    expirer = lake.new_catalog(hook=outage)
    try:
        with pytest.raises(TrashExpiryFailed, match=f"{FAILS}: OSError: S3 error") as info:
            expirer.trash.expire_trash(now_ms=LATER)
    finally:
        expirer.close()
    assert [target for target, _ in info.value.failures] == [FAILS]
    assert files(lake, locations[FAILS])  # nothing of it deleted yet
    assert_the_rest_expired(lake, locations)
    assert_finished_by_the_next_run(lake, locations)


def test_an_undrop_of_a_namespace_wins_against_expiry_of_its_record(lake: Lake) -> None:
    """Expiry deleted the namespace's trash record once the undrop had restored every table
    (logging "purge namespace"); the undrop then failed with ConditionFailed, having restored
    everything."""
    locations = due_trash(lake)
    expirer = lake.new_catalog()

    def expire_meanwhile(point: str) -> None:
        if point == "undrop-namespace:table":  # every table of p.w.ns2 is back now
            expirer.trash.expire_trash(now_ms=LATER, only=keys_of(lake, "p.w.ns2"))

    undropper = lake.new_catalog(hook=expire_meanwhile)
    try:
        undropper.trash.undrop_namespace("p.w.ns2")
    finally:
        undropper.close()
        expirer.close()
    assert ids_of(lake.catalog.reads.open_table(CASCADED)) == [1]
    assert files(lake, locations[CASCADED])
    assert [e.target for e in lake.catalog.trash.list_trash() if e.target.startswith("p.w.ns2")] == []
    assert [e.operation for e in lake.catalog.reads.history("p.w.ns2")][-2:] == [
        "undrop namespace",
        "undrop namespace cascade",
    ]


def test_an_undrop_of_a_namespace_whose_table_expiry_claimed_changes_nothing(lake: Lake) -> None:
    """A table of the namespace claimed by expiry (its files being deleted): the undrop
    brought the namespace back without it; now it is refused unchanged and expiry finishes."""
    locations = due_trash(lake)
    undropper = lake.new_catalog()
    refused: list[Exception] = []

    def undrop_meanwhile(point: str) -> None:
        if point == "expire:claimed":
            before = state(lake)
            with pytest.raises(InvalidTableState, match="being purged") as info:
                undropper.trash.undrop_namespace("p.w.ns2")
            refused.append(info.value)
            assert state(lake) == before

    expirer = lake.new_catalog(hook=undrop_meanwhile)
    try:
        expirer.trash.expire_trash(now_ms=LATER, only=keys_of(lake, "p.w.ns2"))
    finally:
        expirer.close()
        undropper.close()
    assert refused
    assert files(lake, locations[CASCADED]) == []
    assert [e.target for e in lake.catalog.trash.list_trash() if e.target.startswith("p.w.ns2")] == []
    assert [c.name for c in lake.catalog.containers.list_namespaces("p.w")] == ["p.w.ns"]


def keys_of(lake: Lake, prefix: str) -> list[str]:
    """The trash keys of the records whose target is ``prefix`` or below it."""
    return [
        i.key
        for i in lake.catalog.store.scan_prefix(keys.trash_prefix(prefix))
        if i.key.startswith((keys.trash_prefix(prefix) + "/", keys.trash_prefix(prefix) + "."))
    ]
