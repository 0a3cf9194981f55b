"""Writes on a branch's own line: replace-where is one version of the branch, main never moves,
a retried commit id applies once, bad input changes nothing."""

from __future__ import annotations

import pyarrow as pa
import pytest

from lake_platform.catalog.catalog import Catalog
from lake_platform.catalog.provenance import Provenance
from lake_platform.errors import InvalidInput, TableSchemaValidationError
from lake_platform.naming import TableName
from lake_platform.registry import keys
from lake_platform_tests.catalog.conftest import Lake, rows, state
from lake_platform_tests.catalog.registry_calls import RegistryCalls

T = "p.w.ns.t"


def pairs(snapshot: object) -> list[tuple[int, str]]:
    table = snapshot.to_reader().read_all()  # type: ignore[attr-defined]
    return sorted(zip(table.column("id").to_pylist(), table.column("tag").to_pylist(), strict=True))


@pytest.fixture
def dev(lake: Lake) -> Lake:
    """``T`` at version 2 (ids 1, 2 tagged a; 3 tagged b) and branch ``dev`` from it."""
    lake.catalog.tables.create_table(T, rows([1, 2], "a"))
    lake.catalog.tables.append(T, rows([3], "b"))
    lake.catalog.branches.create_branch(T, "dev")
    return lake


def test_replace_where_on_a_branch_is_one_version_of_it_and_main_stays(dev: Lake) -> None:
    cat = dev.catalog
    result = cat.branch_writes.replace_where(T, "dev", "tag = 'a'", rows([7, 7], "a"))
    assert (result.operation, result.from_version, result.to_version) == ("replace", 2, 3)
    assert pairs(cat.branches.open_branch(T, "dev")) == [(3, "b"), (7, "a"), (7, "a")]
    main = cat.reads.open_table(T)
    assert (main.version, pairs(main)) == (2, [(1, "a"), (2, "a"), (3, "b")])
    (entry,) = [e for e in cat.reads.history(T) if e.operation == "replace"]
    assert entry.detail["branch"] == "dev"
    assert (entry.detail["deleted_rows"], entry.detail["added_rows"]) == (2, 2)
    assert (entry.rows_added, entry.rows_removed, entry.to_version) == (2, 2, 3)


def test_replace_where_on_a_branch_retried_applies_once(dev: Lake) -> None:
    cat = dev.catalog
    by = Provenance(commit_id="branch-replace-0001")
    first = cat.branch_writes.replace_where(T, "dev", "tag = 'b'", rows([4], "b"), by=by)
    again = cat.branch_writes.replace_where(T, "dev", "tag = 'b'", rows([4], "b"), by=by)
    assert again.replayed and again.to_version == first.to_version == 3
    assert pairs(cat.branches.open_branch(T, "dev")) == [(1, "a"), (2, "a"), (4, "b")]


def test_replace_where_on_a_branch_refuses_bad_input_and_changes_nothing(dev: Lake) -> None:
    cat = dev.catalog
    before = state(dev)
    wrong_type = pa.table({"id": pa.array(["x"]), "tag": pa.array(["a"])}).to_reader()
    for call, error in [
        (lambda: cat.branch_writes.replace_where(T, "dev", "", rows([2])), InvalidInput),
        (
            lambda: cat.branch_writes.replace_where(T, "dev", "tag = 'a'", wrong_type),
            TableSchemaValidationError,
        ),
    ]:
        with pytest.raises(error):
            call()
    assert state(dev) == before
    for predicate in ["nope = 1", "tag = "]:  # refused by Lance under the lease, before any write
        with pytest.raises(InvalidInput):
            cat.branch_writes.replace_where(T, "dev", predicate, rows([2], "a"))
    assert cat.branches.open_branch(T, "dev").version == 2
    assert [e.operation for e in cat.reads.history(T)] == ["create", "append", "branch-create"]


def no_rows() -> pa.RecordBatchReader:
    schema = rows([]).schema
    return pa.RecordBatchReader.from_batches(schema, [pa.RecordBatch.from_pylist([], schema)] * 2)


def test_an_append_of_no_rows_to_a_branch_commits_nothing_as_on_main(dev: Lake) -> None:
    cat = dev.catalog
    for by in (Provenance(), Provenance(commit_id="branch-empty-0001")):
        result = cat.branch_writes.append(T, "dev", no_rows(), by=by)
        assert (result.operation, result.from_version, result.to_version, result.rows_added) == (
            "append",
            2,
            2,
            0,
        )
    assert cat.branches.open_branch(T, "dev").version == 2
    assert [e.operation for e in cat.reads.history(T)] == ["create", "append", "branch-create"]
    assert cat.branch_writes.append(T, "dev", rows([4], "c")).to_version == 3  # rows still commit


def test_a_branch_append_reads_the_registry_in_two_requests(dev: Lake) -> None:
    """Each registry request is a round trip on DynamoDB. A branch append reads the parent, the
    table and the branch together, then (under the lease, taken from the released record the
    last append left, with no read) the branch and its head's version record together, which the
    settle needs. The branch and its version record were two reads in a row."""
    calls = RegistryCalls(dev.catalog.store)
    with Catalog(dev.settings, calls) as writer:
        writer.branch_writes.append(T, "dev", rows([4], "b"))  # leaves the released lease record
        rec, _ = writer.branches.branch(TableName.parse(T), "dev")
        calls.calls.clear()
        writer.branch_writes.append(T, "dev", rows([5], "b"))
    name = TableName.parse(T)
    assert calls.reads() == [
        ("get_many", [keys.namespace(name.namespace_name), keys.table(name), keys.branch(name, "dev")]),
        ("get_many", [keys.branch(name, "dev"), keys.version(rec.incarnation, 3)]),
    ]
    assert pairs(dev.catalog.branches.open_branch(T, "dev")) == [
        (1, "a"),
        (2, "a"),
        (3, "b"),
        (4, "b"),
        (5, "b"),
    ]
