"""Changes on a branch over REST (issue 46): UpdateTable, MergeInsertIntoTable, DeleteFromTable,
the AlterTable*Columns operations, UpdateTableSchemaMetadata, UpdateFieldMetadata and a Lance
client's CreateTableVersion with ``branch``, through pylance's own RestNamespace and plain HTTP.
Each is one commit on the branch's own line, checked against the registry: the branch's head
moved by one, main unchanged, a log entry with ``detail.branch``. Refusals are in
test_branches.py (the metadata changes' are beside their test here)."""

from __future__ import annotations

import os
from typing import Any

import lance
import pytest
from lance.namespace import RestNamespace
from lance_namespace import LanceNamespace
from lance_namespace_urllib3_client.models import (
    AddColumnsEntry,
    AlterColumnsEntry,
    AlterTableAddColumnsRequest,
    AlterTableAlterColumnsRequest,
    AlterTableDropColumnsRequest,
    CreateTableBranchRequest,
    DeleteFromTableRequest,
    DescribeTableRequest,
    ListTableVersionsRequest,
    MergeInsertIntoTableRequest,
    UpdateTableRequest,
    UpdateTableSchemaMetadataRequest,
)

from lake_platform.catalog.arrow_io import schema_from_ipc
from lake_platform.catalog.idempotency import HEADER
from lake_platform.naming import TableName
from lake_platform_tests.rest.clients import rest_namespace, rows
from lake_platform_tests.rest.conftest import RestLake
from lake_platform_tests.rest.handlers.events import NAME, TP, T, append, ipc, problem
from lake_platform_tests.rest.handlers.staging import StagingOnly


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


def branch_head(lake: RestLake, branch: str = "dev") -> int:
    return lake.catalog.branches.branch(TableName.parse(NAME), branch)[0].current_version


def logged(lake: RestLake, commit_id: str) -> Any:
    return next(e for e in lake.catalog.reads.log(NAME) if e.commit_id == commit_id)


def test_update_merge_and_delete_on_a_branch_through_pylance(events: RestLake) -> None:
    ns = rest_namespace(events.url, events.tokens["writer"])
    ns.create_table_branch(CreateTableBranchRequest(id=T, name="dev"))
    assert branch_head(events) == 2

    updated = ns.update_table(
        UpdateTableRequest(id=T, branch="dev", predicate="id >= 3", updates=[["tag", "'u'"]])
    )
    assert (updated.updated_rows, updated.version, branch_head(events)) == (2, 3, 3)
    merged = ns.merge_insert_into_table(
        MergeInsertIntoTableRequest(
            id=T, branch="dev", on=["id"], when_matched_update_all=True, when_not_matched_insert_all=True
        ),
        ipc(rows([4, 5], "m")),
    )
    assert (merged.num_updated_rows, merged.num_inserted_rows, merged.version) == (1, 1, 4)
    deleted = ns.delete_from_table(DeleteFromTableRequest(id=T, branch="dev", predicate="id = 1"))
    assert (deleted.version, branch_head(events)) == (5, 5)

    content = events.catalog.branches.open_branch(NAME, "dev").dataset.to_table().sort_by("id").to_pylist()
    assert [(r["id"], r["tag"]) for r in content] == [(2, "x"), (3, "u"), (4, "m"), (5, "m")]
    assert branch_ids(events, "dev", 2) == [1, 2, 3, 4]  # the branch's older versions still read
    assert main_state(events) == (2, [1, 2, 3, 4])  # main never moved
    for answer, operation in ((updated, "update"), (merged, "merge"), (deleted, "delete")):
        entry = logged(events, answer.transaction_id)
        assert (entry.operation, entry.actor, entry.detail["branch"]) == (operation, "etl", "dev")
    assert logged(events, deleted.transaction_id).rows_removed == 1


