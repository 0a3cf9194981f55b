"""Updates, merge-inserts and replace-where: one logged commit each through the catalog; bad input changes
nothing."""

from __future__ import annotations

import pyarrow as pa
import pytest

from lake_platform.catalog.catalog import Catalog
from lake_platform.catalog.provenance import Provenance
from lake_platform.catalog.row_changes import RowChange
from lake_platform.errors import InvalidInput, ServiceUnavailable, TableNotFound, TableSchemaValidationError
from lake_platform_tests.catalog.conftest import Lake, rows, sent_at_once, state

T = "p.w.ns.t"


def content(lake: Lake) -> dict[int, str]:
    table = lake.catalog.reads.open_table(T).to_reader().read_all()
    return dict(zip(table.column("id").to_pylist(), table.column("tag").to_pylist(), strict=True))


def test_update_and_merge_insert(lake: Lake) -> None:
    lake.catalog.tables.create_table(T, rows([1, 2, 3]))
    updated = lake.catalog.rows.update_rows(T, {"tag": "'u'"}, "id > 1")
    assert (updated.version, updated.counts) == (2, {"updated_rows": 2})
    merged = lake.catalog.rows.merge_insert(
        T, rows([3, 4], "m"), ["id"], update_matched=True, insert_unmatched=True
    )
    assert merged.version == 3 and merged.counts["num_updated_rows"] == 1
    assert merged.counts["num_inserted_rows"] == 1
    assert content(lake) == {1: "x", 2: "u", 3: "m", 4: "m"}
    log = {e.commit_id: e for e in lake.catalog.reads.log(T)}
    assert log[updated.commit_id].operation == "update" and log[merged.commit_id].operation == "merge"
    assert log[updated.commit_id].detail["updated_rows"] == 2


def test_bad_input_changes_nothing(lake: Lake) -> None:
    lake.catalog.tables.create_table(T, rows([1]))
    before = state(lake)
    for call in [
        lambda: lake.catalog.rows.update_rows(T, {"nope": "1"}),
        lambda: lake.catalog.rows.update_rows(T, {}),
        lambda: lake.catalog.rows.merge_insert(T, rows([2]), ["nope"], insert_unmatched=True),
        lambda: lake.catalog.rows.merge_insert(T, rows([2]), ["id"]),
    ]:
        with pytest.raises(InvalidInput):
            call()
    assert state(lake) == before


def test_a_bad_merge_condition_is_said_once_in_the_catalogs_words(lake: Lake) -> None:
    """Lance nests its error kind ("Invalid user input: ... Invalid user input: ...") and lists
    the valid fields twice: the message repeated itself under an error whose type says it."""
    lake.catalog.tables.create_table(T, rows([1]))
    messages = []
    for condition in ("(((", "id >", "zzz = 1"):
        with pytest.raises(InvalidInput) as err:
            lake.catalog.rows.merge_insert(
                T, rows([1, 2], "m"), ["id"], update_matched=True, update_matched_if=condition
            )
        messages.append(str(err.value))
    for message in messages:
        assert message.startswith(f"cannot merge {T}: ") and "Invalid user input" not in message, message
    assert messages[0].count("Error parsing statement") == 1 and "(((" in messages[0], messages[0]
    fields = messages[2].partition("Valid fields are ")[2].rstrip(".").split(", ")
    assert "zzz" in messages[2] and len(fields) == len(set(fields)) > 0, messages[2]
    # refused by Lance under the lease (taken and released): no version, no entry, same rows
    assert [e.operation for e in lake.catalog.reads.log(T)] == ["create"] and content(lake) == {1: "x"}


def test_a_bad_predicate_commits_nothing(lake: Lake) -> None:
    lake.catalog.tables.create_table(T, rows([1]))
    with pytest.raises(InvalidInput):
        lake.catalog.rows.update_rows(T, {"tag": "'a'"}, "nope = 1")
    # refused by Lance under the lease: no version, no log entry, the rows as they were
    assert lake.catalog.reads.open_table(T).record.current_version == 1
    assert [e.operation for e in lake.catalog.reads.log(T)] == ["create"]
    assert content(lake) == {1: "x"}


def pairs(lake: Lake, version: int | None = None) -> list[tuple[int, str]]:
    table = lake.catalog.reads.open_table(T, version).to_reader().read_all()
    return sorted(zip(table.column("id").to_pylist(), table.column("tag").to_pylist(), strict=True))


