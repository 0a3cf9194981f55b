"""Branches over REST, through pylance's own RestNamespace and plain HTTP: ListTableBranches,
CreateTableBranch and DeleteTableBranch as registry commits (logged, under the caller's name),
and ``branch`` on DescribeTable, QueryTable, CountTableRows, the version operations and
InsertIntoTable: a branch is read and written on its own line, main never moves. Refusals (also
of the changes on a branch test_branch_changes.py makes) are the spec's errors and change
nothing; another tenant's table looks missing."""

from __future__ import annotations

import lance_namespace.errors as ns_errors
import pyarrow as pa
import pytest
from lance_namespace_urllib3_client.models import (
    CountTableRowsRequest,
    CreateTableBranchRequest,
    DeleteTableBranchRequest,
    DescribeTableRequest,
    InsertIntoTableRequest,
    ListTableBranchesRequest,
    ListTableVersionsRequest,
    QueryTableRequest,
)

from lake_platform.catalog.idempotency import HEADER
from lake_platform.naming import TableName
from lake_platform_tests.rest.clients import rest_namespace, rows
from lake_platform_tests.rest.conftest import RestLake
from lake_platform_tests.rest.handlers.events import NAME, TP, T, append, ipc, problem

ARROW = {"content-type": "application/vnd.apache.arrow.stream"}


@pytest.fixture
def events(events: RestLake) -> RestLake:
    """Main: version 1 holds ids 1-3 (conftest's), version 2 adds 4."""
    append(events, [4])
    return events


def main_state(lake: RestLake) -> tuple[int, list[int]]:
    record = lake.catalog.ctx.table(TableName.parse(NAME))[0]
    ids = lake.catalog.reads.open_table(NAME).dataset.to_table().column("id").to_pylist()
    return record.current_version, sorted(ids)


def branch_ids(lake: RestLake, branch: str, version: int | None = None) -> list[int]:
    snap = lake.catalog.branches.open_branch(NAME, branch, version)
    return sorted(snap.dataset.to_table().column("id").to_pylist())


def listed(lake: RestLake) -> list[str]:
    return [b.branch for b in lake.catalog.branches.list_branches(NAME)]


def log_size(lake: RestLake) -> int:
    return len(list(lake.catalog.reads.log(NAME)))


def test_create_list_and_delete_through_pylance(events: RestLake) -> None:
    ns = rest_namespace(events.url, events.tokens["writer"])
    made = ns.create_table_branch(CreateTableBranchRequest(id=T, name="dev"))
    old = ns.create_table_branch(CreateTableBranchRequest(id=T, name="old", from_version=1))
    child = ns.create_table_branch(CreateTableBranchRequest(id=T, name="child", from_branch="old"))
    entry = next(e for e in events.catalog.reads.log(NAME) if e.commit_id == made.transaction_id)
    assert (entry.operation, entry.actor, entry.detail["branch"]) == ("branch-create", "etl", "dev")
    assert {old.transaction_id, child.transaction_id} <= {e.commit_id for e in events.catalog.reads.log(NAME)}

    found = ns.list_table_branches(ListTableBranchesRequest(id=T)).branches
    assert sorted(found) == ["child", "dev", "old"]
    assert (found["dev"].parent_branch, found["dev"].parent_version) == (None, 2)
    assert (found["old"].parent_branch, found["old"].parent_version) == (None, 1)
    assert (found["child"].parent_branch, found["child"].parent_version) == ("old", 1)
    assert found["dev"].metadata == {"version": "2", "main_version": "2", "created_by": "etl"}
    assert found["dev"].manifest_size > 0 and found["dev"].create_at > 1_700_000_000
    assert branch_ids(events, "old") == [1, 2, 3]  # made from main's version 1

    gone = ns.delete_table_branch(DeleteTableBranchRequest(id=T, name="dev"))
    entry = next(e for e in events.catalog.reads.log(NAME) if e.commit_id == gone.transaction_id)
    assert (entry.operation, entry.detail["branch"]) == ("branch-delete", "dev")
    assert sorted(ns.list_table_branches(ListTableBranchesRequest(id=T)).branches) == ["child", "old"]
    assert main_state(events) == (2, [1, 2, 3, 4])


def test_branches_are_listed_in_pages(events: RestLake) -> None:
    for name in ("a", "b", "c"):
        events.catalog.branches.create_branch(NAME, name)
    first = events.post(f"/v1/table/{TP}/branches/list?limit=2").json()
    assert (sorted(first["branches"]), first["page_token"]) == (["a", "b"], "b")
    rest = events.post(f"/v1/table/{TP}/branches/list?limit=2&page_token=b").json()
    assert (sorted(rest["branches"]), rest.get("page_token")) == (["c"], None)


