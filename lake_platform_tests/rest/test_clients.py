"""The stock clients, unmodified, against our server: pylance's Rust RestNamespace (as
``namespace_client=``) and the generated Python client of lance-namespace."""

from __future__ import annotations

import multiprocessing as mp
import os

import lance
import lance_namespace.errors as ns_errors
import pyarrow as pa
import pyarrow.compute as pc
import pytest
from lance_namespace_urllib3_client import NamespaceApi, TableApi, TagApi
from lance_namespace_urllib3_client.exceptions import ApiException
from lance_namespace_urllib3_client.models import (
    CreateTableTagRequest,
    DeleteTableTagRequest,
    DescribeNamespaceRequest,
    DescribeTableRequest,
    DescribeTableVersionRequest,
    DropTableRequest,
    GetTableTagVersionRequest,
    ListTablesRequest,
    TableExistsRequest,
)

from lake_platform.engine.manifests import final_manifest_name
from lake_platform_tests.rest.clients import api_client, append_many, rest_namespace, rows
from lake_platform_tests.rest.conftest import RestLake
from lake_platform_tests.rest.test_arrow_file import numbers

T = ["p", "w", "ns", "events"]


def ids_of(ds: lance.LanceDataset) -> list[int]:
    return sorted(ds.to_table(columns=["id"]).column("id").to_pylist())


def test_pylance_lifecycle_through_rest(rest_lake: RestLake) -> None:
    ns = rest_namespace(rest_lake.url, rest_lake.tokens["writer"])
    assert lance.write_dataset(rows([1, 2]), namespace_client=ns, table_id=T, mode="create").version == 1
    assert lance.write_dataset(rows([3]), namespace_client=ns, table_id=T, mode="append").version == 2
    assert lance.write_dataset(rows([7]), namespace_client=ns, table_id=T, mode="overwrite").version == 3
    # The registry is the authority and agrees with the engine.
    snap = rest_lake.catalog.reads.open_table("p.w.ns.events")
    assert snap.version == 3 and sorted(snap.to_reader().read_all().column("id").to_pylist()) == [7]
    assert ids_of(lance.dataset(namespace_client=ns, table_id=T)) == [7]
    assert ids_of(lance.dataset(namespace_client=ns, table_id=T, version=2)) == [1, 2, 3]
    assert ids_of(lance.dataset(namespace_client=ns, table_id=T, version=1)) == [1, 2]
    # Every write is a registry commit under the caller's name (lake table history / lake log).
    history = rest_lake.catalog.reads.history("p.w.ns.events")
    # ... logged as what the client did (Lance's operation) with the rows and files it added.
    assert [(e.operation, e.actor, e.to_version, e.rows_added, e.files_added) for e in history] == [
        ("declare", "etl", None, 0, 0),
        ("create", "etl", 1, 2, 1),
        ("append", "etl", 2, 1, 1),
        ("overwrite", "etl", 3, 1, 1),
    ]
    snap_files = [f for frag in snap.dataset.get_fragments() for f in frag.metadata.files]
    assert history[-1].bytes_added == sum(f.file_size_bytes for f in snap_files)
    assert {e.actor for e in rest_lake.catalog.reads.log("p.w.ns.events")} == {"etl"}

    # list, describe
    assert ns.list_tables(ListTablesRequest(id=["p", "w", "ns"])).tables == ["events"]
    described = ns.describe_table(DescribeTableRequest(id=T))
    assert described.managed_versioning is True and described.version == 3
    assert described.location == snap.record.location

    # drop goes to the trash; the table is gone for clients; undrop brings it back
    with pytest.raises(ns_errors.PermissionDeniedError):  # dropping needs the admin role
        ns.drop_table(DropTableRequest(id=T))
    admin = rest_namespace(rest_lake.url, rest_lake.tokens["admin"])
    admin.drop_table(DropTableRequest(id=T))
    with pytest.raises(Exception, match="(?i)not.?found|does not exist"):
        lance.dataset(namespace_client=ns, table_id=T)
    trash = rest_lake.get("/v1/trash/p$w$ns$events", who="reader").json()["dropped"]
    assert [d["id"] for d in trash] == [T] and trash[0]["expires_at_ms"] > trash[0]["dropped_at_ms"]
    resp = rest_lake.post("/v1/table/p$w$ns$events/undrop", {}, who="admin")
    assert resp.status_code == 200, resp.text
    assert ids_of(lance.dataset(namespace_client=ns, table_id=T)) == [7]
    assert ids_of(lance.dataset(namespace_client=ns, table_id=T, version=1)) == [1, 2]


