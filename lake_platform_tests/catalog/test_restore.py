"""Restores: a new version equal to an older registered one, one logged commit; a version the
registry does not hold, or a reader, changes nothing."""

from __future__ import annotations

import pytest

from lake_platform.catalog.catalog import Catalog
from lake_platform.catalog.principals import Principal
from lake_platform.catalog.provenance import Provenance
from lake_platform.catalog.results import CommitResult
from lake_platform.errors import PermissionDenied, TableVersionNotFound
from lake_platform_tests.catalog.conftest import Lake, ids_of, rows, sent_at_once, staged_manifests, state

T = "p.w.ns.t"


def test_restore_makes_the_old_content_current(lake: Lake) -> None:
    lake.catalog.tables.create_table(T, rows([1, 2]))
    lake.catalog.tables.append(T, rows([3]))
    lake.catalog.alter.add_column(T, "extra", "int32")
    result = lake.catalog.restores.restore_table(T, 1)
    assert (result.from_version, result.to_version) == (3, 4)
    snap = lake.catalog.reads.open_table(T)
    assert ids_of(snap) == [1, 2] and snap.schema.names == ["id", "tag"]
    assert lake.catalog.schemas.table_schema(T).names == ["id", "tag"]  # the registry's schema too
    entry = lake.catalog.reads.commit(T, result.commit_id)
    assert entry is not None and (entry.operation, entry.detail) == ("restore", {"restored_version": 1})


def test_refusals_change_nothing(lake: Lake) -> None:
    lake.catalog.tables.create_table(T, rows([1]))
    lake.catalog.tables.append(T, rows([2]))
    before = state(lake)
    with pytest.raises(TableVersionNotFound):
        lake.catalog.restores.restore_table(T, 7)
    reader = Principal(name="r", kind="token", project="p", role="reader")
    with pytest.raises(PermissionDenied):
        lake.catalog.restores.restore_table(T, 1, by=Provenance(principal=reader))
    assert state(lake) == before


@pytest.mark.parametrize("branch", [None, "dev"])
def test_one_restore_sent_twice_at_once_lands_once_and_both_answer_it(lake: Lake, branch: str | None) -> None:
    """Two catalogs (two servers) given one commit id at once, on main or a branch: whichever
    takes the line's lease second finds the first restore landed and answers it; no second
    restore version."""
    lake.catalog.tables.create_table(T, rows([1]))
    lake.catalog.branches.create_branch(T, "dev")
    if branch is None:
        lake.catalog.tables.append(T, rows([2]))
    else:
        lake.catalog.branch_writes.append(T, "dev", rows([2]))

    def restore(catalog: Catalog) -> object:
        by = Provenance(commit_id="sent-twice-0003")
        if branch is None:
            return catalog.restores.restore_table(T, 1, by=by)
        return catalog.branch_history.restore(T, branch, 1, by=by)

    answers = sent_at_once(lake, restore)
    assert len(answers) == 2 and all(isinstance(a, CommitResult) for a in answers), answers
    assert len({(a.commit_id, a.to_version) for a in answers}) == 1  # type: ignore[union-attr]
    operations = [e.operation for e in lake.catalog.reads.log(T)]
    assert operations.count("restore") == 1, operations
    assert staged_manifests(lake) == []  # Lance ran it once