def test_replace_where_is_one_version_that_keeps_every_row_given(lake: Lake) -> None:
    lake.catalog.tables.create_table(T, rows([1, 2], "a"))
    lake.catalog.tables.append(T, rows([3], "b"))
    replaced = lake.catalog.rows.replace_where(T, "tag = 'a'", rows([7, 7], "a"))
    # identical rows both land; the rows the predicate does not select are untouched
    assert pairs(lake) == [(3, "b"), (7, "a"), (7, "a")]
    assert pairs(lake, 2) == [(1, "a"), (2, "a"), (3, "b")]
    assert (replaced.version, replaced.counts) == (3, {"deleted_rows": 2, "added_rows": 2})
    assert sorted(lake.catalog.reads.readable_versions(T)[1]) == [1, 2, 3]
    log = lake.catalog.reads.log(T)
    assert [e.operation for e in log] == ["create", "append", "replace"]
    entry = log[-1]
    assert (entry.commit_id, entry.from_version, entry.to_version) == (replaced.commit_id, 2, 3)
    assert (entry.rows_added, entry.rows_removed) == (2, 2)
    assert entry.detail["predicate"] == "tag = 'a'" and entry.detail["deleted_rows"] == 2


def test_replace_where_selecting_nothing_appends(lake: Lake) -> None:
    lake.catalog.tables.create_table(T, rows([1], "a"))
    replaced = lake.catalog.rows.replace_where(T, "tag = 'z'", rows([1], "z"))
    assert replaced.counts == {"deleted_rows": 0, "added_rows": 1}
    assert pairs(lake) == [(1, "a"), (1, "z")]


def test_replace_where_retried_with_its_commit_id_applies_once(lake: Lake) -> None:
    lake.catalog.tables.create_table(T, rows([1], "a"))
    by = Provenance(commit_id="replace-step-0001")
    first = lake.catalog.rows.replace_where(T, "tag = 'a'", rows([2, 2], "a"), by=by)
    again = lake.catalog.rows.replace_where(T, "tag = 'a'", rows([2, 2], "a"), by=by)
    assert (again.version, again.commit_id) == (first.version, first.commit_id) == (2, "replace-step-0001")
    assert pairs(lake) == [(2, "a"), (2, "a")]
    assert [e.operation for e in lake.catalog.reads.log(T)] == ["create", "replace"]


def test_replace_where_refuses_bad_input_and_changes_nothing(lake: Lake) -> None:
    lake.catalog.tables.create_table(T, rows([1], "a"))
    before = state(lake)
    wrong_type = pa.table({"id": pa.array(["x"]), "tag": pa.array(["a"])}).to_reader()
    for call, error in [
        (lambda: lake.catalog.rows.replace_where(T, " ", rows([2], "a")), InvalidInput),
        (lambda: lake.catalog.rows.replace_where(T, "tag = 'a'", wrong_type), TableSchemaValidationError),
        (lambda: lake.catalog.rows.replace_where(T, "tag = 'a'", [1]), InvalidInput),
        (lambda: lake.catalog.rows.replace_where("p.w.ns.nope", "tag = 'a'", rows([2])), TableNotFound),
    ]:
        with pytest.raises(error):
            call()
    assert state(lake) == before


def test_replace_where_with_a_bad_predicate_writes_nothing(lake: Lake) -> None:
    """Lance parses the predicate under the lease, before any file is written: the lease record
    is all that moves."""
    lake.catalog.tables.create_table(T, rows([1], "a"))

    def unleased() -> tuple[list[object], list[object]]:
        registry, files = state(lake)
        return [item for item in registry if not str(item[0]).startswith("lse/")], files

    before = unleased()
    for predicate in ["nope = 1", "tag = ", "tag = 'a' AND"]:
        with pytest.raises(InvalidInput):
            lake.catalog.rows.replace_where(T, predicate, rows([2], "a"))
    assert unleased() == before
    assert pairs(lake) == [(1, "a")]


def test_replace_where_takes_new_columns_as_an_append_does(lake: Lake) -> None:
    lake.catalog.tables.create_table(T, rows([1, 2], "a"))
    extra = pa.table({"id": pa.array([5], pa.int64()), "tag": ["a"], "note": ["new"]}).to_reader
    with pytest.raises(TableSchemaValidationError):  # strict, the default
        lake.catalog.rows.replace_where(T, "tag = 'a'", extra())
    lake.catalog.policies.set_policy(T, {"schema_evolution": "add_columns"})
    replaced = lake.catalog.rows.replace_where(T, "tag = 'a'", extra())
    table = lake.catalog.reads.open_table(T)
    assert table.schema.names == ["id", "tag", "note"]
    assert table.to_reader().read_all().to_pylist() == [{"id": 5, "tag": "a", "note": "new"}]
    # the schema step and the rows registered together, under the one commit id
    log = [e for e in lake.catalog.reads.log(T) if e.commit_id == replaced.commit_id]
    assert [e.operation for e in log] == ["add-columns", "replace"]
    assert log[-1].detail["added_columns"] == {"note": "string"}


