"""UpdateTable, MergeInsertIntoTable and DeleteFromTable through pylance's own RestNamespace:
each one catalog commit (all of it or nothing) under the caller's name; refusals are the
spec's errors and change nothing."""

from __future__ import annotations

from decimal import Decimal

import lance_namespace.errors as ns_errors
import pyarrow as pa
import pytest
from lance_namespace_urllib3_client.models import (
    DeleteFromTableRequest,
    MergeInsertIntoTableRequest,
    UpdateTableRequest,
)

from lake_platform.naming import TableName
from lake_platform_tests.rest.clients import rest_namespace, rows
from lake_platform_tests.rest.conftest import RestLake
from lake_platform_tests.rest.handlers.events import NAME, TP, T, ipc, problem, version, version_and_columns


def content(lake: RestLake) -> dict[int, str]:
    table = lake.catalog.reads.open_table(NAME).dataset.to_table()
    return dict(zip(table.column("id").to_pylist(), table.column("tag").to_pylist(), strict=True))


def logged(lake: RestLake, commit_id: str):  # noqa: ANN201 - a commit-log entry
    return next(e for e in lake.catalog.reads.log(NAME) if e.commit_id == commit_id)


def test_update_sets_columns_where_the_predicate_holds(events: RestLake) -> None:
    ns = rest_namespace(events.url, events.tokens["writer"])
    answer = ns.update_table(UpdateTableRequest(id=T, predicate="id >= 2", updates=[["tag", "'big'"]]))
    assert (answer.updated_rows, answer.version) == (2, 2)
    assert content(events) == {1: "x", 2: "big", 3: "big"}
    entry = logged(events, answer.transaction_id)
    assert (entry.operation, entry.actor, entry.detail["updated_rows"]) == ("update", "etl", 2)
    # nothing matched: no row changed (Lance still commits a version)
    none = ns.update_table(UpdateTableRequest(id=T, predicate="id > 99", updates=[["tag", "'z'"]]))
    assert none.updated_rows == 0 and none.version == version(events)
    assert content(events) == {1: "x", 2: "big", 3: "big"}


def test_merge_insert_upserts_on_the_key(events: RestLake) -> None:
    ns = rest_namespace(events.url, events.tokens["writer"])
    data = rows([2, 4], "new")
    answer = ns.merge_insert_into_table(
        MergeInsertIntoTableRequest(
            id=T, on=["id"], when_matched_update_all=True, when_not_matched_insert_all=True
        ),
        ipc(data),
    )
    assert (answer.num_updated_rows, answer.num_inserted_rows, answer.version) == (1, 1, 2)
    assert content(events) == {1: "x", 2: "new", 3: "x", 4: "new"}
    assert logged(events, answer.transaction_id).operation == "merge"


def test_delete_from_table(events: RestLake) -> None:
    ns = rest_namespace(events.url, events.tokens["writer"])
    answer = ns.delete_from_table(DeleteFromTableRequest(id=T, predicate="id = 1"))
    assert answer.version == 2 and content(events) == {2: "x", 3: "x"}


def test_a_delete_that_matches_nothing_commits_nothing(events: RestLake) -> None:
    """As an empty append: no version, no log entry; the answer is the current version, on
    main and on a branch (whose head stays too)."""
    ns = rest_namespace(events.url, events.tokens["writer"])
    log = len(events.catalog.reads.log(NAME))
    answer = ns.delete_from_table(DeleteFromTableRequest(id=T, predicate="id > 99"))
    assert (answer.version, version(events), content(events)) == (1, 1, {1: "x", 2: "x", 3: "x"})
    events.catalog.branches.create_branch(NAME, "dev")
    on_branch = ns.delete_from_table(DeleteFromTableRequest(id=T, branch="dev", predicate="id > 99"))
    head = events.catalog.branches.branch(TableName.parse(NAME), "dev")[0].current_version
    assert (on_branch.version, head) == (1, 1)
    assert len(events.catalog.reads.log(NAME)) == log + 1  # the branch's create only


