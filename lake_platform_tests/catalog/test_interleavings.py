"""Two operations on one name, interleaved at exact steps through the catalog's hook points:
drop / recreate / undrop, trash expiry / undrop, and compaction / delete.

One operation runs in a thread with a ``Pause`` at a named point; the test runs the other one
to completion while it is parked there, then lets it go. Whatever the order, every registered
table must still read all its data, at every registered version, and the loser of a race must
lose entirely (a typed error and no change).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from lake_platform.catalog.catalog import Catalog
from lake_platform.errors import TableAlreadyExists, TableNotFound
from lake_platform_tests.catalog.conftest import Lake, ids_of, rows
from lake_platform_tests.catalog.faults import Background, Pause, check_registry_matches_engine, registered

T = "p.w.ns.t"
FAR_FUTURE_MS = 1 << 62

# Interleavings are about the catalog's ordering, not the store: one local folder is enough.
pytestmark = pytest.mark.parametrize("storage", ["local"], indirect=True)


def assert_tables(c: Catalog, expected: dict[str, list[int]]) -> None:
    """Exactly these tables are registered, with these rows, and every registered version of
    each opens at that version."""
    check_registry_matches_engine(c)
    assert {name: ids_of(c.reads.open_table(name)) for name in registered(c)} == expected


def table_folders(lake: Lake) -> set[str]:
    return {p.name for p in (Path(lake.root) / "ns").glob("*.lance")}


def paused(lake: Lake, point: str) -> tuple[Catalog, Pause]:
    pause = Pause(point)
    return lake.new_catalog(hook=pause), pause


# == drop / recreate / undrop =====================================================================


def test_undrop_that_checked_the_name_loses_to_a_recreate(lake: Lake) -> None:
    c = lake.catalog
    c.tables.create_table(T, rows([1, 2]))
    old = c.reads.open_table(T).record.incarnation
    c.trash.drop_table(T)
    undropper, pause = paused(lake, "undrop:checked")
    undrop = Background(lambda: undropper.trash.undrop_table(T))
    assert pause.reached.wait(30)  # the name was free when the undrop looked
    c.tables.create_table(T, rows([7, 8]))
    pause.release()
    assert isinstance(undrop.error(), TableAlreadyExists)
    assert_tables(c, {T: [7, 8]})
    # The dropped incarnation is still whole in the trash and comes back under another name.
    assert [t.table.incarnation for t in c.trash.list_trash(T) if t.table] == [old]
    c.trash.undrop_table(T, as_name="p.w.ns.t_old")
    assert_tables(c, {T: [7, 8], "p.w.ns.t_old": [1, 2]})
    undropper.close()


def test_recreate_that_staged_its_data_loses_to_an_undrop(lake: Lake) -> None:
    c = lake.catalog
    c.tables.create_table(T, rows([1, 2]))
    c.tables.append(T, rows([3]))
    old = c.reads.open_table(T).record
    c.trash.drop_table(T)
    creator, pause = paused(lake, "create:staged")
    create = Background(lambda: creator.tables.create_table(T, rows([7, 8])))
    assert pause.reached.wait(30)  # the new incarnation's files are written, nothing registered
    assert len(table_folders(lake)) == 2
    c.trash.undrop_table(T)
    pause.release()
    assert isinstance(create.error(), TableAlreadyExists)
    assert c.reads.open_table(T).record.incarnation == old.incarnation
    assert_tables(c, {T: [1, 2, 3]})
    assert ids_of(c.reads.open_table(T, 1)) == [1, 2]
    # The losing create removed its own, never-registered folder and nothing else.
    assert table_folders(lake) == {Path(old.location).name}
    creator.close()


def test_purging_drop_paused_after_deregistering_spares_the_replacement(lake: Lake) -> None:
    c = lake.catalog
    c.tables.create_table(T, rows([1]))
    dropper, pause = paused(lake, "drop:after-commit")
    drop = Background(lambda: dropper.trash.drop_table(T, purge=True))
    assert pause.reached.wait(30)  # deregistered; the old data is not destroyed yet
    c.tables.create_table(T, rows([7, 8]))
    c.tables.append(T, rows([9]))
    replacement = c.reads.open_table(T).record
    pause.release()
    drop.result()
    assert c.reads.open_table(T).record.incarnation == replacement.incarnation
    assert_tables(c, {T: [7, 8, 9]})
    assert table_folders(lake) == {Path(replacement.location).name}
    with pytest.raises(TableNotFound):
        c.trash.undrop_table(T)  # purged: nothing in the trash
    dropper.close()


def test_drop_waiting_at_its_commit_keeps_the_name_taken(lake: Lake) -> None:
    """A drop holds the table's lease from its re-read to its commit: the name is not free,
    and the undrop of an older incarnation cannot take it, until the drop lands."""
    c = lake.catalog
    c.tables.create_table(T, rows([1]))
    c.trash.drop_table(T)
    c.tables.create_table(T, rows([2]))
    dropper, pause = paused(lake, "drop:before-commit")
    drop = Background(lambda: dropper.trash.drop_table(T))
    assert pause.reached.wait(30)
    with pytest.raises(TableAlreadyExists):
        c.tables.create_table(T, rows([3]))
    with pytest.raises(TableAlreadyExists):
        c.trash.undrop_table(T)
    assert_tables(c, {T: [2]})
    pause.release()
    drop.result()
    assert_tables(c, {})
    c.trash.undrop_table(T)  # the newest drop comes back first
    assert_tables(c, {T: [2]})
    c.trash.undrop_table(T, as_name="p.w.ns.first")
    assert_tables(c, {T: [2], "p.w.ns.first": [1]})
    dropper.close()


# == trash expiry / undrop ========================================================================


def test_expiry_that_found_the_record_loses_to_an_undrop(lake: Lake) -> None:
    c = lake.catalog
    c.tables.create_table(T, rows([1, 2]))
    c.tables.append(T, rows([3]))
    c.trash.drop_table(T)
    expirer, pause = paused(lake, "expire:found")
    expiry = Background(lambda: expirer.trash.expire_trash(now_ms=FAR_FUTURE_MS))
    assert pause.reached.wait(30)  # it read the trash record; it has not claimed it
    c.trash.undrop_table(T)
    pause.release()
    assert expiry.result() == []  # its claim failed: nothing purged
    assert_tables(c, {T: [1, 2, 3]})
    assert ids_of(c.reads.open_table(T, 1)) == [1, 2]
    expirer.close()


def test_undrop_refused_once_expiry_claimed_the_record(lake: Lake) -> None:
    c = lake.catalog
    c.tables.create_table(T, rows([1]))
    c.tables.create_table("p.w.ns.keep", rows([42]))
    c.trash.drop_table(T)
    expirer, pause = paused(lake, "expire:claimed")
    expiry = Background(lambda: expirer.trash.expire_trash(now_ms=FAR_FUTURE_MS))
    assert pause.reached.wait(30)  # claimed ("purging"); the data still exists
    with pytest.raises(TableNotFound):
        c.trash.undrop_table(T)
    assert_tables(c, {"p.w.ns.keep": [42]})  # nothing registered points at the doomed data
    pause.release()
    assert [r.table for r in expiry.result()] == [T]
    assert c.trash.list_trash() == []
    assert_tables(c, {"p.w.ns.keep": [42]})
    expirer.close()


def test_undrop_that_picked_the_record_loses_to_an_expiry(lake: Lake) -> None:
    c = lake.catalog
    c.tables.create_table(T, rows([1]))
    c.trash.drop_table(T)
    undropper, pause = paused(lake, "undrop:checked")
    undrop = Background(lambda: undropper.trash.undrop_table(T))
    assert pause.reached.wait(30)  # it holds the trash record as it read it
    assert [r.table for r in c.trash.expire_trash(now_ms=FAR_FUTURE_MS)] == [T]
    pause.release()
    assert isinstance(undrop.error(), TableNotFound)  # never a table whose data is gone
    assert_tables(c, {})
    assert table_folders(lake) == set()
    undropper.close()


# == compaction / delete ==========================================================================


def _fragmented(c: Catalog) -> None:
    c.tables.create_table(T, rows([0]))
    for i in range(1, 4):
        c.tables.append(T, rows([i]))


def test_compaction_planned_before_a_delete_never_resurrects_its_rows(lake: Lake) -> None:
    c = lake.catalog
    _fragmented(c)
    deleter, pause = paused(lake, "delete:staged")
    delete = Background(lambda: deleter.tables.delete_rows(T, "id = 2"))
    assert pause.reached.wait(30)  # Lance staged the delete; the registry has not seen it
    planned = c.versions.plan_compaction(T)
    results = c.versions.execute_compaction(planned)
    pause.release()
    deleted = delete.result()
    assert planned.read_version < deleted.to_version
    outcome = c.versions.commit_compaction(planned, results)
    assert outcome.status in ("committed", "skipped-stale")
    assert_tables(c, {T: [0, 1, 3]})
    deleter.close()


def test_compaction_planned_on_an_unfinalized_delete(lake: Lake) -> None:
    """The delete has landed but not finalized its manifest (it still holds the lease) when the
    compaction plans and rewrites; the compaction then commits after it."""
    c = lake.catalog
    _fragmented(c)
    deleter, pause = paused(lake, "delete:after-commit")
    delete = Background(lambda: deleter.tables.delete_rows(T, "id = 2"))
    assert pause.reached.wait(30)
    planned = c.versions.plan_compaction(T)
    results = c.versions.execute_compaction(planned)
    pause.release()
    deleted = delete.result()
    assert planned.read_version == deleted.to_version
    assert c.versions.commit_compaction(planned, results).status == "committed"
    assert_tables(c, {T: [0, 1, 3]})
    assert c.reads.describe_table(T).fragments == 1
    deleter.close()


def test_delete_queued_behind_a_compaction_commit_lands_on_top(lake: Lake) -> None:
    c = lake.catalog
    _fragmented(c)
    compactor, pause = paused(lake, "compact:before-write")
    compaction = Background(lambda: compactor.versions.compact(T))
    assert pause.reached.wait(30)  # holds the table's lease until its commit is done
    other = lake.new_catalog()
    delete = Background(lambda: other.tables.delete_rows(T, "id = 2"))
    pause.release()
    compacted = compaction.result()
    deleted = delete.result()
    assert compacted.status == "committed"
    assert deleted.to_version is not None and deleted.to_version > compacted.version
    assert_tables(c, {T: [0, 1, 3]})
    assert ids_of(c.reads.open_table(T, compacted.version)) == [0, 1, 2, 3]
    compactor.close()
    other.close()
