"""QueryTable: a plain scan through the Flight query engine; inline below the threshold, a
spooled result with a handle above it (segments fetched by streaming, each an Arrow IPC file)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import lance
import pyarrow as pa
import pytest

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


def test_a_large_result_is_spooled_and_fetched_by_handle(lake: RestLake) -> None:
    resp = lake.post("/v1/table/p$w$ns$t/query", {"vector": {}, "k": 0}, who="reader")
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


def test_query_refusals(lake: RestLake) -> None:
    vector = lake.post("/v1/table/p$w$ns$t/query", {"vector": {"single_vector": [1.0]}, "k": 1})
    assert (vector.status_code, vector.json()["code"]) == (406, 0)
    bad_sql = lake.post("/v1/table/p$w$ns$t/query", {"vector": {}, "k": 1, "filter": "id >>> 3"})
    assert bad_sql.status_code == 400 and bad_sql.json()["code"] == 13
    missing = lake.post("/v1/table/p$w$ns$nope/query", {"vector": {}, "k": 1})
    assert (missing.status_code, missing.json()["code"]) == (404, 4)
    other = lake.post("/v1/table/p$w$ns$t/query", {"vector": {}, "k": 1}, who="other")
    assert (other.status_code, other.json()["code"]) == (404, 4)


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