def test_insert_on_a_branch_leaves_main_unchanged(events: RestLake) -> None:
    ns = rest_namespace(events.url, events.tokens["writer"])
    ns.create_table_branch(CreateTableBranchRequest(id=T, name="dev"))
    answer = ns.insert_into_table(
        InsertIntoTableRequest(id=T, branch="dev", mode="append"), ipc(rows([5, 6]))
    )
    assert (answer.num_inserted_rows, answer.version) == (2, 3)
    assert branch_ids(events, "dev") == [1, 2, 3, 4, 5, 6]
    assert main_state(events) == (2, [1, 2, 3, 4])
    entry = next(e for e in events.catalog.reads.log(NAME) if e.commit_id == answer.transaction_id)
    assert (entry.operation, entry.actor, entry.detail["branch"]) == ("append", "etl", "dev")
    # an overwrite of the branch (plain HTTP, the branch as the spec's query parameter)
    resp = events.post(f"/v1/table/{TP}/insert?branch=dev&mode=overwrite", data=ipc(rows([9])), headers=ARROW)
    assert resp.status_code == 200, resp.text
    assert resp.json()["version"] == 4
    assert branch_ids(events, "dev") == [9]
    assert branch_ids(events, "dev", 3) == [1, 2, 3, 4, 5, 6]
    assert main_state(events) == (2, [1, 2, 3, 4])


def test_describe_query_count_and_versions_of_a_branch(events: RestLake) -> None:
    ns = rest_namespace(events.url, events.tokens["writer"])
    ns.create_table_branch(CreateTableBranchRequest(id=T, name="dev", from_version=1))
    ns.insert_into_table(InsertIntoTableRequest(id=T, branch="dev", mode="append"), ipc(rows([7])))

    head = ns.describe_table(DescribeTableRequest(id=T, branch="dev"))
    main = ns.describe_table(DescribeTableRequest(id=T))
    assert (head.version, main.version) == (2, 2)
    assert head.location != main.location and head.location.endswith("/tree/dev")
    assert ns.describe_table(DescribeTableRequest(id=T, branch="dev", version=1)).version == 1
    detailed = events.post(f"/v1/table/{TP}/describe", {"branch": "dev", "load_detailed_metadata": True})
    assert [f["name"] for f in detailed.json()["schema"]["fields"]] == ["id", "tag"]

    answer = ns.query_table(QueryTableRequest(id=T, branch="dev", k=0, vector={}, filter="id > 1"))
    table = pa.ipc.open_file(pa.BufferReader(answer.data)).read_all()
    assert sorted(table.column("id").to_pylist()) == [2, 3, 7]
    older = ns.query_table(QueryTableRequest(id=T, branch="dev", version=1, k=0, vector={}))
    assert sorted(pa.ipc.open_file(pa.BufferReader(older.data)).read_all().column("id").to_pylist()) == [
        1,
        2,
        3,
    ]

    assert ns.count_table_rows(CountTableRowsRequest(id=T, branch="dev")).count == 4
    assert ns.count_table_rows(CountTableRowsRequest(id=T, branch="dev", predicate="id > 2")).count == 2
    assert ns.count_table_rows(CountTableRowsRequest(id=T, branch="dev", version=1)).count == 3
    assert ns.count_table_rows(CountTableRowsRequest(id=T)).count == 4  # main: 1-4
    assert ns.count_table_rows(CountTableRowsRequest(id=T, branch="main")).count == 4

    versions = ns.list_table_versions(ListTableVersionsRequest(id=T, branch="dev")).versions
    assert [v.version for v in versions] == [1, 2]
    assert all("/tree/dev/_versions/" in v.manifest_path for v in versions)
    one = ns.describe_table_version({"id": T, "branch": "dev", "version": 2})
    assert one["version"]["version"] == 2
    # a version outside the branch's line: 404, as for main
    resp = events.post(f"/v1/table/{TP}/version/describe", {"branch": "dev", "version": 9})
    assert problem(resp) == (404, 11)
    assert problem(events.post(f"/v1/table/{TP}/describe", {"branch": "dev", "version": 9})) == (404, 11)


