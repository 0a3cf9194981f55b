"""QueryTable: a plain scan through the Flight query engine, answered as one Arrow IPC file
whatever its size; the handle protocol (a spooled result, segments fetched by streaming) when
the client asks for it; time travel by ``version``; a key filter reads the table's scalar index;
the filter is parsed, never spliced, and the row limit holds."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import lance
import pyarrow as pa
import pytest

from lake_platform.naming import TableName
from lake_platform.query.snapshot_head import latest_view
from lake_platform.rest.handlers import scan
from lake_platform_tests.rest.clients import rest_namespace, rows
from lake_platform_tests.rest.conftest import RestLake, start_rest_lake

ARROW_FILE = "application/vnd.apache.arrow.file"


@pytest.fixture
def lake(tmp_path: Path) -> Iterator[RestLake]:
    for lake in start_rest_lake(tmp_path, rest_inline_max_rows=1000, rest_inline_max_bytes=16 << 10):
        ns = rest_namespace(lake.url, lake.tokens["writer"])
        table_id = ["p", "w", "ns", "t"]
        lance.write_dataset(rows(list(range(5000))), namespace_client=ns, table_id=table_id, mode="create")
        lake.service.snapshots.refresh()  # queries read the catalog snapshot, never the registry
        lake.service.snapshots.refresh()  # (the first may join a load begun before the create)
        yield lake


def read_file(data: bytes) -> pa.Table:
    return pa.ipc.open_file(pa.BufferReader(data)).read_all()


def test_a_small_result_answers_inline_as_an_arrow_file(lake: RestLake) -> None:
    resp = lake.post(
        "/v1/table/p$w$ns$t/query",
        {"vector": {}, "k": 10, "filter": "id >= 100", "columns": {"column_names": ["id"]}},
        who="reader",
    )
    assert resp.status_code == 200, resp.text
    assert resp.headers["content-type"] == ARROW_FILE
    table = read_file(resp.content)
    assert table.schema.names == ["id"] and sorted(table.column("id").to_pylist())[0] >= 100
    assert table.num_rows == 10


def test_a_result_past_the_inline_limits_is_still_one_arrow_file(lake: RestLake) -> None:
    resp = lake.post("/v1/table/p$w$ns$t/query", {"vector": {}, "k": 0}, who="reader")
    assert resp.status_code == 200, resp.text
    assert resp.headers["content-type"] == ARROW_FILE
    assert sorted(read_file(resp.content).column("id").to_pylist()) == list(range(5000))
    assert not list(Path(lake.settings.results_root).glob("p/*"))  # nothing spooled


@pytest.mark.parametrize("how", ["header", "parameter"])
def test_the_handle_protocol_when_asked(lake: RestLake, how: str) -> None:
    path, headers = "/v1/table/p$w$ns$t/query", {}
    if how == "header":
        headers = {"X-Lake-Result": "handle"}
    else:
        path += "?result=handle"
    resp = lake.post(path, {"vector": {}, "k": 0}, who="reader", headers=headers)
    assert resp.status_code == 200, resp.text
    answer = resp.json()
    assert answer["rows"] == 5000 and answer["segments"]
    job = answer["result_handle"].split(".")[1]
    spooled = Path(lake.settings.results_root) / "p" / job  # the lake's one results area
    assert len(list(spooled.glob("seg-*.arrow"))) == len(answer["segments"]) > 1  # off the heap
    assert {"job.json", "done.json"} <= {f.name for f in spooled.iterdir()}
    ids: list[int] = []
    for url in answer["segments"]:
        seg = lake.get(url, who="reader")
        assert seg.status_code == 200 and seg.headers["content-type"] == ARROW_FILE
        ids += read_file(seg.content).column("id").to_pylist()
    assert sorted(ids) == list(range(5000))
    # another project's principal cannot fetch it: it looks missing
    other = lake.get(answer["segments"][0], who="other")
    assert (other.status_code, other.json()["code"]) == (404, 1)
    bad = lake.get("/v1/results/..%2F..%2Fetc/0", who="reader")
    assert bad.status_code in (400, 406) and bad.json()["code"] in (0, 13)
    # "²" is str.isdigit(), and int() of it raised: a 500
    digit = lake.get(answer["segments"][0].rsplit("/", 1)[0] + "/\u00b2", who="reader")
    assert (digit.status_code, digit.json()["code"]) == (400, 13), digit.text
    # a small result asked for by handle is still inline
    small = lake.post(path, {"vector": {}, "k": 3}, who="reader", headers=headers)
    assert small.headers["content-type"] == ARROW_FILE and read_file(small.content).num_rows == 3


def test_an_unknown_result_protocol_is_refused(lake: RestLake) -> None:
    resp = lake.post("/v1/table/p$w$ns$t/query?result=segments", {"vector": {}, "k": 1}, who="reader")
    assert (resp.status_code, resp.json()["code"]) == (400, 13)


def test_time_travel_by_version(lake: RestLake) -> None:
    ns = rest_namespace(lake.url, lake.tokens["writer"])
    table_id = ["p", "w", "ns", "t"]
    first = lance.dataset(namespace_client=ns, table_id=table_id).version
    lance.write_dataset(rows([-1, -2]), namespace_client=ns, table_id=table_id, mode="append")
    body = {"vector": {}, "k": 0, "filter": "id < 3", "columns": {"column_names": ["id"]}}

    then = lake.post("/v1/table/p$w$ns$t/query", {**body, "version": first}, who="reader")
    now = lake.post("/v1/table/p$w$ns$t/query", body, who="reader")
    gone = lake.post("/v1/table/p$w$ns$t/query", {**body, "version": first + 50}, who="reader")
    bad = lake.post("/v1/table/p$w$ns$t/query", {**body, "version": "latest"}, who="reader")

    assert then.status_code == 200, then.text
    assert sorted(read_file(then.content).column("id").to_pylist()) == [0, 1, 2]
    assert sorted(read_file(now.content).column("id").to_pylist()) == [-2, -1, 0, 1, 2]
    assert (gone.status_code, gone.json()["code"]) == (404, 11)
    assert (bad.status_code, bad.json()["code"]) == (400, 13)


def test_version_zero_is_the_current_one_and_a_version_past_any_is_not_found(lake: RestLake) -> None:
    """Version 0 reads the current version, as DescribeTable takes it; a version too large for
    any table (past what a time-travel name holds) is 404 naming it, never a complaint about a
    time-travel reference the client did not write. CountTableRows with a predicate alike."""
    body = {"filter": "id < 3", "columns": ["id"]}
    zero = lake.post("/v1/table/p$w$ns$t/query", {**body, "version": 0}, who="reader")
    assert zero.status_code == 200, zero.text
    assert sorted(read_file(zero.content).column("id").to_pylist()) == [0, 1, 2]
    huge = 10**18
    for path, asked in [
        ("/v1/table/p$w$ns$t/query", {**body, "version": huge}),
        ("/v1/table/p$w$ns$t/count_rows", {"predicate": "id < 3", "version": huge}),
        ("/v1/table/p$w$ns$t/explain_plan", {"query": {**body, "version": huge}}),
    ]:
        resp = lake.post(path, asked, who="reader")
        assert (resp.status_code, resp.json()["code"]) == (404, 11), (path, resp.text)
        assert f"version {huge} of p.w.ns.t does not exist" in resp.json()["detail"]


@pytest.fixture
def indexed(tmp_path: Path) -> Iterator[RestLake]:
    """A lake whose table ``k`` (3000 rows) the snapshot cache holds (``cache: hot``), with a
    BTREE index on ``id``."""
    for lake in start_rest_lake(tmp_path / "indexed"):
        lake.catalog.tables.create_table("p.w.ns.k", rows(list(range(3000))).to_reader())
        lake.catalog.policies.set_policy("p.w.ns.k", {"cache": "hot"})
        lake.catalog.indexes.create_index("p.w.ns.k", "id", "btree")
        lake.service.snapshots.refresh()  # the policy is read from the catalog snapshot
        lake.service.snapshots.refresh()  # (the first may join a load begun before the policy)
        yield lake


def test_a_key_filter_reads_the_scalar_index_not_the_cached_batches(indexed: RestLake) -> None:
    """On a table the snapshot cache holds, a key filter (``=``, ``IN``) on an indexed column is
    planned on Lance's index (the engine counts each such planning); any other filter reads the
    cached batches. The rows are the same either way."""
    lake = indexed
    engine = lake.service.query_engine()
    warm = lake.post("/v1/table/p$w$ns$k/query", {"vector": {}, "k": 1}, who="reader")
    assert warm.status_code == 200, warm.text
    assert engine.cache.wait_idle() and engine.cache.stats()["entries"] == 1
    before = engine.index_lookups

    point = lake.post("/v1/table/p$w$ns$k/query", {"vector": {}, "filter": "id = 1234"}, who="reader")
    some = lake.post("/v1/table/p$w$ns$k/query", {"vector": {}, "filter": "id IN (3, 2999, 5000)"})
    other = lake.post("/v1/table/p$w$ns$k/query", {"vector": {}, "filter": "tag = 'y'"}, who="reader")

    assert read_file(point.content).to_pylist() == [{"id": 1234, "tag": "x"}]
    assert sorted(read_file(some.content).column("id").to_pylist()) == [3, 2999]
    assert read_file(other.content).num_rows == 0
    assert engine.index_lookups == before + 2  # the two key filters, not the third

    # An AND of column = literal without k/offset is answered by Lance's scanner directly.
    view = latest_view(lake.service.snapshots, lake.catalog.store, TableName.parse("p.w.ns.k"))
    sql = scan.table_sql("w", "ns", "k")

    def planned(**asked: Any) -> Any:
        shape = {"filter_text": None, "columns": None, "k": None, "offset": None} | asked
        return scan.plan_scan(engine, view, sql, **shape)

    lookup = planned(filter_text="id = 1234", columns=["tag"]).lookup
    assert lookup is not None and lookup.filter == "`id` = 1234" and lookup.columns == ("tag",)
    assert planned(filter_text="id = 1234", k=1).lookup is None  # a limit: DataFusion, on the index
    assert planned(filter_text="tag = 'x'").lookup is None  # no index on tag


def test_query_refusals(lake: RestLake) -> None:
    vector = lake.post("/v1/table/p$w$ns$t/query", {"vector": {"single_vector": [1.0]}, "k": 1})
    assert (vector.status_code, vector.json()["code"]) == (406, 0)
    bad_sql = lake.post("/v1/table/p$w$ns$t/query", {"vector": {}, "k": 1, "filter": "id >>> 3"})
    assert bad_sql.status_code == 400 and bad_sql.json()["code"] == 13
    missing = lake.post("/v1/table/p$w$ns$nope/query", {"vector": {}, "k": 1})
    assert (missing.status_code, missing.json()["code"]) == (404, 4)
    other = lake.post("/v1/table/p$w$ns$t/query", {"vector": {}, "k": 1}, who="other")
    assert (other.status_code, other.json()["code"]) == (404, 4)
    # row ids are not served: asked for, the answer would silently lack the _rowid column
    row_ids = lake.post("/v1/table/p$w$ns$t/query", {"vector": {}, "k": 1, "with_row_id": True})
    assert (row_ids.status_code, row_ids.json()["code"]) == (406, 0), row_ids.text
    assert "with_row_id" in row_ids.json()["detail"]
    without = lake.post("/v1/table/p$w$ns$t/query", {"vector": {}, "k": 1, "with_row_id": False})
    assert without.status_code == 200, without.text


def test_a_filter_that_would_build_a_value_past_the_cap_is_refused(lake: RestLake) -> None:
    """Checked before the filter's plan is optimized: the optimizer folds an ``lpad`` of
    literals by building it (``query.value_bounds``)."""
    for where in (
        "id >= 0 AND lpad('x', 20000000) > tag",
        # grew each row's list to 100M elements: the server process was OOM-killed
        "array_resize(make_array(id), 100000000) IS NOT NULL",
    ):
        refused = lake.post("/v1/table/p$w$ns$t/query", {"vector": {}, "k": 1, "filter": where})
        assert (refused.status_code, refused.json()["code"]) == (400, 13), refused.text
        assert "more than LAKE_FLIGHT_MAX_VALUE_BYTES=67108864" in refused.json()["detail"]


def test_a_repeated_query_is_answered_from_the_result_cache_per_principal(lake: RestLake) -> None:
    """The same scan by the same principal over the same version runs once; the next version is
    a new key (its rows, not the kept ones); another principal never gets the first's entry."""
    body = {"vector": {}, "k": 10, "filter": "id < 5", "columns": {"column_names": ["id"]}}
    results = lake.service.query_engine().results
    first = lake.post("/v1/table/p$w$ns$t/query", body, who="reader")
    assert first.status_code == 200, first.text
    before = results.stats()

    again = lake.post("/v1/table/p$w$ns$t/query", body, who="reader")

    assert again.status_code == 200 and again.content == first.content
    after = results.stats()
    assert (after["hits"], after["stored"]) == (before["hits"] + 1, before["stored"])

    other = lake.post("/v1/table/p$w$ns$t/query", body, who="writer")  # same project, another principal
    assert other.status_code == 200 and read_file(other.content).equals(read_file(first.content))
    assert results.stats()["hits"] == after["hits"]  # ran for the writer, and kept for the writer
    assert results.stats()["stored"] == after["stored"] + 1

    ns = rest_namespace(lake.url, lake.tokens["writer"])
    lance.write_dataset(rows([-1]), namespace_client=ns, table_id=["p", "w", "ns", "t"], mode="append")
    lake.service.snapshots.refresh()
    lake.service.snapshots.refresh()
    newer = lake.post("/v1/table/p$w$ns$t/query", body, who="reader")

    assert newer.status_code == 200
    assert sorted(read_file(newer.content).column("id").to_pylist()) == [-1, 0, 1, 2, 3, 4]
    assert results.stats()["hits"] == after["hits"]  # the new version was not served from the old entry


