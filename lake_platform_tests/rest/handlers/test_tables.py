"""Truthful table answers over REST, through pylance's own RestNamespace where it can express the
call: DescribeTable resolves ``version`` and ``tag`` (or answers TableVersionNotFound /
TableTagNotFound) and returns the schema when asked; GetTableStats counts what exists;
ListTables on a project or warehouse is an empty list; every tag operation reads the registry."""

from __future__ import annotations

from pathlib import Path

import lance
import lance_namespace.errors as ns_errors
import pyarrow as pa
import pytest
from lance_namespace_urllib3_client.models import (
    DescribeTableRequest,
    GetTableStatsRequest,
    GetTableTagVersionRequest,
    ListTablesRequest,
    ListTableTagsRequest,
)

from lake_platform.naming import TableName
from lake_platform_tests.catalog.registry_calls import RegistryCalls
from lake_platform_tests.rest.clients import rest_namespace, rows
from lake_platform_tests.rest.conftest import RestLake, start_rest_lake
from lake_platform_tests.rest.handlers.events import TP, T, append, problem


@pytest.fixture
def events(events: RestLake) -> RestLake:
    """``p.w.ns.events`` at version 3 (3 fragments of 3, 1 and 2 rows), tag ``before`` on 1."""
    append(events, [4])
    append(events, [5, 6])
    events.catalog.tags.create_tag("p.w.ns.events", "before", 1)
    return events


def describe(lake: RestLake, **fields: object) -> dict[str, object]:
    ns = rest_namespace(lake.url, lake.tokens["reader"])
    return ns.describe_table(DescribeTableRequest(id=T, **fields)).to_dict()


def test_describe_resolves_a_version_or_says_it_does_not_exist(events: RestLake) -> None:
    assert describe(events)["version"] == 3
    assert describe(events, version=2)["version"] == 2
    with pytest.raises(ns_errors.TableVersionNotFoundError, match="999"):
        describe(events, version=999)


def test_describe_resolves_a_tag_through_the_registry(events: RestLake) -> None:
    assert describe(events, tag="before")["version"] == 1
    assert describe(events, tag="before", version=1)["version"] == 1
    with pytest.raises(ns_errors.TableTagNotFoundError, match="nope"):
        describe(events, tag="nope")
    resp = events.post(f"/v1/table/{TP}/describe", {"tag": "before", "version": 2})
    assert (resp.status_code, resp.json()["code"]) == (400, 13), resp.text


def test_describe_returns_the_schema_in_the_specs_shape_when_asked(rest_lake: RestLake) -> None:
    schema = pa.schema(
        [
            pa.field("id", pa.int64(), nullable=False, metadata={"unit": "count"}),
            pa.field("tags", pa.list_(pa.string())),
            pa.field("vec", pa.list_(pa.float32(), 2)),
            pa.field("at", pa.struct([("x", pa.int8())])),
            pa.field("price", pa.decimal128(10, 2)),
        ],
        metadata={"owner": "sales"},
    )
    data = pa.Table.from_pylist([{"id": 1, "tags": ["a"], "vec": [0.5, 1.0], "at": {"x": 1}}], schema=schema)
    ns = rest_namespace(rest_lake.url, rest_lake.tokens["writer"])
    lance.write_dataset(data, namespace_client=ns, table_id=T, mode="create")
    lance.write_dataset(
        data.drop_columns(["price"]).cast(schema.remove(4)), namespace_client=ns, table_id=T, mode="overwrite"
    )
    assert "schema" not in describe(rest_lake)
    detailed = describe(rest_lake, load_detailed_metadata=True)
    item = {"name": "item", "nullable": True}
    assert detailed["schema"] == {
        "fields": [
            {"name": "id", "nullable": False, "type": {"type": "int64"}, "metadata": {"unit": "count"}},
            {
                "name": "tags",
                "nullable": True,
                "type": {"type": "list", "fields": [{**item, "type": {"type": "utf8"}}]},
            },
            {
                "name": "vec",
                "nullable": True,
                "type": {
                    "type": "fixed_size_list",
                    "length": 2,
                    "fields": [{**item, "type": {"type": "float32"}}],
                },
            },
            {
                "name": "at",
                "nullable": True,
                "type": {
                    "type": "struct",
                    "fields": [{"name": "x", "nullable": True, "type": {"type": "int8"}}],
                },
            },
        ],
        "metadata": {"owner": "sales"},
    }
    # The schema of the version asked for (version 1 still had the decimal column).
    older = describe(rest_lake, version=1, load_detailed_metadata=True)["schema"]
    assert older["fields"][-1] == {
        "name": "price",
        "nullable": True,
        "type": {"type": "decimal128", "length": 10002},
    }