def test_refusals_change_nothing(events: RestLake) -> None:
    before = (version(events), content(events))
    update = f"/v1/table/{TP}/update"
    for body, who, expected in [
        ({"updates": [["tag", "'a'"]]}, "reader", (403, 15)),
        ({"updates": [["nope", "'a'"]]}, "writer", (400, 13)),
        ({"updates": [["tag", "nope + 1"]]}, "writer", (400, 13)),
        ({"updates": [["tag"]]}, "writer", (400, 13)),
        ({"updates": []}, "writer", (400, 13)),
        ({"updates": [["tag", "'a'"]], "predicate": "nope > 1"}, "writer", (400, 13)),
        ({"updates": [["tag", "'a'"]]}, "other", (404, 4)),
    ]:
        assert problem(events.post(update, body, who=who)) == expected, body
    merge = f"/v1/table/{TP}/merge_insert"
    arrow = {"content-type": "application/vnd.apache.arrow.stream"}
    good = ipc(rows([9]))
    for params, data, who, expected in [
        ({"on": "id", "when_not_matched_insert_all": "true"}, good, "reader", (403, 15)),
        ({"when_not_matched_insert_all": "true"}, good, "writer", (400, 13)),
        ({"on": "nope", "when_not_matched_insert_all": "true"}, good, "writer", (400, 13)),
        ({"on": "id"}, good, "writer", (400, 13)),
        ({"on": "id", "when_not_matched_insert_all": "true"}, b"not arrow", "writer", (400, 13)),
        (
            {"on": "id", "when_not_matched_insert_all": "true"},
            ipc(pa.table({"id": pa.array([9], pa.int64()), "other": ["x"]})),
            "writer",
            (400, 13),
        ),
    ]:
        resp = events.post(merge, None, who=who, params=params, data=data, headers=arrow)
        assert problem(resp) == expected, (params, resp.text)
    assert (version(events), content(events)) == before
    with pytest.raises(ns_errors.PermissionDeniedError):
        rest_namespace(events.url, events.tokens["reader"]).update_table(
            UpdateTableRequest(id=T, updates=[["tag", "'a'"]])
        )


def test_modes_are_read_in_either_case_the_spec_allows(events: RestLake) -> None:
    """The spec's modes are case insensitive, PascalCase or snake_case: ``ExistOk`` keeps the
    table as ``exist_ok`` does, ``Append`` appends; an unknown mode is 400 naming the valid ones."""
    arrow = {"content-type": "application/vnd.apache.arrow.stream"}
    create = f"/v1/table/{TP}/create"
    for mode in ("ExistOk", "EXIST_OK", "exist_ok"):
        kept = events.post(create, None, params={"mode": mode}, data=ipc(rows([9])), headers=arrow)
        assert kept.status_code == 200 and kept.json()["version"] == 1, (mode, kept.text)
    appended = events.post(
        f"/v1/table/{TP}/insert", None, params={"mode": "Append"}, data=ipc(rows([4])), headers=arrow
    )
    assert appended.status_code == 200 and appended.json()["version"] == 2, appended.text
    before = (version(events), content(events))
    refused = events.post(create, None, params={"mode": "exists"}, data=ipc(rows([9])), headers=arrow)
    assert problem(refused) == (400, 13) and "exist_ok" in refused.json()["detail"]
    assert (version(events), content(events)) == before


def test_a_null_in_a_non_nullable_column_is_a_schema_error_not_a_500(events: RestLake) -> None:
    """The table's column is declared non-nullable; an insert whose batch has a null there is
    refused as the data not fitting the table (400, code 20), naming the column, and nothing
    is committed (it was a 500 with Lance's text)."""
    strict = pa.schema([pa.field("id", pa.int64(), nullable=False), pa.field("tag", pa.string())])
    events.catalog.tables.create_table(
        "p.w.ns.strict", pa.table({"id": [1], "tag": ["x"]}, strict).to_reader()
    )
    nulls = pa.table({"id": pa.array([2, None], pa.int64()), "tag": ["y", "z"]})
    arrow = {"content-type": "application/vnd.apache.arrow.stream"}
    resp = events.post("/v1/table/p$w$ns$strict/insert", None, data=ipc(nulls), headers=arrow)
    assert problem(resp) == (400, 20), resp.text
    assert "id" in resp.json()["detail"] and "null" in resp.json()["detail"]
    assert events.catalog.reads.open_table("p.w.ns.strict").dataset.to_table().num_rows == 1


def test_create_exist_ok_keeps_a_declared_table_as_it_is(events: RestLake) -> None:
    """ExistOk on a table declared and not yet written answers it kept (its location, no
    version), as for a written one; it said the table did not exist (404) after create had
    said it did (409)."""
    declared = events.post("/v1/table/p$w$ns$later/declare", {})
    assert declared.status_code == 200, declared.text
    arrow = {"content-type": "application/vnd.apache.arrow.stream"}
    path = "/v1/table/p$w$ns$later/create"
    assert problem(events.post(path, None, data=ipc(rows([1])), headers=arrow)) == (409, 5)
    kept = events.post(path, None, params={"mode": "exist_ok"}, data=ipc(rows([1])), headers=arrow)
    assert kept.status_code == 200, kept.text
    answer = kept.json()
    assert (answer["location"], answer["version"], answer["transaction_id"]) == (
        declared.json()["location"],
        0,
        None,
    )
    described = events.post("/v1/table/p$w$ns$later/describe", {}).json()
    assert described["is_only_declared"] is True  # nothing was written


