"""The index operations with ``branch`` (issue 46), through pylance's own RestNamespace and plain
HTTP: CreateTableIndex, CreateTableScalarIndex and DropTableIndex are each one commit on the
branch's own line (its head moved by one, a log entry with ``detail.branch``), main unchanged;
ListTableIndices and DescribeTableIndexStats read the branch; QueryTable on the branch answers
as before its index. Refusals are the spec's errors and change nothing."""

from __future__ import annotations

from typing import Any

import lance_namespace.errors as ns_errors
import pyarrow as pa
import pytest
from lance.query import PhraseQuery
from lance_namespace_urllib3_client.models import (
    CreateTableBranchRequest,
    CreateTableIndexRequest,
    DescribeTableIndexStatsRequest,
    DropTableIndexRequest,
    InsertIntoTableRequest,
    ListTableIndicesRequest,
    QueryTableRequest,
)

from lake_platform.naming import TableName
from lake_platform_tests.rest.clients import rows
from lake_platform_tests.rest.conftest import RestLake
from lake_platform_tests.rest.handlers.events import NAME, TP, T, client, ipc, problem, version


@pytest.fixture
def events(events: RestLake) -> RestLake:
    """Main at version 1 (ids 1-3, tag ``x``); branch ``dev`` made from it, then ids 5-7 (tag
    ``y``) appended to the branch: its head is version 2."""
    ns = client(events)
    ns.create_table_branch(CreateTableBranchRequest(id=T, name="dev"))
    ns.insert_into_table(InsertIntoTableRequest(id=T, branch="dev", mode="append"), ipc(rows([5, 6, 7], "y")))
    return events


def branch_head(lake: RestLake) -> int:
    return lake.catalog.branches.branch(TableName.parse(NAME), "dev")[0].current_version


def logged(lake: RestLake, commit_id: str) -> Any:
    return next(e for e in lake.catalog.reads.log(NAME) if e.commit_id == commit_id)


def query_ids(lake: RestLake, predicate: str, branch: str | None = "dev") -> list[int]:
    answer = client(lake, "reader").query_table(
        QueryTableRequest(id=T, branch=branch, k=0, vector={}, filter=predicate)
    )
    return sorted(pa.ipc.open_file(pa.BufferReader(answer.data)).read_all().column("id").to_pylist())


def test_index_operations_on_a_branch_through_pylance(events: RestLake) -> None:
    ns = client(events)
    before = (query_ids(events, "id = 6"), query_ids(events, "tag = 'y'"), query_ids(events, "id > 2"))
    made = ns.create_table_scalar_index(
        CreateTableIndexRequest(id=T, branch="dev", column="id", index_type="BTREE")
    )
    entry = logged(events, made.transaction_id)
    assert (entry.operation, entry.actor, entry.from_version, entry.to_version) == (
        "index create",
        "etl",
        2,
        3,
    )
    assert entry.detail["branch"] == "dev"
    made = ns.create_table_index(
        CreateTableIndexRequest(id=T, branch="dev", column="tag", index_type="bitmap")
    )
    assert logged(events, made.transaction_id).detail == {
        "index": "tag_idx",
        "column": "tag",
        "kind": "BITMAP",
        "branch": "dev",
    }
    assert (version(events), branch_head(events)) == (1, 4)  # main never moved
    assert events.catalog.indexes.list_indexes(NAME) == []

    reader = client(events, "reader")
    listed = reader.list_table_indices(ListTableIndicesRequest(id=T, branch="dev")).to_dict()["indexes"]
    by_name = {i["index_name"]: i for i in listed}
    assert set(by_name) == {"id_idx", "tag_idx"}
    assert (by_name["id_idx"]["index_type"], by_name["id_idx"]["num_indexed_rows"]) == ("BTree", 6)
    assert reader.list_table_indices(ListTableIndicesRequest(id=T)).to_dict()["indexes"] == []
    assert reader.list_table_indices(ListTableIndicesRequest(id=T, branch="main")).to_dict()["indexes"] == []
    older = reader.list_table_indices(ListTableIndicesRequest(id=T, branch="dev", version=3)).to_dict()
    assert [i["index_name"] for i in older["indexes"]] == ["id_idx"]
    stats = reader.describe_table_index_stats(
        DescribeTableIndexStatsRequest(id=T, branch="dev", index_name="tag_idx")
    )
    assert (stats.index_type, stats.num_indexed_rows, stats.num_unindexed_rows) == ("Bitmap", 6, 0)
    with pytest.raises(ns_errors.TableIndexNotFoundError):  # main has no such index
        reader.describe_table_index_stats(DescribeTableIndexStatsRequest(id=T, index_name="tag_idx"))

    # queries on the branch answer as before its indexes; main's as ever
    after = (query_ids(events, "id = 6"), query_ids(events, "tag = 'y'"), query_ids(events, "id > 2"))
    assert after == before == ([6], [5, 6, 7], [3, 5, 6, 7])
    assert query_ids(events, "id > 2", branch=None) == [3]

    dropped = ns.drop_table_index(DropTableIndexRequest(id=T, branch="dev", index_name="tag_idx"))
    entry = logged(events, dropped.transaction_id)
    assert (entry.operation, entry.to_version, entry.detail["branch"]) == ("index drop", 5, "dev")
    # plain HTTP: the branch as a body member
    listed = events.post(f"/v1/table/{TP}/index/list", {"branch": "dev"}, who="reader").json()["indexes"]
    assert [i["index_name"] for i in listed] == ["id_idx"]
    assert (version(events), branch_head(events)) == (1, 5)
    assert query_ids(events, "tag = 'y'") == [5, 6, 7]