def test_schema_changes_on_a_branch_through_pylance(events: RestLake) -> None:
    events.catalog.branches.create_branch(NAME, "dev")
    writer, admin = (
        rest_namespace(events.url, events.tokens["writer"]),
        rest_namespace(events.url, events.tokens["admin"]),
    )
    added = writer.alter_table_add_columns(
        AlterTableAddColumnsRequest(
            id=T, branch="dev", new_columns=[AddColumnsEntry(name="twice", expression="id * 2")]
        )
    )
    renamed = admin.alter_table_alter_columns(
        AlterTableAlterColumnsRequest(
            id=T, branch="dev", alterations=[AlterColumnsEntry(path="tag", rename="label")]
        )
    )
    dropped = admin.alter_table_drop_columns(
        AlterTableDropColumnsRequest(id=T, branch="dev", columns=["twice"])
    )
    assert (added.version, renamed.version, dropped.version, branch_head(events)) == (3, 4, 5, 5)
    described = events.catalog.branches.describe_branch(NAME, "dev")
    assert [c["name"] for c in described["schema"]] == ["id", "label"]
    with_twice = events.catalog.branches.open_branch(NAME, "dev", 3).dataset.to_table()
    assert sorted(with_twice.column("twice").to_pylist()) == [2, 4, 6, 8]
    # main's schema and head are as they were
    record = events.catalog.ctx.table(TableName.parse(NAME))[0]
    assert (record.current_version, schema_from_ipc(record.schema_ipc).names) == (2, ["id", "tag"])
    on_branch = [
        (e.operation, e.to_version) for e in events.catalog.reads.log(NAME) if e.detail.get("branch")
    ]
    assert on_branch[-3:] == [("add-columns", 3), ("rename-column", 4), ("drop-column", 5)]
    # a protected table's columns are not dropped on a branch either (publishing would hide them)
    events.catalog.containers.set_protected(NAME)
    resp = events.post(f"/v1/table/{TP}/drop_columns", {"branch": "dev", "columns": ["label"]}, who="admin")
    assert problem(resp) == (409, 19)  # Protected: InvalidTableState
    assert branch_head(events) == 5


def described_schema(
    lake: RestLake, body: dict[str, Any]
) -> tuple[dict[str, str], dict[str, dict[str, str]]]:
    """DescribeTable's detailed schema: (its metadata, each column's metadata)."""
    resp = lake.post(f"/v1/table/{TP}/describe", {**body, "load_detailed_metadata": True}, who="reader")
    assert resp.status_code == 200, resp.text
    schema = resp.json()["schema"]
    return schema.get("metadata", {}), {f["name"]: f.get("metadata", {}) for f in schema["fields"]}


def test_metadata_changes_on_a_branch(events: RestLake) -> None:
    """UpdateTableSchemaMetadata (pylance's bare map, the wrapped form, a query parameter) and
    UpdateFieldMetadata with ``branch``: one commit each on the branch, shown by the branch's
    DescribeTable and not by main's; main's version unchanged. A missing branch is 404 (22),
    and no refusal changes anything."""
    events.catalog.branches.create_branch(NAME, "dev")
    writer = rest_namespace(events.url, events.tokens["writer"])
    answer = writer.update_table_schema_metadata(
        UpdateTableSchemaMetadataRequest(id=T, branch="dev", metadata={"owner": "etl", "pii": "no"})
    )
    assert (answer.metadata, branch_head(events)) == ({"owner": "etl", "pii": "no"}, 3)
    path = f"/v1/table/{TP}/schema_metadata/update"
    wrapped = events.post(path, {"branch": "dev", "metadata": {"pii": None, "tier": "gold"}}).json()
    assert wrapped["metadata"] == {"owner": "etl", "tier": "gold"}
    entry = logged(events, wrapped["transaction_id"])
    assert (entry.operation, entry.actor, entry.to_version, entry.detail["branch"]) == (
        "schema-metadata",
        "etl",
        4,
        "dev",
    )
    assert events.post(f"{path}?branch=dev", {"stage": "dev"}).json() == {
        "owner": "etl",
        "tier": "gold",
        "stage": "dev",
    }
    fields = events.post(
        f"/v1/table/{TP}/update_field_metadata",
        {"branch": "dev", "updates": [{"path": "id", "metadata": {"unit": "count"}}]},
    )
    assert fields.json() == {"version": 6, "fields": {"id": {"unit": "count"}}}
    last = events.catalog.reads.log(NAME)[-1]
    assert (last.operation, last.to_version, last.detail["branch"]) == ("field-metadata", 6, "dev")

    assert described_schema(events, {"branch": "dev"}) == (
        {"owner": "etl", "tier": "gold", "stage": "dev"},
        {"id": {"unit": "count"}, "tag": {}},
    )
    assert described_schema(events, {}) == ({}, {"id": {}, "tag": {}})
    assert main_state(events) == (2, [1, 2, 3, 4])

    before = (main_state(events), branch_head(events), len(events.catalog.reads.log(NAME)))
    field_path = f"/v1/table/{TP}/update_field_metadata"
    for where, body, who, expected in (
        (path, {"branch": "nope", "metadata": {"a": "b"}}, "writer", (404, 22)),
        (f"{path}?branch=nope", {"a": "b"}, "writer", (404, 22)),
        (path, {"branch": "dev", "metadata": {"a": "b"}}, "reader", (403, 15)),
        (path, {"branch": "dev", "metadata": {"a": 1}}, "writer", (400, 13)),
        (field_path, {"branch": "nope", "updates": [{"path": "id", "metadata": {}}]}, "writer", (404, 22)),
        (field_path, {"branch": "dev", "updates": [{"path": "nope", "metadata": {}}]}, "writer", (404, 12)),
        (field_path, {"branch": "dev", "updates": [{"path": "id", "metadata": {}}]}, "reader", (403, 15)),
    ):
        assert problem(events.post(where, body, who=who)) == expected, (where, body)
    assert (main_state(events), branch_head(events), len(events.catalog.reads.log(NAME))) == before