def test_a_query_that_draws_random_values_is_not_kept(lake: RestLake) -> None:
    body = {"vector": {}, "k": 5, "filter": "random() >= 0", "columns": {"column_names": ["id"]}}
    results = lake.service.query_engine().results
    for _ in range(2):
        assert lake.post("/v1/table/p$w$ns$t/query", body, who="reader").status_code == 200

    assert (results.stats()["hits"], results.stats()["stored"]) == (0, 0)


INJECTION = "1=1) UNION SELECT * FROM w.ns.big --"


def test_a_filter_is_one_expression_and_never_reads_another_table(lake: RestLake) -> None:
    """The filter is parsed, not spliced into SQL: text that would close it and add a UNION of
    another table of the tenant (which also dropped ``k``) is refused, and nothing is read."""
    ns = rest_namespace(lake.url, lake.tokens["writer"])
    big = list(range(10_000, 12_000))
    lance.write_dataset(rows(big), namespace_client=ns, table_id=["p", "w", "ns", "big"], mode="create")
    lake.service.snapshots.refresh()
    lake.service.snapshots.refresh()

    for hostile in (
        INJECTION,
        "id >= 0) OR (1=1",
        "id IN (SELECT id FROM w.ns.big)",
        "EXISTS (SELECT 1 FROM w.ns.big)",
        "id = 1; SELECT * FROM w.ns.big",
        "count(id) > 0",
        "row_number() OVER () > 1",
    ):
        resp = lake.post("/v1/table/p$w$ns$t/query", {"vector": {}, "k": 10, "filter": hostile}, who="reader")
        assert (resp.status_code, resp.json()["code"]) == (400, 13), (hostile, resp.text)
        assert "filter" in resp.json()["detail"], resp.json()["detail"]


