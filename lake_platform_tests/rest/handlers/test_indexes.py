"""Indexes over REST through pylance's own RestNamespace: create (both operations), list,
stats and drop are the catalog's index commits, in the table's history under the caller's name;
each refusal is the spec's error with nothing changed."""

from __future__ import annotations

import lance
import lance_namespace.errors as ns_errors
import pyarrow as pa
import pytest
from lance.query import MatchQuery, PhraseQuery
from lance_namespace_urllib3_client.models import (
    CreateTableIndexRequest,
    DescribeTableIndexStatsRequest,
    DropTableIndexRequest,
    ListTableIndicesRequest,
)

from lake_platform_tests.rest.clients import rows
from lake_platform_tests.rest.conftest import RestLake
from lake_platform_tests.rest.handlers.events import NAME, TP, T, client, problem, version


def test_create_list_stats_and_drop_are_catalog_commits(events: RestLake) -> None:
    ns = client(events)
    made = ns.create_table_scalar_index(CreateTableIndexRequest(id=T, column="id", index_type="BTREE"))
    made2 = ns.create_table_index(CreateTableIndexRequest(id=T, column="tag", index_type="bitmap"))
    log = [e for e in events.catalog.reads.log(NAME) if e.operation.startswith("index")]
    assert {e.commit_id for e in log} == {made.transaction_id, made2.transaction_id}
    assert {e.actor for e in log} == {"etl"}
    listed = client(events, "reader").list_table_indices(ListTableIndicesRequest(id=T)).to_dict()
    by_name = {i["index_name"]: i for i in listed["indexes"]}
    assert set(by_name) == {"id_idx", "tag_idx"}
    assert by_name["id_idx"]["columns"] == ["id"] and by_name["id_idx"]["index_type"] == "BTree"
    assert by_name["tag_idx"]["index_type"] == "Bitmap" and by_name["id_idx"]["num_indexed_rows"] == 3
    assert by_name["id_idx"]["index_uuid"] and by_name["id_idx"]["size_bytes"] > 0
    # the rows appended since the build are reported as not indexed yet
    lance.write_dataset(rows([4]), namespace_client=ns, table_id=T, mode="append")
    stats = client(events, "reader").describe_table_index_stats(
        DescribeTableIndexStatsRequest(id=T, index_name="id_idx")
    )
    assert (stats.index_type, stats.num_indexed_rows, stats.num_unindexed_rows, stats.num_indices) == (
        "BTree",
        3,
        1,
        1,
    )
    dropped = ns.drop_table_index(DropTableIndexRequest(id=T, index_name="tag_idx"))
    assert dropped.transaction_id in {e.commit_id for e in events.catalog.reads.log(NAME)}
    assert [i.name for i in events.catalog.indexes.list_indexes(NAME)] == ["id_idx"]
    # ListTableIndices at an older version shows that version's indexes; paging by name
    at_3 = ns.list_table_indices(ListTableIndicesRequest(id=T, version=3)).to_dict()["indexes"]
    assert [i["index_name"] for i in at_3] == ["id_idx", "tag_idx"]
    first = events.post(f"/v1/table/{TP}/index/list", {"version": 3, "limit": 1}).json()
    assert [i["index_name"] for i in first["indexes"]] == ["id_idx"] and first["page_token"] == "id_idx"


def test_refusals_are_the_specs_errors_and_change_nothing(events: RestLake) -> None:
    events.catalog.indexes.create_index(NAME, "id", "BTREE")
    before = version(events)
    path = f"/v1/table/{TP}"
    cases = [
        ("create_index", {"column": "id", "index_type": "BTREE"}, "writer", (409, 7)),  # exists
        ("create_index", {"column": "nope", "index_type": "BTREE"}, "writer", (404, 12)),
        ("create_index", {"column": "id", "index_type": "XX"}, "writer", (400, 13)),
        ("create_index", {"column": "id", "index_type": "IVF_PQ"}, "writer", (406, 0)),
        ("create_index", {"column": "tag", "index_type": "BTREE", "name": "mine"}, "writer", (400, 13)),
        ("create_index", {"index_type": "BTREE"}, "writer", (400, 13)),
        ("create_scalar_index", {"column": "tag", "index_type": "BTREE"}, "reader", (403, 15)),
        ("index/nope/stats", {}, "reader", (404, 6)),
        ("index/nope/drop", None, "writer", (404, 6)),
        ("index/id_idx/drop", None, "reader", (403, 15)),
        ("index/list", {"version": 99}, "reader", (404, 11)),
    ]
    for route, body, who, expected in cases:
        assert problem(events.post(f"{path}/{route}", body, who=who)) == expected, route
    other = events.post(f"{path}/index/list", {}, who="other")
    assert problem(other) == (404, 4)  # another project's table looks missing
    assert version(events) == before
    assert [i.name for i in events.catalog.indexes.list_indexes(NAME)] == ["id_idx"]