def test_refusals_are_the_spec_errors_and_change_nothing(events: RestLake) -> None:
    events.catalog.branches.create_branch(NAME, "dev")
    before = (main_state(events), listed(events), log_size(events), branch_ids(events, "dev"))
    ns = rest_namespace(events.url, events.tokens["writer"])
    with pytest.raises(ns_errors.TableBranchAlreadyExistsError):
        ns.create_table_branch(CreateTableBranchRequest(id=T, name="dev"))
    with pytest.raises(ns_errors.TableBranchNotFoundError):
        ns.delete_table_branch(DeleteTableBranchRequest(id=T, name="nope"))
    with pytest.raises(ns_errors.TableBranchNotFoundError):
        ns.describe_table(DescribeTableRequest(id=T, branch="nope"))
    with pytest.raises(ns_errors.TableBranchNotFoundError):
        ns.create_table_branch(CreateTableBranchRequest(id=T, name="x", from_branch="nope"))
    with pytest.raises(ns_errors.TableVersionNotFoundError):
        ns.create_table_branch(CreateTableBranchRequest(id=T, name="x", from_version=9))
    with pytest.raises(ns_errors.TableBranchNotFoundError):
        ns.insert_into_table(InsertIntoTableRequest(id=T, branch="nope", mode="append"), ipc(rows([8])))
    path = f"/v1/table/{TP}"
    assert problem(events.post(f"{path}/branches/create", {"name": "main"})) == (400, 13)
    assert problem(events.post(f"{path}/branches/create", {"name": "Bad-Name"})) == (400, 13)
    assert problem(events.post(f"{path}/branches/create", {})) == (400, 13)
    assert problem(events.post(f"{path}/query", {"branch": "nope", "k": 1})) == (404, 22)
    assert problem(events.post(f"{path}/count_rows", {"branch": "nope"})) == (404, 22)
    assert problem(events.post(f"{path}/describe", {"branch": "dev", "tag": "t"})) == (400, 13)
    other_columns = ipc(pa.table({"id": pa.array([8], pa.int64()), "extra": [1.5]}))
    resp = events.post(f"{path}/insert?branch=dev", data=other_columns, headers=ARROW)
    assert problem(resp) == (400, 20)  # an append fits the branch as it is: schemas change by overwrite
    # a reader lists and reads, and may not make or delete a branch
    assert problem(events.post(f"{path}/branches/create", {"name": "r"}, who="reader")) == (403, 15)
    assert problem(events.post(f"{path}/branches/delete", {"name": "dev"}, who="reader")) == (403, 15)
    assert list(events.post(f"{path}/branches/list", who="reader").json()["branches"]) == ["dev"]
    # a batch's entry on the branch names a manifest in the branch's dataset
    entry = {"id": T, "branch": "dev", "version": 3, "manifest_path": "x"}
    resp = events.post("/v1/table/version/batch-create", {"entries": [entry]})
    assert problem(resp) == (400, 13) and "_versions/ folder" in resp.json()["detail"]
    # a branch's changes refused as main's are: bad input, an unknown branch, a reader
    for op, body, who, expected in (
        ("update", {"branch": "dev", "updates": [["nope", "'y'"]]}, "writer", (400, 13)),
        (
            "update",
            {"branch": "dev", "updates": [["tag", "'y'"]], "predicate": "nope >"},
            "writer",
            (400, 13),
        ),
        ("update", {"branch": "nope", "updates": [["tag", "'y'"]]}, "writer", (404, 22)),
        ("update", {"branch": "dev", "updates": [["tag", "'y'"]]}, "reader", (403, 15)),
        ("delete", {"branch": "dev", "predicate": "id >"}, "writer", (400, 13)),
        ("delete", {"branch": "nope", "predicate": "id > 1"}, "writer", (404, 22)),
        (
            "add_columns",
            {"branch": "dev", "new_columns": [{"name": "id", "expression": "1"}]},
            "writer",
            (400, 20),
        ),
        (
            "add_columns",
            {"branch": "dev", "new_columns": [{"name": "z", "expression": "nope+"}]},
            "writer",
            (400, 13),
        ),
        (
            "alter_columns",
            {"branch": "dev", "alterations": [{"path": "tag", "rename": "t"}]},
            "writer",
            (403, 15),
        ),
        ("drop_columns", {"branch": "dev", "columns": ["nope"]}, "admin", (404, 12)),
        ("drop_columns", {"branch": "dev", "columns": ["id", "tag"]}, "admin", (400, 20)),
        ("version/create", {"branch": "dev", "version": 3, "manifest_path": "x"}, "writer", (400, 13)),
    ):
        assert problem(events.post(f"{path}/{op}", body, who=who)) == expected, (op, body)
    # a manifest another table staged, or main's, is not the branch's
    main_manifest = events.catalog.reads.open_table(NAME).record.location + "/_versions/3.manifest"
    resp = events.post(
        f"{path}/version/create", {"branch": "dev", "version": 3, "manifest_path": main_manifest}
    )
    assert problem(resp) == (400, 13)
    resp = events.post(f"{path}/merge_insert?branch=dev&on=nope", data=ipc(rows([1])), headers=ARROW)
    assert problem(resp) == (400, 13)
    assert (main_state(events), listed(events), log_size(events), branch_ids(events, "dev")) == before


