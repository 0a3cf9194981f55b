"""Updates, merge-inserts, deletes, schema changes and metadata changes on a branch (issue 46):
each is one commit on the branch's own line (its head moves by one, logged with ``detail.branch``), main
never moves, the branch's older versions still read, a retry under the commit id lands once, and a
refusal (bad input, a missing or trashed branch, a role short of the change's, a protected
table's drop) is a typed error that changes nothing."""

from __future__ import annotations

from collections.abc import Iterator

import pyarrow as pa
import pytest

from lake_platform.catalog.arrow_io import schema_from_ipc
from lake_platform.catalog.provenance import Provenance
from lake_platform.catalog.row_changes import RowChange
from lake_platform.errors import (
    InvalidInput,
    PermissionDenied,
    Protected,
    TableBranchNotFound,
    TableColumnNotFound,
    TableSchemaValidationError,
)
from lake_platform.naming import TableName
from lake_platform_tests.catalog.conftest import READER, WRITER, Lake, ids_of, rows, sent_at_once

T = "p.w.ns.t"


@pytest.fixture
def table(lake: Lake) -> Iterator[Lake]:
    """``T`` at version 2 (ids 1, 2 then 3), branch ``dev`` made from it."""
    lake.catalog.tables.create_table(T, rows([1, 2]))
    lake.catalog.tables.append(T, rows([3]))
    lake.catalog.branches.create_branch(T, "dev")
    yield lake


def state(lake: Lake) -> tuple[int, list[int], int, list[str], int]:
    """Main's version and ids, the branch's head and columns, the log's length."""
    main = lake.catalog.reads.open_table(T)
    head = lake.catalog.branches.branch(TableName.parse(T), "dev")[0]
    columns = [c["name"] for c in lake.catalog.branches.describe_branch(T, "dev")["schema"]]
    return main.version, ids_of(main), head.current_version, columns, len(lake.catalog.reads.history(T))


def branch_rows(lake: Lake, version: int | None = None) -> list[tuple[object, ...]]:
    table = lake.catalog.branches.open_branch(T, "dev", version).dataset.to_table().sort_by("id")
    return [tuple(r.values()) for r in table.to_pylist()]


def last_entry(lake: Lake) -> tuple[str, int | None, int | None, object]:
    entry = lake.catalog.reads.history(T)[-1]
    return entry.operation, entry.from_version, entry.to_version, entry.detail.get("branch")


def test_each_change_is_one_commit_on_the_branch_and_main_never_moves(table: Lake) -> None:
    changes = table.catalog.branch_changes
    main_before = state(table)[:2]

    updated = changes.update_rows(T, "dev", {"tag": "'u'"}, "id >= 2", by=WRITER)
    assert (updated.version, updated.counts) == (3, {"updated_rows": 2})
    assert last_entry(table) == ("update", 2, 3, "dev")
    merged = changes.merge_insert(
        T, "dev", rows([3, 4], "m"), ["id"], update_matched=True, insert_unmatched=True, by=WRITER
    )
    assert (merged.version, merged.counts["num_inserted_rows"], merged.counts["num_updated_rows"]) == (
        4,
        1,
        1,
    )
    assert last_entry(table) == ("merge", 3, 4, "dev")
    deleted = changes.delete_rows(T, "dev", "id = 1", by=WRITER)
    assert (deleted.from_version, deleted.to_version) == (4, 5)
    assert (*last_entry(table), table.catalog.reads.history(T)[-1].rows_removed) == ("delete", 4, 5, "dev", 1)
    assert branch_rows(table) == [(2, "u"), (3, "m"), (4, "m")]

    added = changes.add_computed_columns(T, "dev", {"twice": "id * 2"}, by=WRITER)
    assert (added.to_version, last_entry(table)) == (6, ("add-columns", 5, 6, "dev"))
    renamed = changes.rename_columns(T, "dev", {"tag": "label"})
    assert (renamed.to_version, last_entry(table)) == (7, ("rename-column", 6, 7, "dev"))
    dropped = changes.drop_columns(T, "dev", ["twice"])
    assert (dropped.to_version, last_entry(table)) == (8, ("drop-column", 7, 8, "dev"))

    assert branch_rows(table) == [(2, "u"), (3, "m"), (4, "m")]
    assert state(table)[2:4] == (8, ["id", "label"])
    assert branch_rows(table, 6) == [(2, "u", 4), (3, "m", 6), (4, "m", 8)]  # older versions read
    assert branch_rows(table, 2) == [(1, "x"), (2, "x"), (3, "x")]
    assert state(table)[:2] == main_before == (2, [1, 2, 3])
    assert table.catalog.reads.open_table(T).schema.names == ["id", "tag"]

    # published, main reads what the branch made
    table.catalog.branch_publish.publish_branch(T, "dev")
    main = table.catalog.reads.open_table(T)
    assert (main.version, main.schema.names, ids_of(main)) == (8, ["id", "label"], [2, 3, 4])