def test_pylance_reports_a_missing_index_as_its_error(events: RestLake) -> None:
    with pytest.raises(ns_errors.TableIndexNotFoundError):
        client(events).drop_table_index(DropTableIndexRequest(id=T, index_name="nope"))


DOCS = ["p", "w", "ns", "docs"]
TEXT = ["the quick Brown fox", "brown quick the fox", "a Brown bear"]


def _docs(lake: RestLake) -> None:
    """``p.w.ns.docs``: ids 1-3, the same sentences in ``text`` and ``body``."""
    table = pa.table({"id": pa.array([1, 2, 3], pa.int64()), "text": TEXT, "body": TEXT})
    lance.write_dataset(table, namespace_client=client(lake), table_id=DOCS, mode="create")


def _found(ds: lance.LanceDataset, query: object) -> list[int]:
    return sorted(ds.to_table(full_text_query=query, columns=["id", "_score"]).column("id").to_pylist())


def test_full_text_options_build_the_index_asked_for_and_are_logged(events: RestLake) -> None:
    _docs(events)
    ns = client(events)
    ns.create_table_index(CreateTableIndexRequest(id=DOCS, column="body", index_type="FTS"))
    asked = CreateTableIndexRequest(
        id=DOCS, column="text", index_type="FTS", with_position=True, lower_case=False, language="english"
    )
    made = ns.create_table_scalar_index(asked)
    ds = events.catalog.reads.open_table("p.w.ns.docs").dataset
    # with positions, a phrase query is answered (the default index has none to answer it with)
    assert _found(ds, PhraseQuery("quick Brown", "text")) == [1]
    with pytest.raises(ValueError, match="position"):
        _found(ds, PhraseQuery("quick brown", "body"))
    # without lower-casing, the search is case-sensitive (the default index folds case)
    assert _found(ds, MatchQuery("Brown", "text")) == [1, 3]
    assert _found(ds, MatchQuery("brown", "text")) == [2]
    assert _found(ds, MatchQuery("brown", "body")) == [1, 2, 3]
    entry = next(e for e in events.catalog.reads.log("p.w.ns.docs") if e.commit_id == made.transaction_id)
    assert entry.detail["options"] == {"with_position": True, "lower_case": False, "language": "English"}


@pytest.mark.parametrize(
    ("body", "words"),
    [
        (
            {"column": "text", "index_type": "FTS", "language": "Klingon"},
            ["language", "'Klingon'", "English"],
        ),
        ({"column": "text", "index_type": "INVERTED", "max_token_length": -1}, ["max_token_length", "-1"]),
        (
            {"column": "text", "index_type": "FTS", "base_tokenizer": "bogus"},
            ["base_tokenizer", "whitespace"],
        ),
        ({"column": "text", "index_type": "FTS", "with_position": "yes"}, ["with_position", "true or false"]),
        ({"column": "id", "index_type": "BTREE", "language": "English"}, ["language", "inverted", "btree"]),
        ({"column": "text", "index_type": "NGRAM", "stem": False}, ["stem", "inverted", "ngram"]),
        ({"column": "id", "index_type": "BTREE", "num_partitions": 4}, ["num_partitions", "vector"]),
    ],
)
def test_index_options_lance_would_not_take_are_refused_before_anything_is_built(
    events: RestLake, body: dict[str, object], words: list[str]
) -> None:
    _docs(events)
    for route in ("create_index", "create_scalar_index"):
        resp = events.post("/v1/table/p$w$ns$docs/" + route, body)
        assert problem(resp) == (400, 13), resp.text
        assert all(w in resp.json()["error"] for w in words), resp.json()["error"]
    assert events.catalog.indexes.list_indexes("p.w.ns.docs") == []
    assert [e.operation for e in events.catalog.reads.log("p.w.ns.docs")] == ["declare", "create"]
