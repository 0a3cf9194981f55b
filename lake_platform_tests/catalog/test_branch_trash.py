"""``branch_trash``: undrop of a branch that is not in the trash. A live branch is
TableBranchAlreadyExists; one being purged (a purged branch another branch builds on stays
"purging" until that one is gone) is InvalidTableState saying so; neither changes anything."""

from __future__ import annotations

import pytest

from lake_platform.errors import InvalidTableState, TableBranchAlreadyExists
from lake_platform_tests.catalog.conftest import Lake, rows, state

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
