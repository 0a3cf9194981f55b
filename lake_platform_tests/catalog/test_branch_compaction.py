"""Compacting a branch: its head's small fragments rewritten on its own line, under its lease;
main never moves, the branch's older versions still read, and a publish carries the compacted
head into main."""

from __future__ import annotations

import pytest

from lake_platform.catalog.provenance import Provenance
from lake_platform.errors import TableBranchNotFound
from lake_platform_tests.catalog.conftest import Lake, ids_of, rows

T = "p.w.ns.t"


def fragments(lake: Lake, branch: str, version: int | None = None) -> int:
    return len(lake.catalog.branches.open_branch(T, branch, version).dataset.get_fragments())


def test_compacting_a_branch_rewrites_its_fragments_and_leaves_main_alone(lake: Lake) -> None:
    cat = lake.catalog
    cat.tables.create_table(T, rows([1]))
    cat.branches.create_branch(T, "dev")
    for i in range(2, 6):
        cat.branch_writes.append(T, "dev", rows([i]))
    before = cat.branches.describe_branch(T, "dev")["version"]
    assert fragments(lake, "dev") == 5
    main = cat.reads.open_table(T).version

    done = cat.branch_compaction.compact_branch(T, "dev", by=Provenance(commit_id="compact-dev-1"))
    assert done.status == "committed" and done.detail["branch"] == "dev"
    after = cat.branches.describe_branch(T, "dev")["version"]
    assert after == done.version > before
    assert fragments(lake, "dev") == 1
    assert ids_of(cat.branches.open_branch(T, "dev")) == [1, 2, 3, 4, 5]
    assert ids_of(cat.branches.open_branch(T, "dev", before)) == [1, 2, 3, 4, 5]  # older versions read
    assert cat.reads.open_table(T).version == main and ids_of(cat.reads.open_table(T)) == [1]
    entry = next(e for e in cat.reads.history(T) if e.operation == "compact")
    assert entry.detail["branch"] == "dev"
    again = cat.branch_compaction.compact_branch(T, "dev")
    assert again.status == "nothing-to-do" and again.version == after

    cat.branch_publish.publish_branch(T, "dev")
    assert ids_of(cat.reads.open_table(T)) == [1, 2, 3, 4, 5]
    assert len(cat.reads.open_table(T).dataset.get_fragments()) == 1


def test_compacting_a_branch_in_the_trash_is_refused(lake: Lake) -> None:
    cat = lake.catalog
    cat.tables.create_table(T, rows([1]))
    cat.branches.create_branch(T, "dev")
    cat.branch_writes.append(T, "dev", rows([2]))
    cat.branch_trash.delete_branch(T, "dev")
    with pytest.raises(TableBranchNotFound):
        cat.branch_compaction.compact_branch(T, "dev")
    assert cat.reads.open_table(T).version == 1
