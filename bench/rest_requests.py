"""What one REST request costs our server: the three requests of a Lance client's commit
(DescribeTable, ListTableVersions, CreateTableVersion), measured on a `lake serve-rest` process.

- (a) 100-row appends through pylance's ``RestNamespace``: wall time per commit and the server
  process's CPU time per commit (``/proc/<pid>/stat``, user + system), which the load of other
  processes on the host does not inflate the way it does wall times;
- (b) DescribeTable and ListTableVersions exactly as pylance sends them, from one keep-alive
  ``http.client`` connection: median round trip, and server CPU per request;
- (c) the same two requests and an unknown path given to the ASGI app in this process (no socket,
  no uvicorn): what our own code costs per request, the figure least moved by other load.

Run ``PYTHONPATH=<checkout> python bench/rest_requests.py`` to measure another checkout (the
server inherits ``PYTHONPATH``); for paired figures run it per side, back to back. Prints
figures only (~1 min).

    python bench/rest_requests.py [--appends 200] [--requests 2000]
"""

from __future__ import annotations

import argparse
import asyncio
import http.client
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import _common as common
import lance
import pyarrow as pa
from lance.namespace import RestNamespace

T = ["p", "w", "ns", "t"]
DESCRIBE = (
    "/v1/table/p$w$ns$t/describe?delimiter=%24&with_table_uri=false&check_declared=false",
    b'{"id":["p","w","ns","t"],"with_table_uri":false,"check_declared":false}',
)
LIST = ("/v1/table/p$w$ns$t/version/list?delimiter=%24&limit=1&descending=true", b"")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--appends", type=int, default=200)
    ap.add_argument("--requests", type=int, default=2000, help="per read operation")
    args = ap.parse_args()
    print(common.machine_line())
    print(common.load_line())
    with common.scratch_dir("bench-rest-requests-") as tmp:
        home = tmp / "home"
        catalog, token = common.rest_lake(home)
        catalog.close()
        port = common._free_port()
        env = {**os.environ, "LAKE_HOME": str(home), "LAKE_REST_PORT": str(port)}
        server = subprocess.Popen(
            [sys.executable, "-m", "lake_platform.cli", "serve-rest"],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            common.wait_rest(f"http://127.0.0.1:{port}")
            run(args, server.pid, port, token)
        finally:
            server.terminate()
            server.wait(30)
        in_process(args, home, token)
    print(common.load_line())


def run(args: argparse.Namespace, pid: int, port: int, token: str) -> None:
    ns = RestNamespace(uri=f"http://127.0.0.1:{port}", **{"header.Authorization": f"Bearer {token}"})
    rows = pa.table({"id": pa.array(range(100), pa.int64())})
    lance.write_dataset(rows, namespace_client=ns, table_id=T, mode="create")
    for _ in range(10):  # warm up
        lance.write_dataset(rows, namespace_client=ns, table_id=T, mode="append")
    cpu0, t0 = common.cpu_seconds(pid), time.perf_counter()
    for _ in range(args.appends):
        lance.write_dataset(rows, namespace_client=ns, table_id=T, mode="append")
    wall, cpu = time.perf_counter() - t0, common.cpu_seconds(pid) - cpu0
    print(f"\n(a) {args.appends} appends of 100 rows through pylance's RestNamespace")
    print(
        f"  wall per commit {1000 * wall / args.appends:6.2f} ms   server CPU per commit "
        f"{1000 * cpu / args.appends:6.2f} ms"
    )

    print(f"\n(b) {args.requests} requests each, one keep-alive connection, as pylance sends them")
    conn = http.client.HTTPConnection("127.0.0.1", port)
    headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
    for name, (path, body) in (("DescribeTable", DESCRIBE), ("ListTableVersions", LIST)):
        for _ in range(50):
            conn.request("POST", path, body, headers)
            conn.getresponse().read()
        lat = []
        cpu0 = common.cpu_seconds(pid)
        for _ in range(args.requests):
            t = time.perf_counter()
            conn.request("POST", path, body, headers)
            response = conn.getresponse()
            response.read()
            lat.append(time.perf_counter() - t)
        cpu = common.cpu_seconds(pid) - cpu0
        assert response.status == 200, response.status
        print(
            f"  {name:18s} round trip median {1e6 * statistics.median(lat):5.0f} us   server CPU "
            f"{1e6 * cpu / args.requests:5.0f} us per request"
        )


def in_process(args: argparse.Namespace, home: Path, token: str) -> None:
    from lake_platform.rest.app import build_app
    from lake_platform.rest.server import RestService
    from lake_platform.settings import load_settings

    service = RestService(load_settings(home=home))
    app = build_app(service)
    headers = [
        (b"host", b"127.0.0.1"),
        (b"content-type", b"application/json"),
        (b"authorization", f"Bearer {token}".encode()),
    ]

    async def call(path: str, body: bytes) -> int:
        route, _, query = path.partition("?")
        scope = {
            "type": "http",
            "asgi": {"version": "3.0"},
            "http_version": "1.1",
            "method": "POST",
            "scheme": "http",
            "path": route,
            "raw_path": route.encode(),
            "query_string": query.encode(),
            "root_path": "",
            "headers": [*headers, (b"content-length", str(len(body)).encode())],
            "server": ("127.0.0.1", 2333),
            "client": ("127.0.0.1", 40000),
        }
        sent: list[Any] = []

        async def receive() -> Any:
            return {"type": "http.request", "body": body, "more_body": False}

        async def send(message: Any) -> None:
            sent.append(message)

        await app(scope, receive, send)
        return int(sent[0]["status"])

    async def measure() -> None:
        print(f"\n(c) the ASGI app in process (no socket), {args.requests} calls each")
        for name, (path, body) in (
            ("DescribeTable", DESCRIBE),
            ("ListTableVersions", LIST),
            ("unknown operation", ("/v1/table/p$w$ns$t/nosuch", b"{}")),
        ):
            status = await call(path, body)
            lat = []
            for _ in range(args.requests):
                t = time.perf_counter()
                await call(path, body)
                lat.append(time.perf_counter() - t)
            print(f"  {name:18s} median {1e6 * statistics.median(lat):5.0f} us  (status {status})")

    service.start()
    try:
        asyncio.run(measure())
    finally:
        service.close()


if __name__ == "__main__":
    main()
