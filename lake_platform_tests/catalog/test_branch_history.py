"""A branch's history through the catalog: a restore whose answer is lost after it landed is
resolved by its commit id and a retry applies once; one failing before registration changes
nothing; a branch's version deletion leaves main's versions and a kept branch version readable.
The REST operations are in rest/handlers/test_branch_history.py."""

from __future__ import annotations

import pytest

from lake_platform.catalog.catalog import Catalog
from lake_platform.catalog.provenance import Provenance
from lake_platform.errors import ServiceUnavailable, TableVersionNotFound
from lake_platform.naming import TableName
from lake_platform_tests.catalog.conftest import Lake, rows, state
from lake_platform_tests.catalog.faults import ShiftedClock

T = "p.w.ns.t"


class _FailAt:
    """Raises once at ``point``: a lost connection the caller cannot tell landed or not."""

    def __init__(self, point: str) -> None:
        self.point, self.fired = point, False

    def __call__(self, point: str) -> None:
        if point == self.point and not self.fired:
            self.fired = True
            raise ServiceUnavailable(f"connection reset at {point}")


@pytest.fixture
def dev(lake: Lake) -> Lake:
    """``T`` at version 2 (ids 1, 2), branch ``dev`` from it with versions 3 (plus 3), 4 (plus 4)."""
    lake.catalog.tables.create_table(T, rows([1]))
    lake.catalog.tables.append(T, rows([2]))
    lake.catalog.branches.create_branch(T, "dev")
    for i in (3, 4):
        lake.catalog.branch_writes.append(T, "dev", rows([i]))
    return lake


def ids(lake: Lake, version: int | None = None) -> list[int]:
    return sorted(lake.catalog.branches.open_branch(T, "dev", version).dataset.to_table()["id"].to_pylist())


def head(lake: Lake) -> int:
    return lake.catalog.branches.branch(TableName.parse(T), "dev")[0].current_version


def test_a_restore_failing_after_it_landed_is_resolved_by_its_commit_id(dev: Lake) -> None:
    flaky = dev.new_catalog(hook=_FailAt("branch-restore:after-commit"))
    try:
        by = Provenance(commit_id="branch-restore-0001")
        done = flaky.branch_history.restore(T, "dev", 3, by=by)
        again = dev.catalog.branch_history.restore(T, "dev", 3, by=by)
    finally:
        flaky.close()
    assert (done.to_version, again.to_version, again.replayed) == (5, 5, True)
    assert (head(dev), ids(dev)) == (5, [1, 2, 3])
    assert dev.catalog.ctx.table(TableName.parse(T))[0].current_version == 2  # main never moved


def test_a_restore_failing_before_registration_changes_nothing(dev: Lake) -> None:
    before = state(dev)
    flaky = dev.new_catalog(hook=_FailAt("branch-restore:staged"))
    try:
        with pytest.raises(ServiceUnavailable):
            flaky.branch_history.restore(T, "dev", 3, by=Provenance(commit_id="branch-restore-0002"))
    finally:
        flaky.close()
    registry, _ = state(dev)
    assert [i for i in registry if not str(i[0]).startswith("lse/")] == [
        i for i in before[0] if not str(i[0]).startswith("lse/")
    ]
    with pytest.raises(TableVersionNotFound):  # main's version 1 is not on the branch's line
        dev.catalog.branch_history.restore(T, "dev", 1)
    assert head(dev) == 4


def test_deleting_a_branchs_versions_keeps_main_and_the_kept_version_readable(lake: Lake) -> None:
    """Versions superseded within the ticket lifetime are pinned; two hours later every version
    of the branch but its head goes, the version it was made at too (the branch's own record of
    it: main's stays, and so do main's files)."""
    lake.catalog.tables.create_table(T, rows([1]))
    lake.catalog.branches.create_branch(T, "dev")
    for i in (2, 3, 4):
        lake.catalog.branch_writes.append(T, "dev", rows([i]))
    everything = [1, 2, 3, 4, 5]
    now = lake.catalog.branch_history.delete_versions(T, "dev", everything)
    assert (now.status, now.detail["kept"]["pinned"]) == ("nothing-to-do", [1, 2, 3])
    later = Catalog(lake.settings, clock=ShiftedClock(2 * 3600))
    try:
        result = later.branch_history.delete_versions(T, "dev", everything)
    finally:
        later.close()
    assert (result.status, result.detail["versions_removed"]) == ("committed", [1, 2, 3])
    assert result.detail["kept"] == {"current": [4], "tagged": [], "branched": [], "pinned": []}
    assert sorted(lake.catalog.branches.readable_versions(T, "dev")[1]) == [4]
    assert sorted(lake.catalog.reads.readable_versions(T)[1]) == [1]
    assert lake.catalog.reads.open_table(T, 1).dataset.to_table()["id"].to_pylist() == [1]
    assert ids(lake) == [1, 2, 3, 4]