class OnBranch(LanceNamespace):
    """Pylance's RestNamespace with every request naming ``branch``: what a Lance client bound
    to a branch sends (pylance 14.0.2's write_dataset takes no branch of its own)."""

    def __init__(self, inner: LanceNamespace, branch: str) -> None:
        self.inner = inner
        self.branch = branch

    def namespace_id(self) -> str:
        return f"on-branch-{self.branch}"

    def _on_branch(self, request: Any, model: Any) -> Any:
        """The request naming the branch, as the model RestNamespace takes (Lance hands a
        Python namespace dicts for some calls)."""
        fields = request if isinstance(request, dict) else request.model_dump()
        return model.model_validate({**fields, "branch": self.branch})

    def describe_table(self, request: Any) -> Any:
        return self.inner.describe_table(self._on_branch(request, DescribeTableRequest))

    def list_table_versions(self, request: Any) -> Any:
        return self.inner.list_table_versions(self._on_branch(request, ListTableVersionsRequest))

    def describe_table_version(self, request: Any) -> Any:
        fields = request if isinstance(request, dict) else request.model_dump()
        return self.inner.describe_table_version({**fields, "branch": self.branch})

    def create_table_version(self, request: Any) -> Any:
        return self.inner.create_table_version({**request, "branch": self.branch})


def test_a_lance_client_commits_staged_manifests_to_a_branch(events: RestLake) -> None:
    events.catalog.branches.create_branch(NAME, "dev")
    ns = OnBranch(rest_namespace(events.url, events.tokens["writer"]), "dev")
    lance.write_dataset(rows([5, 6]), namespace_client=ns, table_id=T, mode="append")
    lance.write_dataset(rows([7]), namespace_client=ns, table_id=T, mode="append")
    assert branch_head(events) == 4
    assert branch_ids(events, "dev") == [1, 2, 3, 4, 5, 6, 7]
    assert branch_ids(events, "dev", 3) == [1, 2, 3, 4, 5, 6]
    assert main_state(events) == (2, [1, 2, 3, 4])
    entries = [
        e
        for e in events.catalog.reads.log(NAME)
        if e.detail.get("client") == "pylance" and "branch" in e.detail
    ]
    assert [
        (e.operation, e.from_version, e.to_version, e.rows_added, e.detail["branch"]) for e in entries
    ] == [
        ("append", 2, 3, 2, "dev"),
        ("append", 3, 4, 1, "dev"),
    ]
    # the client reads the branch back through the same namespace
    read = lance.dataset(namespace_client=ns, table_id=T)
    assert (read.version, read.count_rows()) == (4, 7)
    # a staged commit that drops a column takes admin, as on main: refused for the writer
    staged = StagingOnly(ns)
    with pytest.raises(OSError):  # Lance cannot tell whether the kept commit landed
        lance.dataset(namespace_client=staged, table_id=T).drop_columns(["tag"])
    assert staged.staged is not None
    body = {k: v for k, v in staged.staged.items() if v is not None and k != "id"} | {"branch": "dev"}
    refused = events.post(f"/v1/table/{TP}/version/create", body)
    assert problem(refused) == (403, 15), (body, refused.text)
    assert problem(events.post(f"/v1/table/{TP}/version/create", {**body, "version": 9})) == (403, 15)
    on_main = {k: v for k, v in body.items() if k != "branch"}  # the branch's manifest is not main's
    assert problem(events.post(f"/v1/table/{TP}/version/create", on_main, who="admin")) == (400, 13)
    url, key = f"/v1/table/{TP}/version/create", {HEADER: "v-1"}
    answer = events.post(url, body, who="admin", headers=key).json()
    assert answer["version"]["version"] == 5 and branch_head(events) == 5
    assert logged(events, answer["transaction_id"]).operation == "project"
    # a resend under the Idempotency-Key answers the first outcome and commits nothing, as on
    # main: the same manifest is the same commit whatever version it is sent as
    assert events.post(url, body, who="admin", headers=key).json() == answer
    assert events.post(url, {**body, "version": 6}, who="admin", headers=key).json() == answer
    assert branch_head(events) == 5
    assert main_state(events) == (2, [1, 2, 3, 4])


