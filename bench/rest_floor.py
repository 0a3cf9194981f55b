"""Where a REST request's server CPU goes beyond our app's own cost: uvicorn's floor, and our
app run once per socket round trip rather than in a tight loop.

One uvicorn process (httptools, uvloop, as `lake serve-rest`) serves a bare ASGI app that answers
``{}``; per request it first calls our REST app (`build_app`) in process on a fixed DescribeTable
scope 0, 1 or 2 times (``--calls``), then answers. One keep-alive ``http.client`` connection sends
the requests; the figure is the server process's CPU per request (``/proc``, user + system).
Logging is as uvicorn's command line leaves it (no handler: our access line is skipped), so the
figures are our app without its access line.

- 0 calls: uvicorn's own floor per request;
- 1 call: the floor plus our app as the server really runs it, once per round trip;
- 2 calls: the second call runs right after the first, warm: what it adds is our app's cost
  without the cold start each round trip gives it (compare ``bench/rest_requests.py`` (c)).

Prints figures only (~30 s).

    python bench/rest_floor.py [--requests 3000]
"""

from __future__ import annotations

import argparse
import http.client
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import _common as common
import pyarrow as pa
from rest_requests import DESCRIBE

APP = """
import os
from lake_platform.rest.app import build_app
from lake_platform.rest.server import RestService
from lake_platform.settings import load_settings

service = RestService(load_settings())
lake = build_app(service)
service.start()
CALLS = int(os.environ["BENCH_CALLS"])
PATH, _, QUERY = os.environ["BENCH_PATH"].partition("?")
BODY = os.environ["BENCH_BODY"].encode()
HEADERS = [
    (b"host", b"127.0.0.1"),
    (b"content-type", b"application/json"),
    (b"authorization", ("Bearer " + os.environ["BENCH_TOKEN"]).encode()),
    (b"content-length", str(len(BODY)).encode()),
]


async def app(scope, receive, send):
    if scope["type"] != "http":
        return
    await receive()
    status = 200
    for _ in range(CALLS):
        inner = {
            "type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "POST",
            "scheme": "http", "path": PATH, "raw_path": PATH.encode(), "query_string": QUERY.encode(),
            "root_path": "", "headers": HEADERS, "server": ("127.0.0.1", 2333),
            "client": ("127.0.0.1", 40000),
        }
        sent = []

        async def inner_receive():
            return {"type": "http.request", "body": BODY, "more_body": False}

        async def inner_send(message):
            sent.append(message)

        await lake(inner, inner_receive, inner_send)
        status = sent[0]["status"]
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"), (b"content-length", b"2")]})
    await send({"type": "http.response.body", "body": b"{}"})
"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--requests", type=int, default=3000)
    args = ap.parse_args()
    print(common.machine_line())
    print(common.load_line())
    with common.scratch_dir("bench-rest-floor-") as tmp:
        home = tmp / "home"
        catalog, token = common.rest_lake(home)
        rows = pa.record_batch([pa.array(range(100), pa.int64())], names=["id"])
        catalog.tables.create_table("p.w.ns.t", pa.RecordBatchReader.from_batches(rows.schema, [rows]))
        catalog.close()
        (tmp / "floorapp.py").write_text(APP)
        print(f"\nserver CPU per request, {args.requests} requests over one keep-alive connection")
        for calls in (0, 1, 2):
            cpu, status = measure(tmp, home, token, calls, args.requests)
            answer = f"   (our app's answer: {status})" if calls else ""
            print(f"  our app called {calls}x per request: {cpu:6.0f} us{answer}")
    print(common.load_line())


def measure(tmp: Path, home: Path, token: str, calls: int, requests: int) -> tuple[float, int]:
    port = common.free_port()
    env = {
        **os.environ,
        "LAKE_HOME": str(home),
        "BENCH_CALLS": str(calls),
        "BENCH_TOKEN": token,
        "BENCH_PATH": DESCRIBE[0],
        "BENCH_BODY": DESCRIBE[1].decode(),
    }
    server = common.spawn(
        [sys.executable, "-m", "uvicorn", "--app-dir", str(tmp), "floorapp:app", "--port", str(port)]
        + ["--log-level", "warning", "--no-access-log", "--http", "httptools", "--loop", "uvloop"],
        env=env,
        stdout=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if time.monotonic() > deadline or server.poll() is not None:
                    raise RuntimeError("the floor server did not start") from None
                time.sleep(0.05)
        conn = http.client.HTTPConnection("127.0.0.1", port)
        for _ in range(300):  # warm up
            conn.request("POST", "/x", b"{}", {"Content-Type": "application/json"})
            conn.getresponse().read()
        before = common.cpu_seconds(server.pid)
        for _ in range(requests):
            conn.request("POST", "/x", b"{}", {"Content-Type": "application/json"})
            response = conn.getresponse()
            response.read()
        cpu = common.cpu_seconds(server.pid) - before
        return 1e6 * cpu / requests, response.status
    finally:
        server.terminate()
        server.wait(30)


if __name__ == "__main__":
    main()