def test_decimals_are_created_inserted_and_merged_whatever_their_place_in_the_body(
    events: RestLake,
) -> None:
    """A decimal128 column's values need 16-byte aligned memory in Lance; an IPC stream aligns
    its buffers to 8 bytes, so with one int64 column before it (or three) the body was read in
    place, misaligned, and Lance panicked: a 500. Each layout is now read whole."""
    arrow = {"content-type": "application/vnd.apache.arrow.stream"}
    for before in range(1, 4):
        keys = {f"k{i}": pa.array([1, 2], pa.int64()) for i in range(before)}
        cents = pa.array([Decimal("1.50"), Decimal("-99999999.99")], pa.decimal128(10, 2))
        table = pa.table({**keys, "d": cents})
        path = f"/v1/table/p$w$ns$money{before}"
        created = events.post(f"{path}/create", None, data=ipc(table), headers=arrow)
        assert created.status_code == 200, created.text
        inserted = events.post(f"{path}/insert", None, data=ipc(table), headers=arrow)
        assert inserted.status_code == 200, inserted.text
        merged = events.post(
            f"{path}/merge_insert",
            None,
            params={"on": "k0", "when_matched_update_all": "true"},
            data=ipc(table.slice(0, 1)),
            headers=arrow,
        )
        assert merged.status_code == 200, merged.text
        back = events.catalog.reads.open_table(f"p.w.ns.money{before}").dataset.to_table()
        assert back.schema == table.schema
        assert sorted(back.column("d").to_pylist()) == sorted(cents.to_pylist() * 2)


#: Columns Lance either refuses only mid-write (a 500 before) or writes into a table no scan then
#: reads (a 200 before): a struct with two fields of one name, at the top or nested in a list.
_TWINS = pa.StructArray.from_arrays([pa.array([1]), pa.array([2])], names=["a", "a"])
UNREADABLE = {
    "reserved": pa.table({"id": pa.array([1], pa.int64()), "_rowid": pa.array([5], pa.uint64())}),
    "struct_twins": pa.table({"id": pa.array([1], pa.int64()), "s": _TWINS}),
    "listed_twins": pa.table(
        {"id": pa.array([1], pa.int64()), "l": pa.ListArray.from_arrays(pa.array([0, 1], pa.int32()), _TWINS)}
    ),
}


@pytest.mark.parametrize("case", UNREADABLE)
def test_a_create_with_columns_lance_cannot_read_is_refused(events: RestLake, case: str) -> None:
    resp = events.post(
        "/v1/table/p$w$ns$odd/create",
        headers={"Content-Type": "application/vnd.apache.arrow.stream"},
        data=ipc(UNREADABLE[case]),
    )
    assert problem(resp) == (400, 20), resp.text  # TableSchemaValidationError
    assert [r.name for r in events.catalog.reads.list_tables("p.w.ns", declared=True)] == [NAME]


@pytest.mark.parametrize("case", UNREADABLE)
def test_an_append_adding_columns_lance_cannot_read_is_refused(events: RestLake, case: str) -> None:
    events.catalog.policies.set_policy("p.w.ns", {"schema_evolution": "add_columns"})
    before = version_and_columns(events)
    resp = events.post(
        f"/v1/table/{TP}/insert",
        headers={"Content-Type": "application/vnd.apache.arrow.stream"},
        data=ipc(UNREADABLE[case]),
    )
    assert problem(resp) == (400, 20), resp.text
    assert version_and_columns(events) == before
    assert sorted(content(events)) == [1, 2, 3]


def test_a_merge_insert_without_a_non_nullable_column_is_refused(events: RestLake) -> None:
    """A merge's body may leave out a nullable column (Lance's partial columns: inserted rows
    read null there, updated rows keep their value); leaving out a non-nullable one, or sending
    a null in it, would put nulls where the table says there are none. Checked, not a defect:
    Lance refuses both before committing and the catalog answers 400 InvalidInput (13) naming the
    column in Lance's words, nothing committed (an insert's null is 20)."""
    strict = pa.schema(
        [pa.field("id", pa.int64(), nullable=False), pa.field("qty", pa.int64(), nullable=False)]
    )
    events.catalog.tables.create_table(
        "p.w.ns.strict", pa.table({"id": [1], "qty": [10]}, strict).to_reader()
    )
    merge = "/v1/table/p$w$ns$strict/merge_insert"
    arrow = {"content-type": "application/vnd.apache.arrow.stream"}
    params = {"on": "id", "when_matched_update_all": "true", "when_not_matched_insert_all": "true"}
    for data, code in (
        (pa.table({"id": pa.array([1, 2], pa.int64())}), 13),
        (pa.table({"id": pa.array([1, 2], pa.int64()), "qty": pa.array([None, 5], pa.int64())}), 13),
    ):
        resp = events.post(merge, None, params=params, data=ipc(data), headers=arrow)
        assert problem(resp) == (400, code), resp.text
        assert "qty" in resp.json()["detail"], resp.json()
    snap = events.catalog.reads.open_table("p.w.ns.strict")
    assert snap.version == 1 and snap.dataset.to_table().to_pylist() == [{"id": 1, "qty": 10}]