def test_an_idempotent_delete_on_a_branch_lands_once(events: RestLake) -> None:
    events.catalog.branches.create_branch(NAME, "dev")
    url = f"/v1/table/{TP}/delete"
    first = events.post(url, {"branch": "dev", "predicate": "id = 1"}, headers={HEADER: "d-1"})
    again = events.post(url, {"branch": "dev", "predicate": "id = 1"}, headers={HEADER: "d-1"})
    assert first.status_code == again.status_code == 200, (first.text, again.text)
    assert again.json() == first.json() and branch_head(events) == 3
    # the key reused on main, or for another predicate: 422, nothing deleted
    assert events.post(url, {"predicate": "id = 1"}, headers={HEADER: "d-1"}).status_code == 422
    assert (
        events.post(url, {"branch": "dev", "predicate": "id = 2"}, headers={HEADER: "d-1"}).status_code == 422
    )
    assert branch_ids(events, "dev") == [2, 3, 4]
    assert main_state(events) == (2, [1, 2, 3, 4])


def test_a_client_retry_on_a_branch_under_one_key_applies_the_batch_once(events: RestLake) -> None:
    """As on main (test_versions.py): a retry of the whole write stages a new manifest numbered
    after the first; under the same key (the header, or the Lance transaction property) it is
    answered with the first outcome and its staging manifest removed. Other rows under the key
    are 422."""
    events.catalog.branches.create_branch(NAME, "dev")
    auth = {"header.Authorization": events.headers()["Authorization"]}
    keyed = OnBranch(RestNamespace(uri=events.url, **auth, **{f"header.{HEADER}": "dev-load-1"}), "dev")
    for _ in range(2):
        lance.write_dataset(rows([10, 11]), namespace_client=keyed, table_id=T, mode="append")
    assert (branch_head(events), branch_ids(events, "dev")) == (3, [1, 2, 3, 4, 10, 11])
    ns = OnBranch(rest_namespace(events.url, events.tokens["writer"]), "dev")
    for _ in range(2):
        lance.write_dataset(
            rows([12]), namespace_client=ns, table_id=T, mode="append", transaction_properties={HEADER: "p-1"}
        )
    assert (branch_head(events), branch_ids(events, "dev")) == (4, [1, 2, 3, 4, 10, 11, 12])
    keys = [
        (e.detail["idempotency_key"], e.rows_added)
        for e in events.catalog.reads.log(NAME)
        if e.detail.get("idempotency_key")
    ]
    assert keys == [("dev-load-1", 2), ("p-1", 1)]
    location = events.catalog.branches.branch(TableName.parse(NAME), "dev")[0].location
    assert [p for p in os.listdir(f"{location}/_versions") if ".manifest-" in p] == []
    staging = StagingOnly(ns)
    with pytest.raises(OSError):  # the kept commit: Lance cannot tell whether it landed
        lance.write_dataset(rows([13, 14, 15]), namespace_client=staging, table_id=T, mode="append")
    assert staging.staged is not None
    body = {**staging.staged, "branch": "dev"}
    other = events.post(f"/v1/table/{TP}/version/create", body, headers={HEADER: "dev-load-1"})
    assert problem(other) == (422, 13), other.text
    # the key of main's commit of the same rows does not replay on the branch
    on_main = RestNamespace(uri=events.url, **auth, **{f"header.{HEADER}": "main-1"})
    lance.write_dataset(rows([13, 14, 15]), namespace_client=on_main, table_id=T, mode="append")
    other = events.post(f"/v1/table/{TP}/version/create", body, headers={HEADER: "main-1"})
    assert problem(other) == (422, 13), other.text
    assert branch_head(events) == 4 and main_state(events) == (3, [1, 2, 3, 4, 13, 14, 15])