def metadata(schema: pa.Schema | pa.Field) -> dict[str, str]:
    return {k.decode(): v.decode() for k, v in (schema.metadata or {}).items()}


def test_metadata_changes_are_one_commit_each_on_the_branch_and_main_never_moves(table: Lake) -> None:
    """Schema metadata merged into what the branch's head holds (main's keys from before it was
    made included) and columns' field metadata, each one commit on the branch logged with
    ``detail.branch``; the registered schema is what Lance holds; main keeps its own."""
    schemas, changes = table.catalog.schemas, table.catalog.branch_changes
    schemas.update_schema_metadata(T, {"team": "core"})  # main's version 3, before the branch
    table.catalog.branches.create_branch(T, "meta")
    main_before = table.catalog.reads.open_table(T)

    result, merged = changes.update_schema_metadata(T, "meta", {"stage": "dev", "team": None}, by=WRITER)
    assert (result.from_version, result.to_version, merged) == (3, 4, {"stage": "dev"})
    entry = table.catalog.reads.history(T)[-1]
    assert (entry.operation, entry.actor, entry.detail) == (
        "schema-metadata",
        "etl",
        {"set": ["stage"], "removed": ["team"], "branch": "meta"},
    )
    updates = {"id": ({"unit": "count"}, False), "tag": ({"pii": "no"}, True)}
    result, fields = changes.update_field_metadata(T, "meta", updates, by=WRITER)
    assert (result.to_version, fields) == (5, {"id": {"unit": "count"}, "tag": {"pii": "no"}})
    assert table.catalog.reads.history(T)[-1].detail == {"columns": ["id", "tag"], "branch": "meta"}

    head = table.catalog.branches.open_branch(T, "meta").schema
    assert metadata(head) == {"stage": "dev"}
    assert (metadata(head.field("id")), metadata(head.field("tag"))) == ({"unit": "count"}, {"pii": "no"})
    record = table.catalog.branches.branch(TableName.parse(T), "meta")[0]
    assert schema_from_ipc(record.schema_ipc).equals(head, check_metadata=True)
    assert metadata(table.catalog.branches.open_branch(T, "meta", 3).schema) == {"team": "core"}
    main = table.catalog.reads.open_table(T)
    assert (main.version, metadata(main.schema), metadata(main.schema.field("id"))) == (
        3,
        {"team": "core"},
        {},
    )
    assert main.record.schema_ipc == main_before.record.schema_ipc
    assert state(table)[2] == 2  # the other branch never moved either


def test_a_retry_under_the_commit_id_lands_once(table: Lake) -> None:
    by = Provenance(commit_id="branch-update-0001")
    first = table.catalog.branch_changes.update_rows(T, "dev", {"tag": "'u'"}, by=by)
    again = table.catalog.branch_changes.update_rows(T, "dev", {"tag": "'u'"}, by=by)
    assert (first.version, again.version, again.commit_id) == (3, 3, "branch-update-0001")
    by = Provenance(commit_id="branch-delete-0001")
    gone = table.catalog.branch_changes.delete_rows(T, "dev", "id = 1", by=by)
    assert table.catalog.branch_changes.delete_rows(T, "dev", "id = 2", by=by).to_version == gone.to_version
    assert state(table)[2] == 4 and [r[0] for r in branch_rows(table)] == [2, 3]


