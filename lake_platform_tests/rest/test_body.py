"""The REST server against hostile clients, over raw sockets (a client library would not send
these requests): an unidentified body is never read, a slow body is cut off, deep or
out-of-range JSON is 400, never 500."""

from __future__ import annotations

import json
import socket
import threading
import tracemalloc
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import psutil
import pyarrow as pa
import pytest
import requests

from lake_platform.errors import InvalidInput
from lake_platform.rest.body import parse_json
from lake_platform_tests.rest.clients import rows
from lake_platform_tests.rest.conftest import RestLake, start_rest_lake

BODY_TIMEOUT = 1.0


@pytest.fixture
def lake(tmp_path: Path) -> Iterator[RestLake]:
    yield from start_rest_lake(tmp_path, rest_body_timeout_seconds=BODY_TIMEOUT)


def connect(lake: RestLake, timeout: float = 10.0) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", lake.settings.rest_port), timeout=timeout)
    sock.settimeout(timeout)
    return sock


def head(method: str, path: str, headers: dict[str, str]) -> bytes:
    lines = [f"{method} {path} HTTP/1.1", "Host: 127.0.0.1", *(f"{k}: {v}" for k, v in headers.items())]
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


def read_answer(sock: socket.socket) -> tuple[int, dict[str, str], bytes]:
    """One HTTP answer (status, lower-cased headers, body); raises ``TimeoutError`` when none
    arrives within the socket's timeout."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        if not chunk:
            raise ConnectionError(f"closed before an answer: {data!r}")
        data += chunk
    top, _, rest = data.partition(b"\r\n\r\n")
    status_line, *header_lines = top.decode("latin-1").split("\r\n")
    headers = {k.strip().lower(): v.strip() for k, _, v in (h.partition(":") for h in header_lines)}
    while len(rest) < int(headers.get("content-length", "0")):
        chunk = sock.recv(65536)
        if not chunk:
            break
        rest += chunk
    return int(status_line.split()[1]), headers, rest


def closed_by_server(sock: socket.socket) -> bool:
    try:
        return sock.recv(1) == b""
    except ConnectionResetError:
        return True


def test_an_unidentified_body_is_answered_401_before_a_byte_is_read(lake: RestLake) -> None:
    """16 clients declare 60 MB bodies without a token: each gets 401 on its headers alone (no
    body byte sent) and the connection is closed, so the server's memory stays flat."""
    process = psutil.Process()
    before = process.memory_info().rss
    peak = [before]
    done = threading.Event()

    def watch() -> None:  # the peak while the clients run (a freed buffer leaves RSS again)
        while not done.wait(0.02):
            peak[0] = max(peak[0], process.memory_info().rss)

    chunk = b"\0" * 1_000_000

    def client(_: int) -> tuple[int, bool]:
        with connect(lake, timeout=5.0) as sock:
            sock.sendall(
                head(
                    "POST",
                    "/v1/table/p$w$ns$t/insert",
                    {"Content-Type": "application/vnd.apache.arrow.stream", "Content-Length": "60000000"},
                )
            )
            try:
                status, _, _ = read_answer(sock)  # an answer to the headers alone
                return status, closed_by_server(sock)
            except TimeoutError:  # a server that waits for the body: send it all, as the attack did
                sock.settimeout(120)
                for _ in range(60):
                    sock.sendall(chunk)
                status, _, _ = read_answer(sock)
                return -status, False

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    try:
        with ThreadPoolExecutor(16) as pool:
            answers = list(pool.map(client, range(16)))
    finally:
        done.set()
        watcher.join()

    assert answers == [(401, True)] * 16
    assert peak[0] - before < 100 << 20, f"RSS grew {(peak[0] - before) >> 20} MB"


def test_a_declared_body_over_the_limit_is_413_before_the_token_is_checked(lake: RestLake) -> None:
    with connect(lake) as sock:
        sock.sendall(head("POST", "/v1/table/p$w$ns$t/insert", {"Content-Length": str(10**12)}))
        status, headers, body = read_answer(sock)
        assert (status, json.loads(body)["code"]) == (413, 13)
        assert headers["connection"] == "close" and closed_by_server(sock)