def test_the_row_limit_holds_whatever_the_filter(lake: RestLake) -> None:
    """``k`` is applied to the plan, not appended to text a comment in the filter could swallow."""
    for text in ("id >= 0 --", "id >= 0 OR id < 0"):
        resp = lake.post("/v1/table/p$w$ns$t/query", {"vector": {}, "k": 7, "filter": text}, who="reader")
        assert resp.status_code == 200, (text, resp.text)
        assert read_file(resp.content).num_rows == 7

    offset = lake.post(
        "/v1/table/p$w$ns$t/query", {"vector": {}, "k": 0, "offset": 4990, "filter": "id >= 0"}, who="reader"
    )
    assert offset.status_code == 200 and read_file(offset.content).num_rows == 10


def test_a_filter_calling_a_function_is_answered_not_a_500(lake: RestLake) -> None:
    # the key-lookup check read every expression's variant, which DataFusion cannot give for a
    # function call: the request was a 500
    # length(tag) is DataFusion's character_length under an alias: refused as 'Alias' before
    for where, wanted in (
        ("abs(id) = 7", [7]),
        ("id < 3 AND upper(tag) = 'X'", [0, 1, 2]),
        ("id < 2 AND length(tag) = 1", [0, 1]),
    ):
        body = {"vector": {}, "k": 0, "filter": where, "columns": {"column_names": ["id"]}}
        resp = lake.post("/v1/table/p$w$ns$t/query", body, who="reader")
        assert resp.status_code == 200, resp.text
        assert sorted(read_file(resp.content).column("id").to_pylist()) == wanted


