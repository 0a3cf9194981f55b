"""A write that had nothing to commit (a delete selecting no row, an append of no rows) under a
caller's own commit id, on main and on a branch: its answer ("nothing, at version N") is what a
retry under the id answers too, whatever landed in between; it writes no version and no log
entry. Without a marker, the retry ran the delete again and removed rows that arrived meanwhile.
Two such calls sent at once under one id answer as two commits would (``commit_ids``): the same
write is answered with the first, another one is CommitIdReused."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pyarrow as pa
import pytest

from lake_platform.catalog.catalog import Catalog
from lake_platform.catalog.provenance import Provenance
from lake_platform.errors import CommitIdReused, InvalidInput
from lake_platform_tests.catalog.conftest import Lake, ids_of, rows
from lake_platform_tests.catalog.test_commit_id_races import ID, raced

T = "p.w.ns.t"
BY = Provenance(commit_id=ID)


@pytest.fixture
def storage() -> dict[str, Any]:
    """Registry records decide it: the local warehouse is enough."""
    return {"root": None, "settings": {}}


@pytest.fixture
def table(lake: Lake) -> Lake:
    """``T`` with ids 1 and 2 at version 1, and a branch ``dev`` of it."""
    lake.catalog.tables.create_table(T, rows([1, 2]))
    lake.catalog.branches.create_branch(T, "dev")
    return lake


def empty() -> pa.RecordBatchReader:
    return pa.RecordBatchReader.from_batches(rows([]).schema, [])


#: (the no-op under ``BY``, rows that arrive in between, the line's ids)
NO_OPS: dict[str, tuple[Callable[[Catalog], Any], Callable[[Catalog], Any], Callable[[Lake], list[int]]]] = {
    "delete": (
        lambda c: c.tables.delete_rows(T, "id > 2", by=BY),
        lambda c: c.tables.append(T, rows([3])),
        lambda lake: ids_of(lake.catalog.reads.open_table(T)),
    ),
    "append": (
        lambda c: c.tables.append(T, empty(), by=BY),
        lambda c: c.tables.append(T, rows([3])),
        lambda lake: ids_of(lake.catalog.reads.open_table(T)),
    ),
    "branch-delete": (
        lambda c: c.branch_changes.delete_rows(T, "dev", "id > 2", by=BY),
        lambda c: c.branch_writes.append(T, "dev", rows([3])),
        lambda lake: ids_of(lake.catalog.branches.open_branch(T, "dev")),
    ),
    "branch-append": (
        lambda c: c.branch_writes.append(T, "dev", empty(), by=BY),
        lambda c: c.branch_writes.append(T, "dev", rows([3])),
        lambda lake: ids_of(lake.catalog.branches.open_branch(T, "dev")),
    ),
}


@pytest.mark.parametrize("case", list(NO_OPS))
def test_a_retry_of_a_no_op_under_its_commit_id_answers_the_first_answer(table: Lake, case: str) -> None:
    no_op, arrive, ids = NO_OPS[case]
    first = no_op(table.catalog)
    assert (first.from_version, first.to_version, first.replayed) == (1, 1, False)
    arrive(table.catalog)  # a row the predicate selects, or a version above the answer
    logged = [e.operation for e in table.catalog.reads.log(T)]
    again = no_op(table.catalog)
    assert (again.from_version, again.to_version, again.replayed) == (1, 1, True)
    assert (again.commit_id, again.rows_added) == (ID, 0)
    assert ids(table) == [1, 2, 3]  # the retry deleted nothing that arrived meanwhile
    assert [e.operation for e in table.catalog.reads.log(T)] == logged  # and logged nothing


@pytest.mark.parametrize("case", list(NO_OPS))
def test_a_no_op_under_a_commit_id_answers_like_a_commit_for_another_write(table: Lake, case: str) -> None:
    """The id named a no-op: another operation under it (an update of a row) is refused, as for
    a landed commit, and changes nothing."""
    no_op, _, ids = NO_OPS[case]
    no_op(table.catalog)
    with pytest.raises(InvalidInput, match=ID):
        if case.startswith("branch"):
            table.catalog.branch_changes.update_rows(T, "dev", {"id": "id + 10"}, "id = 1", by=BY)
        else:
            table.catalog.rows.update_rows(T, {"id": "id + 10"}, "id = 1", by=BY)
    assert ids(table) == [1, 2]


@pytest.mark.parametrize("case", ["delete", "branch-delete", "append", "branch-append"])
def test_the_same_no_op_sent_twice_at_once_answers_both_with_the_first(table: Lake, case: str) -> None:
    no_op, _, ids = NO_OPS[case]
    answer, again = raced(table, no_op, no_op)
    assert not isinstance(again, Exception), again
    assert (answer.to_version, answer.replayed) == (1, False)
    assert (again.to_version, again.replayed) == (1, True)
    assert ids(table) == [1, 2]


@pytest.mark.parametrize(
    ("case", "other"),
    [
        ("delete", lambda c: c.tables.delete_rows(T, "id > 5", by=BY)),  # another predicate
        ("branch-delete", lambda c: c.branch_changes.delete_rows(T, "dev", "id > 5", by=BY)),
        ("append", lambda c: c.tables.append(T, rows([4]), by=BY)),  # rows, against none
        ("branch-append", lambda c: c.branch_writes.append(T, "dev", rows([4]), by=BY)),
    ],
)
def test_another_write_landing_a_no_op_meanwhile_refuses_the_other(
    table: Lake, case: str, other: Callable[[Catalog], Any]
) -> None:
    no_op, _, ids = NO_OPS[case]
    _, refusal = raced(table, no_op, other)
    assert isinstance(refusal, CommitIdReused), refusal
    assert ids(table) == [1, 2]


@pytest.mark.parametrize(
    ("case", "other", "landed"),
    [
        ("delete", lambda c: c.tables.delete_rows(T, "id = 1", by=BY), [2]),
        ("branch-delete", lambda c: c.branch_changes.delete_rows(T, "dev", "id = 1", by=BY), [2]),
        ("append", lambda c: c.tables.append(T, rows([4]), by=BY), [1, 2, 4]),
        ("branch-append", lambda c: c.branch_writes.append(T, "dev", rows([4]), by=BY), [1, 2, 4]),
    ],
)
def test_a_no_op_meeting_another_write_landed_meanwhile_is_refused(
    table: Lake, case: str, other: Callable[[Catalog], Any], landed: list[int]
) -> None:
    """Not told "nothing, at version 1" while its id names a commit that changed rows."""
    no_op, _, ids = NO_OPS[case]
    _, refusal = raced(table, other, no_op)
    assert isinstance(refusal, CommitIdReused), refusal
    assert ids(table) == landed
