"""``branch_trash``: undrop of a branch that is not in the trash. A live branch is
TableBranchAlreadyExists; one being purged (a purged branch another branch builds on stays
"purging" until that one is gone) is InvalidTableState saying so; neither changes anything.
A protect that lands while a delete waits for the branch's lease stops it. A purge killed after
its commit is finished by the next expiry, and no undrop brings the branch back meanwhile."""

from __future__ import annotations

import signal
from typing import Any

import pytest

from lake_platform.catalog.catalog import Catalog
from lake_platform.errors import InvalidTableState, Protected, TableBranchAlreadyExists
from lake_platform.settings import LakeSettings
from lake_platform_tests.catalog import faults
from lake_platform_tests.catalog.conftest import Lake, rows, state, unleased

T = "p.w.ns.t"


def test_undropping_a_branch_being_purged_says_so_and_changes_nothing(lake: Lake) -> None:
    """It answered TableBranchAlreadyExists, as if the branch were live."""
    cat = lake.catalog
    cat.tables.create_table(T, rows([1, 2]))
    cat.branches.create_branch(T, "base")
    cat.branch_writes.append(T, "base", rows([10]))
    cat.branches.create_branch(T, "child", from_branch="base")
    cat.branch_trash.delete_branch(T, "base", purge=True)
    assert [b.state for b in cat.branches.list_branches(T, include_trashed=True)] == ["purging", "active"]
    before = state(lake)
    with pytest.raises(InvalidTableState, match="branch base of p.w.ns.t is being purged"):
        cat.branch_trash.undrop_branch(T, "base")
    with pytest.raises(TableBranchAlreadyExists, match="branch child of p.w.ns.t is not in the trash"):
        cat.branch_trash.undrop_branch(T, "child")
    assert state(lake) == before


@pytest.mark.parametrize("purge", [False, True])
def test_a_table_protected_while_a_branch_delete_waits_keeps_the_branch(lake: Lake, purge: bool) -> None:
    """The delete checked protection before the lease and committed on the branch record alone:
    another admin's protect in between was ignored, and with purge the branch was destroyed."""
    lake.catalog.tables.create_table(T, rows([1]))
    lake.catalog.branches.create_branch(T, "dev")
    lake.catalog.branch_writes.append(T, "dev", rows([2]))
    other = lake.new_catalog()
    armed, protected = [True], []

    def protect_meanwhile(point: str) -> None:
        if point == "branch-delete:resolved" and armed:
            armed.clear()
            other.containers.set_protected(T, True)
            protected.append(unleased(state(lake)))

    deleter = lake.new_catalog(hook=protect_meanwhile)
    try:
        with pytest.raises(Protected, match="is protected"):
            deleter.branch_trash.delete_branch(T, "dev", purge=purge)
        assert not armed
        assert unleased(state(lake)) == protected[0]
        assert [b.state for b in lake.catalog.branches.list_branches(T, include_trashed=True)] == ["active"]
    finally:
        deleter.close()
        other.close()


def op_purge_branch(catalog: Catalog, commit_id: str) -> Any:
    return catalog.branch_trash.delete_branch(T, "dev", purge=True)


def test_a_purge_killed_after_its_commit_is_not_undone_by_an_undrop(backend_settings: LakeSettings) -> None:
    """An admin's purge of a branch (SQLite and DynamoDB) killed once its delete landed: the
    branch was filed "trashed", so a writer's undrop brought back what the admin purged (and a
    purge racing an undrop the same). Filed claimed for purging, as drop --purge files a table."""
    with Catalog(backend_settings) as c:
        c.tables.create_table(T, rows([1]))
        c.branches.create_branch(T, "dev")
        c.branch_writes.append(T, "dev", rows([2]))
    code, _ = faults.kill_writer(backend_settings, op_purge_branch, "branch-delete:filed", 1, "purge-kill-1")
    assert code == -signal.SIGKILL, f"the purge never reached branch-delete:filed; exit code {code}"
    with Catalog(backend_settings) as c:
        with pytest.raises(InvalidTableState, match="being purged"):
            c.branch_trash.undrop_branch(T, "dev")
        c.trash.expire_trash()
        assert c.branches.list_branches(T, include_trashed=True) == []
        assert [e.operation for e in c.reads.history(T)][-2:] == ["branch-delete", "branch-purge"]
