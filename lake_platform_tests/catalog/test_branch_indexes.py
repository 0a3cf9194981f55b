"""Indexes of a branch (issue 46): a build, refresh or drop is one commit on the branch's own line
(its head moves by one, logged with ``detail.branch``), main never moves and never sees the
branch's indexes until the branch is published; queries on the branch answer the same with and
without its index; a retry under the commit id lands once; a refusal (a missing or trashed
branch, a reader, bad input) is a typed error that changes nothing."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pyarrow as pa
import pytest

from lake_platform.catalog.provenance import Provenance
from lake_platform.errors import (
    InvalidInput,
    PermissionDenied,
    TableBranchNotFound,
    TableColumnNotFound,
    TableIndexAlreadyExists,
    TableIndexNotFound,
)
from lake_platform.naming import TableName
from lake_platform_tests.catalog.conftest import READER, WRITER, Lake

T = "p.w.ns.t"
PREDICATES = ["id = 421", "id >= 290 AND id < 310", "id IN (3, 150, 599)", "id = 99999", "k = 7"]


def batch(start: int, stop: int) -> pa.RecordBatchReader:
    ids = list(range(start, stop))
    return pa.table(
        {"id": pa.array(ids, pa.int64()), "k": pa.array([i % 10 for i in ids], pa.int32())}
    ).to_reader()


@pytest.fixture
def table(lake: Lake) -> Iterator[Lake]:
    """``T`` at version 2 (ids 0-599), branch ``dev`` made from it."""
    lake.catalog.tables.create_table(T, batch(0, 300))
    lake.catalog.tables.append(T, batch(300, 600))
    lake.catalog.branches.create_branch(T, "dev")
    yield lake


def state(lake: Lake) -> tuple[int, list[str], int, list[str], int]:
    """Main's version and indexes, the branch's head and indexes, the log's length."""
    main = lake.catalog.indexes.list_indexes(T)
    head = lake.catalog.branches.branch(TableName.parse(T), "dev")[0].current_version
    on_dev = [i.name for i in lake.catalog.branch_indexes.list_indexes(T, "dev")]
    version = lake.catalog.reads.open_table(T).version
    return version, [i.name for i in main], head, on_dev, len(lake.catalog.reads.history(T))


def answers(lake: Lake, *, use_index: bool) -> dict[str, list[int]]:
    ds = lake.catalog.branches.open_branch(T, "dev").dataset
    return {
        p: sorted(ds.to_table(filter=p, columns=["id"], use_scalar_index=use_index).column("id").to_pylist())
        for p in PREDICATES
    }


def planned_with_index(lake: Lake, predicate: str) -> bool:
    ds = lake.catalog.branches.open_branch(T, "dev").dataset
    return "ScalarIndexQuery" in ds.scanner(filter=predicate).explain_plan()


def last_entry(lake: Lake) -> Any:
    return lake.catalog.reads.history(T)[-1]


def test_a_branchs_index_is_its_own_and_main_never_moves(table: Lake) -> None:
    catalog = table.catalog
    made = catalog.branch_indexes.create_index(T, "dev", "id", "btree", by=WRITER)
    assert (made.status, made.operation, made.version) == ("committed", "index create", 3)
    entry = last_entry(table)
    assert (entry.operation, entry.actor, entry.from_version, entry.to_version) == (
        "index create",
        "etl",
        2,
        3,
    )
    assert entry.detail == {"index": "id_idx", "column": "id", "kind": "BTREE", "branch": "dev"}
    assert made.commit_id == entry.commit_id
    assert state(table)[:4] == (2, [], 3, ["id_idx"])  # main: version 2, no index
    # the branch's older version (main's version 2, where it was made) has none either
    assert catalog.branch_indexes.list_indexes(T, "dev", 2) == []

    # a query on the branch uses the index and answers as a full scan does
    assert planned_with_index(table, "id = 421")
    assert answers(table, use_index=True) == answers(table, use_index=False)
    assert answers(table, use_index=True)["id = 421"] == [421]

    # rows appended to the branch lag until a refresh folds them in (one more commit)
    catalog.branch_writes.append(T, "dev", batch(600, 650))
    (lagging,) = catalog.branch_indexes.list_indexes(T, "dev")
    assert (lagging.rows_indexed, lagging.rows_unindexed) == (600, 50)
    refreshed = catalog.branch_indexes.refresh_indexes(T, "dev")
    assert (refreshed.version, refreshed.detail) == (5, {"indexes": ["id_idx"], "branch": "dev"})
    assert catalog.branch_indexes.refresh_indexes(T, "dev").status == "nothing-to-do"
    assert answers(table, use_index=True) == answers(table, use_index=False)

    dropped = catalog.branch_indexes.drop_index(T, "dev", "id", by=WRITER)
    entry = last_entry(table)
    assert (dropped.version, entry.operation, entry.from_version, entry.to_version) == (6, "index drop", 5, 6)
    assert entry.detail == {"column": "id", "branch": "dev"}
    assert state(table)[:4] == (2, [], 6, [])
    assert [i.name for i in catalog.branch_indexes.list_indexes(T, "dev", 5)] == ["id_idx"]

    # published, main has what the branch built
    catalog.branch_indexes.create_index(T, "dev", "k", "bitmap")
    catalog.branch_publish.publish_branch(T, "dev")
    assert [i.name for i in catalog.indexes.list_indexes(T)] == ["k_idx"]