def test_stats_count_indexes_and_fragment_lengths(events: RestLake) -> None:
    events.catalog.indexes.create_index("p.w.ns.events", "id", "BTREE")
    ns = rest_namespace(events.url, events.tokens["reader"])
    stats = ns.get_table_stats(GetTableStatsRequest(id=T)).to_dict()
    assert stats["num_rows"] == 6 and stats["num_indices"] == 1
    frags = stats["fragment_stats"]
    assert frags["num_fragments"] == 3 and frags["num_small_fragments"] == 3  # all under the target
    # lengths 1, 2, 3: percentiles by nearest rank below, as the reference server computes them
    assert frags["lengths"] == {"min": 1, "max": 3, "mean": 2, "p25": 1, "p50": 2, "p75": 2, "p99": 2}


def test_stats_of_a_deleted_row_count_live_rows(events: RestLake) -> None:
    events.catalog.tables.delete_rows("p.w.ns.events", "id = 1")
    ns = rest_namespace(events.url, events.tokens["reader"])
    frags = ns.get_table_stats(GetTableStatsRequest(id=T)).to_dict()["fragment_stats"]
    assert frags["lengths"]["min"] == 1 and frags["lengths"]["max"] == 2


@pytest.mark.parametrize("ident", [["p"], ["p", "w"]])
def test_list_tables_of_a_project_or_warehouse_is_empty(events: RestLake, ident: list[str]) -> None:
    ns = rest_namespace(events.url, events.tokens["reader"])
    assert ns.list_tables(ListTablesRequest(id=ident)).tables == []
    # Another project's container looks missing, as everywhere.
    with pytest.raises(ns_errors.NamespaceNotFoundError):
        ns.list_tables(ListTablesRequest(id=["q", *ident[1:]]))


def test_tags_have_one_truth_the_registry(events: RestLake) -> None:
    """A tag written straight into Lance's files (around the catalog) is a tag of no surface;
    asking for it says why."""
    location = events.catalog.ctx.table(TableName.parse("p.w.ns.events"))[0].location
    lance.dataset(location).tags.create("rogue", 2)
    ns = rest_namespace(events.url, events.tokens["reader"])
    listed = ns.list_table_tags(ListTableTagsRequest(id=T)).tags
    assert {name: t.version for name, t in listed.items()} == events.catalog.tags.list_tags("p.w.ns.events")
    assert set(listed) == {"before"}
    with pytest.raises(ns_errors.TableTagNotFoundError, match="only in Lance"):
        ns.get_table_tag_version(GetTableTagVersionRequest(id=T, tag="rogue"))
    with pytest.raises(ns_errors.TableTagNotFoundError):
        describe(events, tag="rogue")
    # Creating it is refused, saying why; replacing it (UpdateTableTag) adopts it at the version
    # asked for, and then it is a tag of every surface.
    created = events.post(f"/v1/table/{TP}/tags/create", {"tag": "rogue", "version": 3})
    assert created.status_code == 409 and "only in Lance" in created.json()["detail"], created.text
    assert events.post(f"/v1/table/{TP}/tags/update", {"tag": "rogue", "version": 3}).status_code == 200
    assert ns.get_table_tag_version(GetTableTagVersionRequest(id=T, tag="rogue")).version == 3
    assert events.catalog.tags.list_tags("p.w.ns.events") == {"before": 1, "rogue": 3}
    assert lance.dataset(location).tags.list()["rogue"]["version"] == 3


def test_list_tables_and_namespaces_page_through_the_registry(events: RestLake) -> None:
    """ListTables and ListNamespaces read one page at a time; following page_token lists every
    table of a namespace and every child namespace exactly once, in name order."""
    from lance_namespace_urllib3_client.models import ListNamespacesRequest

    from lake_platform_tests.registry.catalog_records import write_catalog

    names = write_catalog(events.catalog.store, "p", namespaces=3, per_namespace=250, versions=1)
    ns = rest_namespace(events.url, events.tokens["reader"])
    seen: list[str] = []
    pages, token = 0, None
    while True:
        answer = ns.list_tables(ListTablesRequest(id=["p", "w", "ns00001"], limit=100, page_token=token))
        seen, token, pages = seen + answer.tables, answer.page_token, pages + 1
        if token is None:
            break
    assert seen == [n.rsplit(".", 1)[1] for n in names[250:500]] and pages == 3
    children: list[str] = []
    token = None
    while True:
        listed = ns.list_namespaces(ListNamespacesRequest(id=["p", "w"], limit=2, page_token=token))
        children, token = children + listed.namespaces, listed.page_token
        if token is None:
            break
    assert children == ["ns", "ns00000", "ns00001", "ns00002"]