@pytest.mark.slow
def test_two_client_processes_append_at_once_and_no_commit_is_lost(rest_lake: RestLake) -> None:
    ns = rest_namespace(rest_lake.url, rest_lake.tokens["writer"])
    lance.write_dataset(rows([0]), namespace_client=ns, table_id=T, mode="create")
    ctx = mp.get_context("spawn")
    start = ctx.Event()
    count = 6
    workers = [
        ctx.Process(target=append_many, args=(rest_lake.url, rest_lake.tokens["writer"], T, w, count, start))
        for w in (1, 2)
    ]
    for p in workers:
        p.start()
    start.set()
    for p in workers:
        p.join(600)
        assert p.exitcode == 0
    expected = [0] + [w * 1000 + i for w in (1, 2) for i in range(count)]
    snap = rest_lake.catalog.reads.open_table("p.w.ns.events")
    assert snap.version == 1 + 2 * count  # every append is its own registered version, no gap
    assert sorted(snap.to_reader().read_all().column("id").to_pylist()) == sorted(expected)
    assert ids_of(lance.dataset(namespace_client=ns, table_id=T)) == sorted(expected)
    versions = [e.to_version for e in rest_lake.catalog.reads.history("p.w.ns.events") if e.to_version]
    assert versions == list(range(1, 2 + 2 * count))


def test_generated_client_tables_versions_and_tags(rest_lake: RestLake) -> None:
    ns = rest_namespace(rest_lake.url, rest_lake.tokens["writer"])
    lance.write_dataset(rows([1]), namespace_client=ns, table_id=T, mode="create")
    lance.write_dataset(rows([2]), namespace_client=ns, table_id=T, mode="append")
    for api_key in (False, True):  # Authorization: Bearer, then x-api-key
        client = api_client(rest_lake.url, rest_lake.tokens["writer"], api_key=api_key)
        namespaces = NamespaceApi(client).list_namespaces("p$w")
        assert namespaces.namespaces == ["ns"]
        tables = TableApi(client)
        assert tables.list_tables("p$w$ns").tables == ["events"]
        d = tables.describe_table("p$w$ns$events", DescribeTableRequest())
        assert (d.version, d.managed_versioning, d.table, d.namespace) == (
            2,
            True,
            "events",
            ["p", "w", "ns"],
        )
        tables.table_exists("p$w$ns$events", TableExistsRequest())
        with pytest.raises(ApiException) as missing:
            tables.table_exists("p$w$ns$nope", TableExistsRequest())
        assert missing.value.status == 404
        listed = tables.list_table_versions("p$w$ns$events")
        assert [v.version for v in listed.versions] == [1, 2]
        one = tables.describe_table_version("p$w$ns$events", DescribeTableVersionRequest(version=1))
        assert one.version.version == 1
    client = api_client(rest_lake.url, rest_lake.tokens["writer"])
    tags = TagApi(client)
    tags.create_table_tag("p$w$ns$events", CreateTableTagRequest(tag="first", version=1))
    assert tags.get_table_tag_version("p$w$ns$events", GetTableTagVersionRequest(tag="first")).version == 1
    assert set(tags.list_table_tags("p$w$ns$events").tags) == {"first"}
    assert ids_of(lance.dataset(namespace_client=ns, table_id=T, version="first")) == [1]
    with pytest.raises(ApiException) as dup:
        tags.create_table_tag("p$w$ns$events", CreateTableTagRequest(tag="first", version=2))
    assert dup.value.status == 409 and '"code": 9' in dup.value.body
    tags.delete_table_tag("p$w$ns$events", DeleteTableTagRequest(tag="first"))
    assert tags.list_table_tags("p$w$ns$events").tags == {}
    assert [e.operation for e in rest_lake.catalog.reads.history("p.w.ns.events")][-2:] == ["tag", "untag"]
    # listing tables with a page size pages with the last name as the token
    for name in ("a1", "b2"):
        lance.write_dataset(rows([1]), namespace_client=ns, table_id=["p", "w", "ns", name], mode="create")
    first = TableApi(client).list_tables("p$w$ns", limit=2)
    assert first.tables == ["a1", "b2"] and first.page_token == "b2"
    rest = TableApi(client).list_tables("p$w$ns", limit=2, page_token=first.page_token)
    assert rest.tables == ["events"] and rest.page_token is None