class _FailAt:
    """Raises once at ``point``: a lost connection the caller cannot tell landed or not."""

    def __init__(self, point: str) -> None:
        self.point, self.fired = point, False

    def __call__(self, point: str) -> None:
        if point == self.point and not self.fired:
            self.fired = True
            raise ServiceUnavailable(f"connection reset at {point}")


def test_replace_where_failing_after_its_commit_landed_is_resolved_by_its_commit_id(lake: Lake) -> None:
    lake.catalog.tables.create_table(T, rows([1], "a"))
    flaky = lake.new_catalog(hook=_FailAt("replace:after-commit"))
    try:
        done = flaky.rows.replace_where(
            T, "tag = 'a'", rows([2, 2], "a"), by=Provenance(commit_id="replace-0002")
        )
    finally:
        flaky.close()
    assert done.version == 2 and pairs(lake) == [(2, "a"), (2, "a")]
    assert [e.operation for e in lake.catalog.reads.log(T)] == ["create", "replace"]


def test_replace_where_failing_before_registration_changes_nothing(lake: Lake) -> None:
    lake.catalog.tables.create_table(T, rows([1], "a"))
    flaky = lake.new_catalog(hook=_FailAt("replace:staged"))
    try:
        with pytest.raises(ServiceUnavailable):
            flaky.rows.replace_where(T, "tag = 'a'", rows([2], "a"), by=Provenance(commit_id="replace-0003"))
    finally:
        flaky.close()
    assert lake.catalog.reads.open_table(T).version == 1 and pairs(lake) == [(1, "a")]
    # the caller retries under the same commit id: it applies once
    again = lake.catalog.rows.replace_where(
        T, "tag = 'a'", rows([2], "a"), by=Provenance(commit_id="replace-0003")
    )
    assert again.version == 2 and pairs(lake) == [(2, "a")]


def test_a_replayed_commit_id_answers_the_first_commits_counts(lake: Lake) -> None:
    lake.catalog.tables.create_table(T, rows([1, 2, 3]))
    by = Provenance(commit_id="retry-update-1")
    first = lake.catalog.rows.update_rows(T, {"tag": "'u'"}, "id > 1", detail={"note": "n"}, by=by)
    again = lake.catalog.rows.update_rows(T, {"tag": "'u'"}, "id > 1", by=by)
    assert again == first and first.counts == {"updated_rows": 2}
    merge_by = Provenance(commit_id="retry-merge-1")
    merged = lake.catalog.rows.merge_insert(T, rows([3, 4], "m"), ["id"], insert_unmatched=True, by=merge_by)
    replay = lake.catalog.rows.merge_insert(T, rows([3, 4], "m"), ["id"], insert_unmatched=True, by=merge_by)
    assert replay == merged and replay.counts["num_inserted_rows"] == 1
    assert [e.operation for e in lake.catalog.reads.log(T)] == ["create", "update", "merge"]
    assert lake.catalog.reads.commit(T, "retry-update-1").detail["note"] == "n"  # detail is logged


@pytest.mark.parametrize("operation", ["update", "merge"])
def test_a_replay_while_the_first_commit_finishes_answers_its_counts(lake: Lake, operation: str) -> None:
    """A request resent while its first attempt is still finishing (landed, the lease still
    held) is answered with the first commit's counts, not none."""
    lake.catalog.tables.create_table(T, rows([1, 2, 3]))
    by = Provenance(commit_id=f"in-flight-{operation}")
    replays: list[RowChange] = []

    def change(catalog: Catalog) -> RowChange:
        if operation == "update":
            return catalog.rows.update_rows(T, {"tag": "'u'"}, "id > 1", by=by)
        return catalog.rows.merge_insert(T, rows([3, 4], "m"), ["id"], insert_unmatched=True, by=by)

    def resent(point: str) -> None:
        if point == f"{operation}:before-finalize" and not replays:
            replays.append(change(lake.catalog))

    writer = lake.new_catalog(hook=resent)
    try:
        first = change(writer)
    finally:
        writer.close()
    assert replays == [first] and first.counts


def test_one_update_sent_twice_at_once_lands_once_and_both_answer_it(lake: Lake) -> None:
    """Two catalogs (two servers) given one commit id at once: whichever takes the lease second
    finds the first landed (before or under the lease) and answers it; Lance never runs the
    change twice."""
    lake.catalog.tables.create_table(T, rows([1, 2, 3]))
    answers = sent_at_once(
        lake,
        lambda c: c.rows.update_rows(T, {"tag": "'u'"}, "id > 1", by=Provenance(commit_id="sent-twice-0001")),
    )
    assert len(answers) == 2 and answers[0] == answers[1], answers
    assert isinstance(answers[0], RowChange) and answers[0].counts == {"updated_rows": 2}
    assert [e.operation for e in lake.catalog.reads.log(T)] == ["create", "update"]
    assert content(lake) == {1: "x", 2: "u", 3: "u"}