def test_a_slow_body_is_cut_off_by_the_body_timeout(lake: RestLake) -> None:
    with connect(lake, timeout=BODY_TIMEOUT + 10) as sock:
        sock.sendall(
            head(
                "POST",
                "/v1/namespace/p$w$ns/describe",
                {**lake.headers("reader"), "Content-Type": "application/json", "Content-Length": "1000"},
            )
            + b'{"id": '
        )
        # The bounded wait is the server's own timeout firing; past it plus the margin, recv raises.
        status, headers, body = read_answer(sock)
        assert (status, json.loads(body)["code"]) == (408, 13)
        assert "LAKE_REST_BODY_TIMEOUT_SECONDS" in json.loads(body)["detail"]
        assert headers["connection"] == "close" and closed_by_server(sock)


def post_json(lake: RestLake, path: str, raw: bytes) -> tuple[int, dict[str, object]]:
    with connect(lake) as sock:
        sock.sendall(
            head(
                "POST",
                path,
                {
                    **lake.headers("reader"),
                    "Content-Type": "application/json",
                    "Content-Length": str(len(raw)),
                },
            )
            + raw
        )
        status, _, body = read_answer(sock)
        return status, json.loads(body)


@pytest.mark.parametrize("depth", [100, 100_000])
def test_a_deeply_nested_body_is_400(lake: RestLake, depth: int) -> None:
    raw = b'{"id": ["p", "w", "ns"], "x": ' + b"[" * depth + b"]" * depth + b"}"
    status, problem = post_json(lake, "/v1/namespace/p$w$ns/describe", raw)
    assert (status, problem["code"]) == (400, 13), problem
    assert "LAKE_REST_MAX_JSON_DEPTH" in str(problem["detail"])


@pytest.mark.parametrize(
    "raw",
    [
        b'{"version": 18446744073709551616}',
        b'{"version": -9223372036854775809}',
        b'{"version": NaN}',
        b'{"version": Infinity}',
    ],
)
def test_an_out_of_range_number_in_the_body_is_400(lake: RestLake, raw: bytes) -> None:
    status, problem = post_json(lake, "/v1/table/p$w$ns$t/describe", raw)
    assert (status, problem["code"]) == (400, 13), problem


def test_an_out_of_range_integer_query_parameter_is_400(lake: RestLake) -> None:
    with connect(lake) as sock:
        sock.sendall(head("GET", "/v1/namespace/p$w/list?limit=18446744073709551616", lake.headers("reader")))
        status, _, body = read_answer(sock)
    assert (status, json.loads(body)["code"]) == (400, 13), body


@pytest.mark.parametrize("limit", ["1_0", "%201", "%D9%A3", "+1", "0x1"])
def test_an_integer_query_parameter_is_ascii_digits_only(lake: RestLake, limit: str) -> None:
    """Python's int() reads ``1_0`` as 10, `` 1`` as 1 and the Arabic-Indic digit three as 3;
    the spec's integer is decimal digits (and a sign for a negative one)."""
    with connect(lake) as sock:
        sock.sendall(head("GET", f"/v1/namespace/p$w/list?limit={limit}", lake.headers("reader")))
        status, _, body = read_answer(sock)
    assert (status, json.loads(body)["code"]) == (400, 13), body
    assert "must be an integer" in json.loads(body)["detail"]


def test_an_encoded_body_is_refused_not_read_as_another_format(lake: RestLake) -> None:
    """The server decodes no Content-Encoding: a gzip body would be refused as broken JSON or
    Arrow, naming the wrong cause. ``identity`` is no encoding."""
    for encoding, status in (("gzip", 400), ("br", 400), ("identity", 200)):
        with connect(lake) as sock:
            raw = b"{}"
            headers = {
                **lake.headers("reader"),
                "Content-Type": "application/json",
                "Content-Encoding": encoding,
                "Content-Length": str(len(raw)),
            }
            sock.sendall(head("POST", "/v1/namespace/p$w$ns/exists", headers) + raw)
            answered, _, body = read_answer(sock)
        assert answered == status, (encoding, body)
        if status == 400:
            assert "Content-Encoding" in json.loads(body)["detail"]


def test_a_null_body_is_no_body_as_lancedb_sends_it(lake: RestLake) -> None:
    """lancedb 0.40 (and pylance 13) open a table with ``POST …/version/list?limit=1&descending=true``
    and the JSON body ``null`` (captured from the client); the reference server answers it."""
    lake.catalog.tables.create_table("p.w.ns.t", rows([1, 2]).to_reader())
    lake.catalog.tables.append("p.w.ns.t", rows([3]).to_reader())
    status, answer = post_json(lake, "/v1/table/p$w$ns$t/version/list?limit=1&descending=true", b"null")
    assert status == 200, answer
    assert [v["version"] for v in answer["versions"]] == [2]
    for path in (
        "/v1/table/p$w$ns$t/tags/list",
        "/v1/table/p$w$ns$t/describe",
        "/v1/namespace/p$w$ns/exists",
    ):
        for raw in (b"null", b"", b"{}"):
            assert post_status(lake, path, raw) == 200, (path, raw)