def test_update_schema_metadata_merges_and_null_deletes(rest_lake: RestLake) -> None:
    ns = rest_namespace(rest_lake.url, rest_lake.tokens["writer"])
    lance.write_dataset(rows([1]), namespace_client=ns, table_id=T, mode="create")
    path = "/v1/table/p$w$ns$events/schema_metadata/update"
    first = rest_lake.post(path, {"metadata": {"owner": "etl", "pii": "no"}})
    assert first.status_code == 200, first.text
    assert first.json()["metadata"] == {"owner": "etl", "pii": "no"}
    second = rest_lake.post(path, {"metadata": {"pii": None, "tier": "gold"}})
    assert second.json()["metadata"] == {"owner": "etl", "tier": "gold"}
    ds = lance.dataset(namespace_client=ns, table_id=T)
    assert ds.version == 3 and ds.schema.metadata == {b"owner": b"etl", b"tier": b"gold"}
    snap = rest_lake.catalog.reads.open_table("p.w.ns.events")
    assert snap.version == 3 and snap.schema.metadata == {b"owner": b"etl", b"tier": b"gold"}
    history = rest_lake.catalog.reads.history("p.w.ns.events")
    assert [(e.operation, e.actor, e.to_version) for e in history][-2:] == [
        ("schema-metadata", "etl", 2),
        ("schema-metadata", "etl", 3),
    ]
    bad = rest_lake.post(path, {"metadata": {"x": 1}})
    assert (bad.status_code, bad.json()["code"]) == (400, 13)
    reader = rest_lake.post(path, {"metadata": {"x": "y"}}, who="reader")
    assert (reader.status_code, reader.json()["code"]) == (403, 15)
    assert rest_lake.catalog.reads.open_table("p.w.ns.events").version == 3


def test_pylance_updates_schema_metadata_in_the_specs_bare_map(rest_lake: RestLake) -> None:
    """pylance's RestNamespace sends and reads the spec's bare map: a wrapped-only server
    answered it 400 "metadata must be a map" (found by ``lake conformance``)."""
    from lance_namespace import UpdateTableSchemaMetadataRequest

    ns = rest_namespace(rest_lake.url, rest_lake.tokens["writer"])
    lance.write_dataset(rows([1]), namespace_client=ns, table_id=T, mode="create")
    answer = ns.update_table_schema_metadata(
        UpdateTableSchemaMetadataRequest(id=T, metadata={"owner": "etl"})
    )
    assert answer.metadata == {"owner": "etl"}
    bare = rest_lake.post("/v1/table/p$w$ns$events/schema_metadata/update", {"tier": "gold", "owner": None})
    assert (bare.status_code, bare.json()) == (200, {"tier": "gold"})
    assert lance.dataset(namespace_client=ns, table_id=T).schema.metadata == {b"tier": b"gold"}


def test_context_headers_travel_both_ways(rest_lake: RestLake) -> None:
    """The client's ``header.*`` properties become request headers (that is how the token
    travels), and our response headers come back as ``header.*`` entries of the answer's context."""
    ns = rest_namespace(rest_lake.url, rest_lake.tokens["reader"])
    answer = ns.describe_namespace(DescribeNamespaceRequest(id=["p", "w", "ns"]))
    assert answer.context is not None and answer.context["header.x-lake-principal"] == "viewer"


def test_a_commit_through_rest_leaves_no_staging_manifest_behind(rest_lake: RestLake) -> None:
    """The client writes a staging manifest; once the version is published at its canonical
    path, the staging copy is removed, as after a CLI append (it used to stay for good: two
    files per version in ``_versions/``)."""
    ns = rest_namespace(rest_lake.url, rest_lake.tokens["writer"])
    lance.write_dataset(rows([1]), namespace_client=ns, table_id=T, mode="create")
    for n in range(3):
        lance.write_dataset(rows([n + 2]), namespace_client=ns, table_id=T, mode="append")
    location = rest_lake.catalog.reads.open_table("p.w.ns.events").record.location
    names = sorted(n for n in os.listdir(os.path.join(location, "_versions")) if ".manifest" in n)
    assert names == [final_manifest_name(v) for v in (4, 3, 2, 1)]
    assert ids_of(lance.dataset(namespace_client=ns, table_id=T)) == [1, 2, 3, 4]
    assert ids_of(lance.dataset(namespace_client=ns, table_id=T, version=2)) == [1, 2]


def test_pylance_query_table_answers_a_filtered_scan_of_over_a_million_rows_exactly(
    rest_lake: RestLake,
) -> None:
    """The big answer through pylance's own ``query_table`` with a filter and a projection (the
    whole table's is ``test_arrow_file``'s): every row, no handle, exact sums."""
    total = 1_500_000
    rest_lake.catalog.tables.create_table("p.w.ns.big", numbers(total))  # id 0.., v = id / 2
    ns = rest_namespace(rest_lake.url, rest_lake.tokens["reader"])

    answer = ns.query_table(
        {
            "id": ["p", "w", "ns", "big"],
            "vector": {},
            "k": 0,
            "filter": "id >= 250000",
            "columns": {"column_names": ["v", "id"]},
        }
    )

    table = pa.ipc.open_file(pa.BufferReader(answer.data)).read_all()
    wanted = total - 250_000
    id_sum = (250_000 + total - 1) * wanted // 2
    assert (table.column_names, table.num_rows) == (["v", "id"], wanted)
    assert pc.sum(table.column("id")).as_py() == id_sum
    assert pc.sum(table.column("v")).as_py() == id_sum / 2  # exact: halves below 2**52
