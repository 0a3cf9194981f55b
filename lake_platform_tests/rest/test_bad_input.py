"""Bad input at the REST door: each answers a problem body with the right code and changes nothing."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
import requests

from lake_platform.engine import lance_engine as engine
from lake_platform_tests.rest.clients import rest_namespace, rows
from lake_platform_tests.rest.conftest import RestLake, start_rest_lake

ARROW = "application/vnd.apache.arrow.stream"
PREFIXES = ["prj/", "whs/", "nsp/", "tbl/", "ver/", "log/", "cid/", "lse/", "trs/", "pol/", "usr/", "tok/"]


@pytest.fixture
def small_lake(tmp_path: Path) -> Iterator[RestLake]:
    """A server with the smallest body limit, and one table ``p.w.ns.t`` (version 1)."""
    for lake in start_rest_lake(tmp_path, rest_max_body_bytes=4096):
        import lance

        ns = rest_namespace(lake.url, lake.tokens["writer"])
        lance.write_dataset(rows([1, 2]), namespace_client=ns, table_id=["p", "w", "ns", "t"], mode="create")
        yield lake


def state(lake: RestLake) -> tuple[list[Any], list[Any]]:
    store = lake.catalog.store
    registry = [(i.key, i.value, i.revision) for p in PREFIXES for i in store.scan_prefix(p)]
    root = lake.settings.warehouse_root
    files = sorted((f.path, f.size) for f in engine.list_files(root, None))
    return registry, files


def arrow_bytes(table: pa.Table) -> bytes:
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    return sink.getvalue().to_pybytes()


def expect(resp: requests.Response, status: int, code: int, says: str) -> None:
    assert resp.status_code == status, resp.text
    assert resp.headers["content-type"] == "application/problem+json"
    body = resp.json()
    assert body["code"] == code and body["status"] == status, body
    assert says.lower() in body["detail"].lower(), body["detail"]


CASES: list[tuple[str, dict[str, Any], int, int, str]] = [
    # (path, request kwargs, status, code, what the detail says)
    (
        "/v1/table/p$w$ns$u/declare",
        {"data": b"{not json", "headers": {"content-type": "application/json"}},
        400,
        13,
        "not valid JSON",
    ),
    ("/v1/table/p$w$ns$u/declare", {"data": b"[1, 2]"}, 400, 13, "JSON object"),
    (
        "/v1/table/p$w$ns$u/declare",
        {"data": b"id=1", "headers": {"content-type": "application/x-www-form-urlencoded"}},
        400,
        13,
        "takes application/json",
    ),
    (
        "/v1/table/p$w$ns$u/create",
        {"data": b"\x00garbage, not arrow", "headers": {"content-type": ARROW}},
        400,
        13,
        "not a valid Arrow IPC stream",
    ),
    (
        "/v1/table/p$w$ns$t/insert",
        {"data": b"\xff\xff\xff\xff\x10\x00\x00\x00broken", "headers": {"content-type": ARROW}},
        400,
        13,
        "not a valid Arrow IPC stream",
    ),
    (  # two streams back to back: the second one's rows would be dropped without a word
        "/v1/table/p$w$ns$t/insert",
        {"data": arrow_bytes(rows([3])) + arrow_bytes(rows([4])), "headers": {"content-type": ARROW}},
        400,
        13,
        "after the Arrow IPC stream's end",
    ),
    (
        "/v1/table/p$w$ns$u/create",
        {"data": arrow_bytes(rows([3])) + b"trailing", "headers": {"content-type": ARROW}},
        400,
        13,
        "after the Arrow IPC stream's end",
    ),
    (
        "/v1/table/p$w$ns$u/create",
        {"data": b'{"a": 1}', "headers": {"content-type": "application/json"}},
        400,
        13,
        "takes application/vnd.apache.arrow.stream",
    ),
    (
        "/v1/table/p$w$ns$u/declare",
        {"json": {"id": ["p", "w", "ns$x", "u"]}},
        400,
        13,
        "contains the delimiter",
    ),
    (
        "/v1/table/p$w$ns$u/declare",
        {"json": {"id": ["p", "w", "ns", "other"]}},
        400,
        13,
        "differs from the id",
    ),
    ("/v1/table/p$w$NS$u/declare", {"json": {}}, 400, 13, "invalid id segment"),
    ("/v1/table/p$w$ns$u$/declare", {"json": {}}, 400, 13, "invalid id segment"),
    ("/v1/table/p$w$ns$t/version/describe", {"json": {"version": "one"}}, 400, 13, "positive integer"),
    ("/v1/table/p$w$ns$t/version/create", {"json": {"version": 2}}, 400, 13, "manifest_path"),
    (
        "/v1/table/p$w$ns$t/version/create",
        {"json": {"version": 2, "manifest_path": "etc/passwd"}},
        400,
        13,
        "not a manifest in this table",
    ),
    ("/v1/table/p$w$ns$t/delete", {"json": {}}, 400, 13, "predicate"),
    (
        "/v1/table/p$w$ns$t/insert?mode=merge",
        {"data": b"", "headers": {"content-type": ARROW}},
        400,
        13,
        "mode",
    ),
    ("/v1/table/p$w$ns/describe", {"json": {}}, 400, 13, "at least 4 segments"),
    ("/v1/tabel/p$w$ns$t/describe", {"json": {}}, 406, 0, "unknown operation"),
    ("/v1/table/p$w$ns$t/frobnicate", {"json": {}}, 406, 0, "unknown operation"),
    ("/v1/table/p$w$ns$t/declare", {"json": {}, "_method": "GET"}, 406, 0, "unknown operation"),
    ("/v1/namespace/p$w/table/list?limit=abc", {"_method": "GET"}, 400, 13, "must be an integer"),
    ("/v1/namespace/p$w$ns/table/list?limit=0", {"_method": "GET"}, 400, 13, "positive integer"),
    ("/v1/table/p$w$ns$u/declare", {"data": b"x" * 5000}, 413, 13, "limit"),
]


@pytest.mark.parametrize(("path", "kwargs", "status", "code", "says"), CASES, ids=[c[4] for c in CASES])
def test_bad_input_answers_a_problem_and_changes_nothing(
    small_lake: RestLake, path: str, kwargs: dict[str, Any], status: int, code: int, says: str
) -> None:
    before = state(small_lake)
    kwargs = dict(kwargs)
    method = kwargs.pop("_method", "POST")
    headers = {**small_lake.headers(), **kwargs.pop("headers", {})}
    resp = requests.request(method, small_lake.url + path, headers=headers, timeout=60, **kwargs)
    expect(resp, status, code, says)
    assert state(small_lake) == before


def test_a_chunked_body_over_the_limit_is_refused_while_reading(small_lake: RestLake) -> None:
    before = state(small_lake)
    body = arrow_bytes(rows(list(range(2000))))
    assert len(body) > 4096

    def chunks() -> Iterator[bytes]:  # no Content-Length: the limit is enforced on the stream
        for i in range(0, len(body), 1000):
            yield body[i : i + 1000]

    resp = requests.post(
        small_lake.url + "/v1/table/p$w$ns$t/insert",
        data=chunks(),
        headers={**small_lake.headers(), "content-type": ARROW},
        timeout=60,
    )
    expect(resp, 413, 13, "limit")
    assert state(small_lake) == before


def test_a_valid_arrow_insert_and_create_commit(small_lake: RestLake) -> None:
    """The positive twin of the Arrow cases above: the same routes do write with a good body."""
    body = arrow_bytes(rows([3]))
    resp = requests.post(
        small_lake.url + "/v1/table/p$w$ns$t/insert",
        data=body,
        headers={**small_lake.headers(), "content-type": ARROW},
        timeout=60,
    )
    assert resp.status_code == 200 and resp.json()["version"] == 2, resp.text
    resp = requests.post(
        small_lake.url + "/v1/table/p$w$ns$u/create",
        data=arrow_bytes(rows([5, 6])),
        headers={**small_lake.headers(), "content-type": ARROW},
        timeout=60,
    )
    assert resp.status_code == 200 and resp.json()["version"] == 1, resp.text
    count = small_lake.post("/v1/table/p$w$ns$u/count_rows", {})
    assert (count.status_code, count.text, count.headers["content-type"].split(";")[0]) == (
        200,
        "2",
        "text/plain",
    )
    resp = small_lake.post("/v1/table/p$w$ns$t/delete", {"predicate": "id = 1"})
    assert resp.status_code == 200 and resp.json()["version"] == 3, resp.text
    assert small_lake.post("/v1/table/p$w$ns$t/count_rows", {"version": 2}).text == "3"
    assert small_lake.post("/v1/table/p$w$ns$t/count_rows", {}).text == "2"
    assert [e.actor for e in small_lake.catalog.reads.history("p.w.ns.u")][-1] == "etl"