def test_list_all_tables_includes_declared_ones_when_asked(events: RestLake) -> None:
    """A table declared and not yet written is listed by ListAllTables with include_declared,
    as ListTables lists it; without the flag (or with it false) it is not."""
    assert events.post("/v1/table/p$w$ns$later/declare", {}).status_code == 200
    assert events.get("/v1/table?include_declared=true").json()["tables"] == ["p$w$ns$events", "p$w$ns$later"]
    assert events.get("/v1/namespace/p$w$ns/table/list?include_declared=true").json()["tables"] == [
        "events",
        "later",
    ]
    for query in ("", "?include_declared=false"):
        assert events.get("/v1/table" + query).json()["tables"] == ["p$w$ns$events"], query


def test_a_page_token_that_is_not_a_string_is_refused(events: RestLake) -> None:
    """A page token is a string this server handed out; a number, list or object in a listing's
    body is 400 naming it, not turned into text and compared with names."""
    for op in ("tags/list", "branches/list"):
        for token in (5, ["x"], {"after": "x"}, True):
            resp = events.post(f"/v1/table/{TP}/{op}", {"page_token": token})
            assert problem(resp) == (400, 13), (op, token, resp.text)
            assert "page_token" in resp.json()["detail"]


@pytest.fixture
def branched(events: RestLake) -> RestLake:
    """``events`` with branch ``dev`` made from version 1 (3 rows) and appended 10 rows twice:
    the branch's line is at its version 3, main at its version 3 with 6 rows."""
    events.catalog.branches.create_branch("p.w.ns.events", "dev", from_version=1)
    for start in (100, 200):
        events.catalog.branch_writes.append(
            "p.w.ns.events", "dev", rows(list(range(start, start + 10))).to_reader()
        )
    return events


def test_stats_of_a_branch_count_the_branch(branched: RestLake) -> None:
    stats = branched.post(f"/v1/table/{TP}/stats", {"branch": "dev"}, who="reader")
    assert stats.status_code == 200, stats.text
    assert (stats.json()["num_rows"], stats.json()["fragment_stats"]["num_fragments"]) == (23, 3)
    assert branched.post(f"/v1/table/{TP}/stats", {"branch": "main"}).json()["num_rows"] == 6
    assert problem(branched.post(f"/v1/table/{TP}/stats", {"branch": "nob"})) == (404, 22)


def test_a_tag_on_a_branch_is_refused_not_put_on_mains_version(branched: RestLake) -> None:
    """Tags name main's versions: a tag asked on branch ``dev`` (whose version 2 is not main's
    version 2) is Unsupported, and no tag is made or moved."""
    tags = branched.catalog.tags.list_tags("p.w.ns.events")
    for op, body in [
        ("create", {"tag": "dev_two", "version": 2, "branch": "dev"}),
        ("update", {"tag": "before", "version": 2, "branch": "dev"}),
        ("create", {"tag": "nob_one", "version": 1, "branch": "nob"}),
    ]:
        resp = branched.post(f"/v1/table/{TP}/tags/{op}", body)
        assert problem(resp) == (406, 0), (op, body, resp.text)
        assert "main" in resp.json()["detail"]
    assert branched.catalog.tags.list_tags("p.w.ns.events") == tags
    made = branched.post(f"/v1/table/{TP}/tags/create", {"tag": "two", "version": 2, "branch": "main"})
    assert made.status_code == 200, made.text


def test_a_page_of_all_tables_reads_about_one_page(tmp_path: Path) -> None:
    """ListAllTables read every table of the lake (of every project) to answer one page. A page
    reads one page from the registry, in key order, and a tenant's only its own project's; the
    pages list every table the caller may read exactly once."""
    from lake_platform_tests.registry.catalog_records import write_catalog

    calls: list[RegistryCalls] = []
    for lake in start_rest_lake(tmp_path, store=lambda s: calls.append(RegistryCalls(s)) or calls[0]):
        mine = write_catalog(lake.catalog.store, "p", namespaces=2, per_namespace=30, versions=1)
        write_catalog(lake.catalog.store, "q", namespaces=2, per_namespace=30, versions=1)
        seen: list[str] = []
        token: str | None = None
        while True:
            calls[0].items_scanned = 0
            page = lake.get("/v1/table?limit=7" + (f"&page_token={token}" if token else ""))
            assert page.status_code == 200, page.text
            assert calls[0].items_scanned <= 8
            seen, token = seen + page.json()["tables"], page.json()["page_token"]
            if token is None:
                break
        assert seen == ["$".join(n.split(".")) for n in mine]
