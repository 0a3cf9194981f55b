"""QueryTable's answer as one Arrow IPC file streamed as it is written: pylance's own
``RestNamespace.query_table`` reads a million-row answer exactly (no handle); the body is chunked
and ends with the file's footer; a query stopped midway cuts it; a client that goes away stops the
query; a spawned server's peak memory grows by much less than the answer it streams."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import psutil
import pyarrow as pa
import pyarrow.compute as pc
import pytest
import requests

from lake_platform.catalog.catalog import Catalog
from lake_platform.observability.audit import audit_target, read_records
from lake_platform.rest.app import build_app
from lake_platform.rest.arrow_file import BUFFERED_BYTES
from lake_platform.rest.server import RestService
from lake_platform.settings.flight import flight_settings
from lake_platform.up.processes import bound_to_parent
from lake_platform_tests.flight.conftest import wait_until
from lake_platform_tests.flight.test_value_cap import peak_rss
from lake_platform_tests.rest.clients import rest_namespace
from lake_platform_tests.rest.conftest import RestLake, ServerThread, rest_settings, start_rest_lake
from lake_platform_tests.servers import free_port

ROWS = 1_000_000
QUERY = "/v1/table/p$w$ns$big/query"


def numbers(rows: int, width: int = 0) -> pa.RecordBatchReader:
    """``id`` 0..rows-1 and ``v`` = id / 2 (and with ``width``, a string ``s`` that wide), in
    batches of 2**20 rows."""
    fields = [("id", pa.int64()), ("v", pa.float64())] + ([("s", pa.string())] if width else [])

    def batches() -> Iterator[pa.RecordBatch]:
        for start in range(0, rows, 1 << 20):
            ids = pa.array(range(start, min(rows, start + (1 << 20))), pa.int64())
            columns = {"id": ids, "v": pc.divide(pc.cast(ids, pa.float64()), 2.0)}
            if width:
                columns["s"] = pc.utf8_lpad(pc.cast(ids, pa.string()), width=width, padding="x")
            yield pa.record_batch(columns)

    return pa.RecordBatchReader.from_batches(pa.schema(fields), batches())


@pytest.fixture(scope="module")
def big(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RestLake]:
    for lake in start_rest_lake(tmp_path_factory.mktemp("big")):
        lake.catalog.tables.create_table("p.w.ns.big", numbers(ROWS))
        yield lake


def test_pylance_reads_a_million_rows_exactly(big: RestLake) -> None:
    ns = rest_namespace(big.url, big.tokens["reader"])

    answer = ns.query_table({"id": ["p", "w", "ns", "big"], "vector": {}, "k": 0})

    table = pa.ipc.open_file(pa.BufferReader(answer.data)).read_all()
    assert table.num_rows == ROWS
    assert pc.sum(table.column("v")).as_py() == ROWS * (ROWS - 1) / 4  # exact: halves below 2**52
    assert pc.sum(table.column("id")).as_py() == ROWS * (ROWS - 1) // 2


def test_a_large_answer_is_chunked_and_ends_with_the_footer(big: RestLake) -> None:
    with requests.post(
        big.url + QUERY, json={"vector": {}, "k": 0, "columns": ["id"]}, headers=big.headers(), stream=True
    ) as resp:
        assert resp.status_code == 200
        assert resp.headers["transfer-encoding"] == "chunked" and "content-length" not in resp.headers
        body = b"".join(resp.iter_content(1 << 20))
    assert body[:6] == body[-6:] == b"ARROW1"
    assert len(body) > BUFFERED_BYTES
    assert pa.ipc.open_file(pa.BufferReader(body)).read_all().column("id").to_pylist() == list(range(ROWS))


def test_a_client_that_goes_away_stops_the_query(big: RestLake) -> None:
    path = Path(audit_target(big.settings))
    before = len(list(read_records(path))) if path.exists() else 0
    with requests.post(
        big.url + QUERY, json={"vector": {}, "k": 0, "filter": "id >= 7"}, headers=big.headers(), stream=True
    ) as resp:
        assert resp.status_code == 200
        next(resp.iter_content(1 << 16))  # the first bytes came; then the client hangs up

    def ended() -> list[dict]:
        return [r for r in list(read_records(path))[before:] if r["sql"].endswith("id >= Int64(7)")]

    assert wait_until(lambda: ended(), timeout=60)
    (record,) = ended()
    assert record["status"] == "CANCELLED" and record["rows"] < ROWS, record


def test_a_query_stopped_after_its_first_bytes_cuts_the_body(tmp_path: Path) -> None:
    """Past LAKE_FLIGHT_MAX_RESULT_BYTES once streaming has begun, the answer cannot become a
    problem body any more: the transfer is cut, so the client never sees a shorter valid file."""
    settings = rest_settings(tmp_path / "home")
    catalog = Catalog(settings)
    catalog.containers.create_project("p")
    catalog.containers.create_warehouse("p.w")
    catalog.containers.create_namespace("p.w.ns")
    token = catalog.access.create_token("viewer", project="p", role="reader")[1]
    catalog.tables.create_table("p.w.ns.big", numbers(ROWS))  # 16 MB
    limit = BUFFERED_BYTES + (2 << 20)
    service = RestService(settings, catalog=catalog, flight=flight_settings(settings, max_result_bytes=limit))
    server = ServerThread(settings, build_app(service))
    server.start()
    try:
        url = f"http://127.0.0.1:{settings.rest_port}{QUERY}"
        headers = {"Authorization": f"Bearer {token}"}
        with requests.post(
            url, json={"vector": {}, "k": 0}, headers=headers, stream=True, timeout=60
        ) as resp:
            assert resp.status_code == 200
            with pytest.raises(requests.exceptions.ChunkedEncodingError):
                b"".join(resp.iter_content(1 << 20))
        within = requests.post(url, json={"vector": {}, "k": 1000}, headers=headers, timeout=60)
        assert within.status_code == 200 and pa.ipc.open_file(within.content).read_all().num_rows == 1000
    finally:
        server.stop()
        catalog.close()


# -- memory, measured from outside ---------------------------------------------------------------

MEMORY_ROWS = 4_000_000  # 4 fragments; with a 32-character string, an answer of about 200 MB


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[psutil.Process, str, str]]:
    """``lake serve-rest`` as its own process over a lake with the table ``p.w.ns.big``; the
    snapshot cache off, so that only the answer's own memory is measured."""
    home = tmp_path_factory.mktemp("memory") / "home"
    catalog = Catalog(rest_settings(home))
    catalog.containers.create_project("p")
    catalog.containers.create_warehouse("p.w")
    catalog.containers.create_namespace("p.w.ns")
    token = catalog.access.create_token("viewer", project="p", role="reader")[1]
    catalog.tables.create_table("p.w.ns.big", numbers(MEMORY_ROWS, width=32))
    catalog.close()
    port = free_port()
    env = {**os.environ, "LAKE_HOME": str(home), "LAKE_REST_PORT": str(port), "LAKE_FLIGHT_CACHE_BYTES": "0"}
    proc = subprocess.Popen(
        bound_to_parent([sys.executable, "-m", "lake_platform.cli", "serve-rest"]),
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        assert wait_until(
            lambda: requests.get(url + "/v1/projects", timeout=5).status_code == 401, timeout=120
        )
        yield psutil.Process(proc.pid), url, token
    finally:
        proc.kill()
        proc.wait()


def test_the_server_streams_a_large_answer_in_bounded_memory(server: tuple[psutil.Process, str, str]) -> None:
    process, url, token = server
    headers = {"Authorization": f"Bearer {token}"}
    small = requests.post(url + QUERY, json={"vector": {}, "k": 10}, headers=headers, timeout=120)
    assert small.status_code == 200, small.text
    base = peak_rss(process)  # the server up, its engine built, one query planned and answered

    received = 0
    tail = b""
    with requests.post(
        url + QUERY, json={"vector": {}, "k": 0}, headers=headers, stream=True, timeout=300
    ) as r:
        assert r.status_code == 200
        for chunk in r.iter_content(1 << 20):
            received += len(chunk)
            tail = (tail + chunk)[-6:]

    grown = peak_rss(process) - base
    assert tail == b"ARROW1" and received > 180_000_000
    # Holding the answer would take at least its size; streaming it takes the scan's read-ahead.
    assert grown < 0.75 * received, f"peak RSS grew {grown >> 20} MiB for a {received >> 20} MiB answer"