def test_an_idempotent_insert_on_a_branch_lands_once(events: RestLake) -> None:
    events.catalog.branches.create_branch(NAME, "dev")
    url = f"/v1/table/{TP}/insert?branch=dev"
    first = events.post(url, data=ipc(rows([5])), headers={**ARROW, HEADER: "k-1"})
    again = events.post(url, data=ipc(rows([5])), headers={**ARROW, HEADER: "k-1"})
    assert first.status_code == again.status_code == 200, (first.text, again.text)
    assert again.json() == first.json()
    assert branch_ids(events, "dev") == [1, 2, 3, 4, 5]
    # the key reused for other rows, or for main: 422, nothing written
    other = events.post(url, data=ipc(rows([6])), headers={**ARROW, HEADER: "k-1"})
    main = events.post(f"/v1/table/{TP}/insert", data=ipc(rows([5])), headers={**ARROW, HEADER: "k-1"})
    assert (other.status_code, main.status_code) == (422, 422)
    assert branch_ids(events, "dev") == [1, 2, 3, 4, 5]
    assert main_state(events) == (2, [1, 2, 3, 4])


def test_another_tenant_sees_nothing(events: RestLake) -> None:
    events.catalog.branches.create_branch(NAME, "dev")
    before = (main_state(events), listed(events), log_size(events))
    path = f"/v1/table/{TP}"
    for op, body in (
        ("branches/list", None),
        ("branches/create", {"name": "theirs"}),
        ("branches/delete", {"name": "dev"}),
        ("describe", {"branch": "dev"}),
        ("query", {"branch": "dev", "k": 1}),
        ("count_rows", {"branch": "dev"}),
        ("version/list", {"branch": "dev"}),
    ):
        assert problem(events.post(f"{path}/{op}", body, who="other")) == (404, 4), op
    resp = events.post(f"{path}/insert?branch=dev", data=ipc(rows([8])), headers=ARROW, who="other")
    assert problem(resp) == (404, 4)
    assert (main_state(events), listed(events), log_size(events)) == before


def test_publish_and_undrop_are_lake_routes(events: RestLake) -> None:
    path = f"/v1/table/{TP}/branches"
    events.catalog.branches.create_branch(NAME, "dev")
    insert = f"/v1/table/{TP}/insert?branch=dev"
    assert events.post(insert, data=ipc(rows([5])), headers=ARROW).status_code == 200
    # the reader may not publish; another tenant sees no table; nothing changes
    assert problem(events.post(f"{path}/publish", {"name": "dev"}, who="reader")) == (403, 15)
    assert problem(events.post(f"{path}/publish", {"name": "dev"}, who="other")) == (404, 4)
    assert main_state(events) == (2, [1, 2, 3, 4])
    answer = events.post(f"{path}/publish", {"name": "dev"}).json()
    assert (answer["from_version"], answer["version"]) == (2, 3)
    assert main_state(events) == (3, [1, 2, 3, 4, 5])
    entry = next(e for e in events.catalog.reads.log(NAME) if e.commit_id == answer["transaction_id"])
    assert (entry.operation, entry.detail["branch"]) == ("publish", "dev")
    assert listed(events) == []  # consumed

    # main moved since the branch was made: 409 ConcurrentModification naming both, nothing changes
    events.catalog.branches.create_branch(NAME, "late")
    events.post(f"/v1/table/{TP}/insert?branch=late", data=ipc(rows([6])), headers=ARROW)
    events.post(f"/v1/table/{TP}/insert", data=ipc(rows([7])), headers=ARROW)
    before = (main_state(events), listed(events), branch_ids(events, "late"))
    resp = events.post(f"{path}/publish", {"name": "late"})
    assert problem(resp) == (409, 14) and "moved" in resp.json()["detail"]
    assert (main_state(events), listed(events), branch_ids(events, "late")) == before

    # a deleted branch comes back from the trash as it was; undropping a live one is 409
    events.post(f"{path}/delete", {"name": "late"})
    assert listed(events) == []
    assert events.post(f"{path}/undrop", {"name": "late"}).json()["branch"] == "late"
    assert (listed(events), branch_ids(events, "late")) == (["late"], before[2])
    assert problem(events.post(f"{path}/undrop", {"name": "late"})) == (409, 23)
    assert problem(events.post(f"{path}/undrop", {"name": "nope"})) == (404, 22)