def test_refusals_on_a_branch_are_the_specs_errors_and_change_nothing(events: RestLake) -> None:
    events.catalog.branch_indexes.create_index(NAME, "dev", "id")
    before = (version(events), branch_head(events), len(list(events.catalog.reads.log(NAME))))
    path = f"/v1/table/{TP}"
    for route, body, who, expected in (
        ("create_index", {"branch": "nope", "column": "id", "index_type": "BTREE"}, "writer", (404, 22)),
        ("create_scalar_index", {"branch": "dev", "column": "id", "index_type": "BTREE"}, "writer", (409, 7)),
        ("create_index", {"branch": "dev", "column": "nope", "index_type": "BTREE"}, "writer", (404, 12)),
        ("create_index", {"branch": "dev", "column": "tag", "index_type": "XX"}, "writer", (400, 13)),
        ("create_index", {"branch": "dev", "column": "tag", "index_type": "IVF_PQ"}, "writer", (406, 0)),
        ("create_index", {"branch": "dev", "column": "tag", "index_type": "BTREE"}, "reader", (403, 15)),
        ("create_index", {"branch": 7, "column": "tag", "index_type": "BTREE"}, "writer", (400, 13)),
        (
            "create_index",
            {"branch": "dev", "column": "tag", "index_type": "FTS", "language": "Klingon"},
            "writer",
            (400, 13),
        ),
        (
            "create_index",
            {"branch": "dev", "column": "tag", "index_type": "BITMAP", "stem": True},
            "writer",
            (400, 13),
        ),
        ("index/list", {"branch": "nope"}, "reader", (404, 22)),
        ("index/list", {"branch": "dev", "version": 99}, "reader", (404, 11)),
        ("index/id_idx/stats", {"branch": "nope"}, "reader", (404, 22)),
        ("index/nope/stats", {"branch": "dev"}, "reader", (404, 6)),
        ("index/id_idx/drop", {"branch": "nope"}, "writer", (404, 22)),
        ("index/nope/drop", {"branch": "dev"}, "writer", (404, 6)),
        ("index/id_idx/drop", {"branch": "dev"}, "reader", (403, 15)),
        ("index/list", {"branch": "dev"}, "other", (404, 4)),  # another tenant's table looks missing
    ):
        assert problem(events.post(f"{path}/{route}", body, who=who)) == expected, (route, body)
    assert (version(events), branch_head(events), len(list(events.catalog.reads.log(NAME)))) == before


def test_full_text_options_build_the_branchs_index_asked_for(events: RestLake) -> None:
    asked = CreateTableIndexRequest(id=T, branch="dev", column="tag", index_type="FTS", with_position=True)
    made = client(events).create_table_index(asked)
    assert logged(events, made.transaction_id).detail == {
        "index": "tag_idx",
        "column": "tag",
        "kind": "INVERTED",
        "options": {"with_position": True},
        "branch": "dev",
    }
    head = events.catalog.branches.open_branch(NAME, "dev").dataset
    phrase = head.to_table(full_text_query=PhraseQuery("y", "tag"), columns=["id", "_score"])
    assert sorted(phrase.column("id").to_pylist()) == [5, 6, 7]  # positions were kept
    assert version(events) == 1 and events.catalog.indexes.list_indexes(NAME) == []