def test_refusals_are_typed_and_change_nothing(table: Lake) -> None:
    changes = table.catalog.branch_changes
    before = state(table)
    refusals = [
        (lambda: changes.update_rows(T, "dev", {}), InvalidInput),
        (lambda: changes.update_rows(T, "dev", {"nope": "1"}), InvalidInput),
        (lambda: changes.update_rows(T, "dev", {"tag": "'u'"}, "nope >"), InvalidInput),
        (lambda: changes.update_rows(T, "nope", {"tag": "'u'"}), TableBranchNotFound),
        (lambda: changes.update_rows(T, "dev", {"tag": "'u'"}, by=READER), PermissionDenied),
        (lambda: changes.merge_insert(T, "dev", rows([9]), ["id"]), InvalidInput),
        (lambda: changes.merge_insert(T, "dev", rows([9]), ["nope"], insert_unmatched=True), InvalidInput),
        (
            lambda: changes.merge_insert(
                T, "dev", pa.table({"id": [9], "other": ["x"]}).to_reader(), ["id"], insert_unmatched=True
            ),
            InvalidInput,
        ),
        (lambda: changes.delete_rows(T, "dev", " "), InvalidInput),
        (lambda: changes.delete_rows(T, "dev", "id >"), InvalidInput),
        (lambda: changes.add_computed_columns(T, "dev", {"id": "1"}), TableSchemaValidationError),
        (lambda: changes.add_computed_columns(T, "dev", {"z": "nope +"}), InvalidInput),
        (lambda: changes.rename_columns(T, "dev", {"nope": "x"}), TableColumnNotFound),
        (lambda: changes.rename_columns(T, "dev", {"tag": "id"}), TableSchemaValidationError),
        (lambda: changes.rename_columns(T, "dev", {"tag": "t"}, by=WRITER), PermissionDenied),
        (lambda: changes.drop_columns(T, "dev", ["id", "tag"]), TableSchemaValidationError),
        (lambda: changes.drop_columns(T, "dev", ["tag"], by=WRITER), PermissionDenied),
        (lambda: changes.update_schema_metadata(T, "dev", {}), InvalidInput),
        (lambda: changes.update_schema_metadata(T, "dev", {"k": 1}), InvalidInput),  # type: ignore[dict-item]
        (lambda: changes.update_schema_metadata(T, "nope", {"k": "v"}), TableBranchNotFound),
        (lambda: changes.update_schema_metadata(T, "dev", {"k": "v"}, by=READER), PermissionDenied),
        (lambda: changes.update_field_metadata(T, "dev", {}), InvalidInput),
        (lambda: changes.update_field_metadata(T, "dev", {"nope": ({"k": "v"}, False)}), TableColumnNotFound),
        (lambda: changes.update_field_metadata(T, "nope", {"id": ({"k": "v"}, False)}), TableBranchNotFound),
        (
            lambda: changes.update_field_metadata(T, "dev", {"id": ({"k": "v"}, False)}, by=READER),
            PermissionDenied,
        ),
    ]
    for call, error in refusals:
        with pytest.raises(error):
            call()
    assert state(table) == before

    table.catalog.containers.set_protected(T)
    with pytest.raises(Protected):
        changes.drop_columns(T, "dev", ["tag"])
    table.catalog.containers.set_protected(T, False)
    table.catalog.branch_trash.delete_branch(T, "dev")
    with pytest.raises(TableBranchNotFound):
        changes.update_rows(T, "dev", {"tag": "'u'"})
    table.catalog.branch_trash.undrop_branch(T, "dev")
    assert state(table)[:4] == before[:4]


def test_a_replayed_commit_id_answers_the_first_commits_counts(lake: Lake) -> None:
    lake.catalog.tables.create_table(T, rows([1, 2, 3]))
    lake.catalog.branches.create_branch(T, "dev")
    changes = lake.catalog.branch_changes
    by = Provenance(commit_id="retry-branch-update")
    first = changes.update_rows(T, "dev", {"tag": "'u'"}, "id > 1", detail={"note": "n"}, by=by)
    again = changes.update_rows(T, "dev", {"tag": "'u'"}, "id > 1", by=by)
    assert again == first and first.counts == {"updated_rows": 2}
    entry = lake.catalog.reads.commit(T, "retry-branch-update")
    assert entry is not None and (entry.detail["note"], entry.detail["updated_rows"]) == ("n", 2)
    assert [e.operation for e in lake.catalog.reads.log(T)] == ["create", "branch-create", "update"]


def test_a_replay_while_the_first_commit_finishes_answers_its_counts(lake: Lake) -> None:
    """A branch update resent while its first attempt is still finishing (landed, the branch's
    lease still held) is answered with the first commit's counts, not none."""
    lake.catalog.tables.create_table(T, rows([1, 2, 3]))
    lake.catalog.branches.create_branch(T, "dev")
    by = Provenance(commit_id="in-flight-branch-update")
    replays: list[object] = []

    def resent(point: str) -> None:
        if point == "update:before-finalize" and not replays:
            replays.append(lake.catalog.branch_changes.update_rows(T, "dev", {"tag": "'u'"}, "id > 1", by=by))

    writer = lake.new_catalog(hook=resent)
    try:
        first = writer.branch_changes.update_rows(T, "dev", {"tag": "'u'"}, "id > 1", by=by)
    finally:
        writer.close()
    assert replays == [first] and first.counts == {"updated_rows": 2}


def test_one_branch_update_sent_twice_at_once_lands_once_and_both_answer_it(lake: Lake) -> None:
    """As on main: two catalogs given one commit id at once; the one that takes the branch's
    lease second answers the first commit, Lance never runs the change twice."""
    lake.catalog.tables.create_table(T, rows([1, 2, 3]))
    lake.catalog.branches.create_branch(T, "dev")
    answers = sent_at_once(
        lake,
        lambda c: c.branch_changes.update_rows(
            T, "dev", {"tag": "'u'"}, "id > 1", by=Provenance(commit_id="branch-sent-twice")
        ),
    )
    assert len(answers) == 2 and answers[0] == answers[1], answers
    assert isinstance(answers[0], RowChange) and answers[0].counts == {"updated_rows": 2}
    assert [e.operation for e in lake.catalog.reads.log(T)] == ["create", "branch-create", "update"]
