"""Renames: the registration moves (incarnation, location, versions, tags, policy) in one
registry transaction; refusals change nothing."""

from __future__ import annotations

import time
from datetime import timedelta

import pytest

from lake_platform.catalog.catalog import Catalog
from lake_platform.errors import InvalidInput, NamespaceNotFound, Protected, TableAlreadyExists, TableNotFound
from lake_platform.maintenance import orphans
from lake_platform.settings import LakeSettings
from lake_platform_tests.catalog.conftest import Lake, ids_of, rows, state, unleased

T = "p.w.ns.t"
TWO_DAYS = 2 * 86400


def test_rename_moves_the_registration(lake: Lake) -> None:
    lake.catalog.tables.create_table(T, rows([1, 2]))
    lake.catalog.tags.create_tag(T, "v1", 1)
    lake.catalog.policies.set_policy(T, {"target_rows_per_fragment": 1000})
    lake.catalog.containers.create_namespace("p.w.other")
    before = lake.catalog.reads.open_table(T).record
    lake.catalog.renames.rename_table(T, "p.w.other.u")
    with pytest.raises(TableNotFound):
        lake.catalog.reads.open_table(T)
    after = lake.catalog.reads.open_table("p.w.other.u")
    assert (after.record.incarnation, after.record.location) == (before.incarnation, before.location)
    assert ids_of(after) == [1, 2] and lake.catalog.tags.list_tags("p.w.other.u") == {"v1": 1}
    moved = lake.catalog.policies.effective_policy("p.w.other.u")
    assert (moved.source, moved.policy.target_rows_per_fragment) == ("p.w.other.u", 1000)
    lake.catalog.tables.append("p.w.other.u", rows([3]))  # writes go on under the new name
    assert ids_of(lake.catalog.reads.open_table("p.w.other.u")) == [1, 2, 3]


def test_refusals_change_nothing(lake: Lake) -> None:
    lake.catalog.tables.create_table(T, rows([1]))
    lake.catalog.tables.create_table("p.w.ns.taken", rows([1]))
    before = state(lake)
    for target, error in [
        ("p.w.ns.taken", TableAlreadyExists),
        ("p.w.nope.t2", NamespaceNotFound),
        ("p.w2.ns.t2", InvalidInput),
        (T, InvalidInput),
    ]:
        with pytest.raises(error):
            lake.catalog.renames.rename_table(T, target)
    assert state(lake) == before
    lake.catalog.containers.set_protected(T, True)
    before = state(lake)
    with pytest.raises(Protected):
        lake.catalog.renames.rename_table(T, "p.w.ns.t2")
    assert state(lake) == before


def test_rename_takes_the_tables_branches_along(backend_settings: LakeSettings) -> None:
    """A branch (live or in the trash) belongs to the incarnation, not the name: after a rename
    it is listed, read, written and undropped under the new name, and the orphan scan of the new
    name counts its Lance branch as named, so a reclaim never takes the branch's files. Before,
    the records stayed under the old name: the renamed table had no branches and a scan past
    the age gate listed both Lance branches as unknown (a reclaim deletes those)."""
    with Catalog(backend_settings) as c:
        c.tables.create_table(T, rows([1, 2]))
        c.branches.create_branch(T, "dev")
        c.branch_writes.append(T, "dev", rows([3]))
        c.branches.create_branch(T, "gone")
        c.branch_trash.delete_branch(T, "gone")
        c.renames.rename_table(T, "p.w.ns.u")
        assert [b.branch for b in c.branches.list_branches("p.w.ns.u")] == ["dev"]
        assert ids_of(c.branches.open_branch("p.w.ns.u", "dev")) == [1, 2, 3]
        report = orphans.scan(c, "p.w.ns.u", min_age=timedelta(hours=1), now=time.time() + TWO_DAYS)
        assert report.unknown_branches == [] and len(report.branches) == 2
        c.branch_writes.append("p.w.ns.u", "dev", rows([4]))
        c.branch_trash.undrop_branch("p.w.ns.u", "gone")
        assert ids_of(c.branches.open_branch("p.w.ns.u", "gone")) == [1, 2]
        assert ids_of(c.branches.open_branch("p.w.ns.u", "dev")) == [1, 2, 3, 4]
        # The old name is free and holds nothing of the table: a new table there has no branches.
        c.tables.create_table(T, rows([9]))
        assert c.branches.list_branches(T, include_trashed=True) == []
        c.branches.create_branch(T, "dev")
        assert ids_of(c.branches.open_branch("p.w.ns.u", "dev")) == [1, 2, 3, 4]


def test_a_table_protected_while_a_rename_waits_is_not_renamed(lake: Lake) -> None:
    """Protection landing between the rename's check and its commit under the lease (another
    admin, another process) still stops it: Protected, nothing moved."""
    lake.catalog.tables.create_table(T, rows([1]))
    lake.catalog.containers.create_namespace("p.w.other")
    other = lake.new_catalog()
    armed, protected = [True], []

    def protect_meanwhile(point: str) -> None:
        if point == "rename:resolved" and armed:
            armed.clear()
            other.containers.set_protected(T, True)
            protected.append(unleased(state(lake)))

    renamer = lake.new_catalog(hook=protect_meanwhile)
    try:
        with pytest.raises(Protected, match="is protected"):
            renamer.renames.rename_table(T, "p.w.other.u")
        assert not armed  # the protection landed where the test put it
        # As the protect left it, but for the lease the refusal held and gave back.
        assert unleased(state(lake)) == protected[0]
    finally:
        renamer.close()
        other.close()