@pytest.mark.parametrize("path", ["query", "count_rows"])
def test_a_long_chain_of_operators_is_refused_before_datafusion_parses_it(lake: RestLake, path: str) -> None:
    """DataFusion parses and walks a filter recursively: a chain of ~10,000 ORs (160 kB, within
    LAKE_FLIGHT_MAX_SQL_BYTES) overflowed the thread's stack and the process died (SIGSEGV),
    every tenant's calls with it. Refused by the depth bound Flight SQL applies to its text."""
    chain = "id = 1" + " OR id = 1" * 20_000
    body = {"vector": {}, "k": 1, "filter": chain} if path == "query" else {"predicate": chain}
    refused = lake.post(f"/v1/table/p$w$ns$t/{path}", body, who="reader")
    assert (refused.status_code, refused.json()["code"]) == (400, 13), refused.text
    assert "nests more than" in refused.json()["detail"]
    served = lake.post("/v1/table/p$w$ns$t/query", {"vector": {}, "k": 3, "filter": "id < 3"}, who="reader")
    assert served.status_code == 200 and read_file(served.content).num_rows == 3


def test_a_value_a_function_refuses_in_a_filter_is_400_not_500(lake: RestLake) -> None:
    # substr's overflow is raised inside Lance's filtered read, chr's by DataFusion: both were
    # 500 Internal, logged as server faults
    for where in ("substr(tag, -9223372036854775808, 1) = 'x'", "chr(id - 100) = 'x'"):
        resp = lake.post("/v1/table/p$w$ns$t/query", {"vector": {}, "k": 0, "filter": where}, who="reader")
        assert (resp.status_code, resp.json()["code"]) == (400, 13), (where, resp.text)
