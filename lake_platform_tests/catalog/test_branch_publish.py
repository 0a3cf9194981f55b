"""Publishing the same-named branch of several tables at once (write-audit-publish of a run that
wrote several tables): every main moves in one registry transaction or none does, each new head
names the others, and a retry under the commit id publishes nothing twice."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from lake_platform.catalog.provenance import Provenance
from lake_platform.errors import BranchDiverged, InvalidInput, TableBranchNotFound
from lake_platform.naming import TableName
from lake_platform.registry import keys
from lake_platform.registry.records import VersionRecord, decode
from lake_platform_tests.catalog.conftest import Lake, ids_of, rows

ORDERS, LINES = "p.w.ns.orders", "p.w.ns.order_lines"


@pytest.fixture
def run_branch(lake: Lake) -> Iterator[Lake]:
    """Both tables at version 1, each with branch ``run_1`` one append ahead of main."""
    cat = lake.catalog
    for name, first in ((ORDERS, 1), (LINES, 100)):
        cat.tables.create_table(name, rows([first]))
        cat.branches.create_branch(name, "run_1")
        cat.branch_writes.append(name, "run_1", rows([first + 1]))
    yield lake


def main_state(lake: Lake) -> dict[str, tuple[int, list[int]]]:
    out = {}
    for name in (ORDERS, LINES):
        snap = lake.catalog.reads.open_table(name)
        out[name] = (snap.version, ids_of(snap))
    return out


def head_record(lake: Lake, name: str) -> VersionRecord:
    record = lake.catalog.ctx.table(TableName.parse(name))[0]
    item = lake.catalog.store.get(keys.version(record.incarnation, record.current_version))
    assert item is not None
    return decode(VersionRecord, item.value, item.key)


def test_every_main_moves_in_one_commit_and_each_head_names_the_others(run_branch: Lake) -> None:
    by = Provenance(commit_id="wap-publish-0001")
    results = run_branch.catalog.branch_publish.publish_branches([ORDERS, LINES], "run_1", by=by)
    assert [(r.table, r.from_version, r.to_version) for r in results] == [(LINES, 1, 2), (ORDERS, 1, 2)]
    assert [r.commit_id for r in results] == ["wap-publish-0001-t0", "wap-publish-0001-t1"]
    assert main_state(run_branch) == {ORDERS: (2, [1, 2]), LINES: (2, [100, 101])}
    assert head_record(run_branch, ORDERS).transaction == {LINES: 2}
    assert head_record(run_branch, LINES).transaction == {ORDERS: 2}
    for name in (ORDERS, LINES):
        assert run_branch.catalog.branches.list_branches(name) == []
        assert run_branch.catalog.reads.history(name)[-1].operation == "publish"
    again = run_branch.catalog.branch_publish.publish_branches([ORDERS, LINES], "run_1", by=by)
    assert all(r.replayed for r in again) and main_state(run_branch)[ORDERS][0] == 2


def test_one_diverged_table_publishes_none(run_branch: Lake) -> None:
    run_branch.catalog.tables.append(LINES, rows([999]))  # main of one table moved on
    before = main_state(run_branch)
    with pytest.raises(BranchDiverged, match="order_lines"):
        run_branch.catalog.branch_publish.publish_branches([ORDERS, LINES], "run_1")
    assert main_state(run_branch) == before
    for name in (ORDERS, LINES):  # both branches kept, for inspection
        assert [b.branch for b in run_branch.catalog.branches.list_branches(name)] == ["run_1"]


def test_refusals_change_nothing(run_branch: Lake) -> None:
    before = main_state(run_branch)
    with pytest.raises(TableBranchNotFound):
        run_branch.catalog.branch_publish.publish_branches([ORDERS, LINES], "run_2")
    with pytest.raises(InvalidInput):
        run_branch.catalog.branch_publish.publish_branches([], "run_1")
    assert main_state(run_branch) == before