def test_a_bodyless_operation_reads_no_content_type(lake: RestLake) -> None:
    """The spec gives ListTableVersions no body: whatever type a client labels its ``null`` with,
    the operation answers (the reference ignores such a body)."""
    lake.catalog.tables.create_table("p.w.ns.t", rows([1]).to_reader())
    with connect(lake) as sock:
        raw = b"null"
        headers = {**lake.headers("reader"), "Content-Type": "text/plain", "Content-Length": str(len(raw))}
        sock.sendall(head("POST", "/v1/table/p$w$ns$t/version/list", headers) + raw)
        status, _, body = read_answer(sock)
    assert status == 200, body
    assert [v["version"] for v in json.loads(body)["versions"]] == [1]


def post_status(lake: RestLake, path: str, raw: bytes) -> int:
    """The status of a POST of ``raw`` (labelled JSON unless empty)."""
    headers = {**lake.headers("reader"), "Content-Length": str(len(raw))}
    if raw:
        headers["Content-Type"] = "application/json"
    with connect(lake) as sock:
        sock.sendall(head("POST", path, headers) + raw)
        status, _, _ = read_answer(sock)
    return status


def test_checking_a_long_json_array_keeps_no_copy_of_it() -> None:
    """A body's depth check pushed an entry per value: a QueryTable with a vector of 32M numbers
    (a 64 MiB body, within LAKE_REST_MAX_BODY_BYTES) took 2.5 GB and 35 s of one request's
    thread before its 406. Only arrays and objects are kept now: the check costs no more than
    the parsed body (a list of 1M small ints: 8 MiB of pointers)."""
    raw = b'{"k": 1, "vector": [' + b"0," * 999_999 + b"0]}"
    tracemalloc.start()
    try:
        body = parse_json(raw, "application/json", 64)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert len(body["vector"]) == 1_000_000
    assert peak < 16 << 20, f"{peak >> 20} MiB for a {len(raw) >> 20} MiB body"
    with pytest.raises(InvalidInput, match="signed 64-bit"):
        parse_json(b'{"v": [[0, 1, [9223372036854775808]]]}', "application/json", 64)


@pytest.fixture
def json_capped(tmp_path: Path) -> Iterator[RestLake]:
    yield from start_rest_lake(tmp_path, rest_max_json_bytes=64 << 10)


def test_a_json_body_is_held_to_its_own_smaller_limit(json_capped: RestLake) -> None:
    """JSON costs several times its size to parse (a Python object per value, seconds of CPU per
    10 MiB): a 64 MiB QueryTable vector was read and parsed whole before its 406. JSON bodies
    stop at LAKE_REST_MAX_JSON_BYTES, declared or streamed; Arrow bodies keep the body limit."""
    raw = b'{"k": 1, "vector": [' + b"0," * 40_000 + b"0]}"
    declared = requests.post(
        json_capped.url + "/v1/table/p$w$ns$t/query",
        data=raw,
        headers={**json_capped.headers("reader"), "content-type": "application/json"},
        timeout=60,
    )
    assert (declared.status_code, declared.json()["code"]) == (413, 13), declared.text
    assert "LAKE_REST_MAX_JSON_BYTES" in declared.json()["detail"]
    streamed = requests.post(
        json_capped.url + "/v1/table/p$w$ns$t/query",
        data=(raw[i : i + 1000] for i in range(0, len(raw), 1000)),
        headers={**json_capped.headers("reader"), "content-type": "application/json"},
        timeout=60,
    )
    assert (streamed.status_code, streamed.json()["code"]) == (413, 13), streamed.text
    sink = pa.BufferOutputStream()
    table = rows(list(range(20_000)))
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    arrow = sink.getvalue().to_pybytes()
    assert len(arrow) > 64 << 10
    created = requests.post(
        json_capped.url + "/v1/table/p$w$ns$big/create",
        data=arrow,
        headers={**json_capped.headers(), "content-type": "application/vnd.apache.arrow.stream"},
        timeout=60,
    )
    assert created.status_code == 200, created.text