def test_a_column_only_the_branch_has_is_indexed_there(table: Lake) -> None:
    table.catalog.branch_changes.add_computed_columns(T, "dev", {"twice": "id * 2"})
    with pytest.raises(TableColumnNotFound):
        table.catalog.indexes.create_index(T, "twice", "btree")
    table.catalog.branch_indexes.create_index(T, "dev", "twice", "btree")
    (info,) = table.catalog.branch_indexes.list_indexes(T, "dev")
    assert (info.column, info.rows_indexed) == ("twice", 600)


def test_a_retry_under_the_commit_id_lands_once(table: Lake) -> None:
    by = Provenance(commit_id="branch-index-0001")
    first = table.catalog.branch_indexes.create_index(T, "dev", "id", by=by)
    again = table.catalog.branch_indexes.create_index(T, "dev", "id", by=by)
    assert (first.version, again.version, again.commit_id, again.detail) == (
        3,
        3,
        "branch-index-0001",
        {"replayed": True},
    )
    assert state(table)[2:] == (3, ["id_idx"], len(table.catalog.reads.history(T)))
    assert [e.commit_id for e in table.catalog.reads.history(T)].count("branch-index-0001") == 1


def test_refusals_are_typed_and_change_nothing(table: Lake) -> None:
    indexes = table.catalog.branch_indexes
    indexes.create_index(T, "dev", "id", "btree")
    before = state(table)
    refusals = [
        (lambda: indexes.create_index(T, "nope", "k"), TableBranchNotFound),
        (lambda: indexes.list_indexes(T, "nope"), TableBranchNotFound),
        (lambda: indexes.refresh_indexes(T, "nope"), TableBranchNotFound),
        (lambda: indexes.drop_index(T, "nope", "id"), TableBranchNotFound),
        (lambda: indexes.create_index(T, "dev", "k", by=READER), PermissionDenied),
        (lambda: indexes.drop_index(T, "dev", "id", by=READER), PermissionDenied),
        (lambda: indexes.create_index(T, "dev", "k", "hash"), InvalidInput),
        (lambda: indexes.create_index(T, "dev", "k", "inverted"), InvalidInput),  # not a string
        (lambda: indexes.create_index(T, "dev", "nope"), TableColumnNotFound),
        (lambda: indexes.create_index(T, "dev", "id"), TableIndexAlreadyExists),
        (lambda: indexes.drop_index(T, "dev", "k"), TableIndexNotFound),
        (lambda: indexes.drop_index(T, "dev", ""), InvalidInput),
        (lambda: indexes.refresh_indexes(T, "dev", ["nope"]), TableIndexNotFound),
    ]
    for call, error in refusals:
        with pytest.raises(error):
            call()
    assert state(table) == before
    # a reader lists the branch's indexes
    assert [i.name for i in indexes.list_indexes(T, "dev", by=READER)] == ["id_idx"]

    table.catalog.branch_trash.delete_branch(T, "dev")
    with pytest.raises(TableBranchNotFound, match="in the trash"):
        indexes.create_index(T, "dev", "k")
    with pytest.raises(TableBranchNotFound):
        indexes.list_indexes(T, "dev")
    table.catalog.branch_trash.undrop_branch(T, "dev")
    assert state(table)[:4] == before[:4]
