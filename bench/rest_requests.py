"""What one REST request costs our server: the three requests of a Lance client's commit
(DescribeTable, ListTableVersions, CreateTableVersion), measured on a `lake serve-rest` process.

- (a) 100-row appends through pylance's ``RestNamespace``: wall time per commit and the server
  process's CPU time per commit (``/proc/<pid>/stat``, user + system), which the load of other
  processes on the host does not inflate the way it does wall times;
- (b) DescribeTable and ListTableVersions exactly as pylance sends them, from one keep-alive
  ``http.client`` connection: median round trip, and server CPU per request;
- (c) the same two requests, an unknown path and (d)'s kept QueryTable given to the ASGI app in
  this process (no socket, no uvicorn), with the access log on as the server writes it (INFO,
  text, to ``/dev/null``): what our own code costs per request, the figure least moved by other
  load (median wall time and mean CPU time per call).
- (d) QueryTable over the same connection: a small scan repeated by one principal (planned once
  and answered from the result cache) against the same scan with ``AND random() >= 0`` in its
  filter (never kept: planned and run every time): median round trip and server CPU per request
  (printed after (b), on its connection).

Run ``PYTHONPATH=<checkout> python bench/rest_requests.py`` to measure another checkout (the
server inherits ``PYTHONPATH``). ``--against <checkout>`` runs instead two servers at once, this
checkout's (``after``) and that one's (``base``), and alternates batches between them (the order
flipped every round) so that other load weighs on both sides alike: server CPU per request and
per commit for each, and their ratio (the figure to quote for a change smaller than the noise
between two separate runs), and each side's median round trip per request or commit (what a
client waits). Prints figures only (~1 min; ``--against`` ~2 min).

    python bench/rest_requests.py [--appends 200] [--requests 2000] [--queries 300]
    python bench/rest_requests.py --against /work/main [--rounds 10]
"""

from __future__ import annotations

import argparse
import asyncio
import http.client
import os
import statistics
import subprocess
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
QUERY = "/v1/table/p$w$ns$t/query?delimiter=%24"
KEPT = (QUERY, b'{"vector":{},"k":10,"filter":"id < 5","columns":{"column_names":["id"]}}')
RUN = (QUERY, b'{"vector":{},"k":10,"filter":"id < 5 AND random() >= 0","columns":{"column_names":["id"]}}')


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--appends", type=int, default=200)
    ap.add_argument("--requests", type=int, default=2000, help="per read operation")
    ap.add_argument("--queries", type=int, default=300, help="(d): QueryTable requests per variant")
    ap.add_argument("--against", type=Path, help="a base checkout to pair with this one, interleaved")
    ap.add_argument("--rounds", type=int, default=10, help="--against: batches per side and operation")
    args = ap.parse_args()
    print(common.machine_line())
    print(common.load_line())
    if args.against is not None:
        paired(args)
        print(common.load_line())
        return
    with common.scratch_dir("bench-rest-requests-") as tmp:
        home = tmp / "home"
        server, port, token = serve(home)
        try:
            common.wait_rest(f"http://127.0.0.1:{port}")
            run(args, server.pid, port, token)
        finally:
            server.terminate()
            server.wait(30)
        in_process(args, home, token)
    print(common.load_line())


def serve(home: Path, pythonpath: str | None = None) -> tuple[subprocess.Popen[bytes], int, str]:
    """A ``lake serve-rest`` process over a fresh lake at ``home`` (its own checkout's code when
    ``pythonpath`` is given): the process, its port and a writer token."""
    catalog, token = common.rest_lake(home)
    catalog.close()
    port = common.free_port()
    return common.serve_rest(home, port, pythonpath), port, token


def paired(args: argparse.Namespace) -> None:
    """``--against``: both servers at once, batches alternated (see the module docstring)."""
    checkout = str(Path(__file__).resolve().parent.parent)
    rows = pa.table({"id": pa.array(range(100), pa.int64())})
    with common.scratch_dir("bench-rest-requests-") as tmp:
        sides: dict[str, Any] = {}
        try:
            for side, path in (("base", str(args.against.resolve())), ("after", checkout)):
                sides[side] = serve(tmp / side, path)
            clients: dict[str, Any] = {}
            for side, (_, port, token) in sides.items():
                common.wait_rest(f"http://127.0.0.1:{port}")
                ns = RestNamespace(
                    uri=f"http://127.0.0.1:{port}", **{"header.Authorization": f"Bearer {token}"}
                )
                lance.write_dataset(rows, namespace_client=ns, table_id=T, mode="create")
                for _ in range(10):  # warm up
                    lance.write_dataset(rows, namespace_client=ns, table_id=T, mode="append")
                headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
                clients[side] = (ns, http.client.HTTPConnection("127.0.0.1", port), headers)
            batch = max(1, args.requests // 2)
            commits = max(1, args.appends // 5)
            print(
                f"\n(paired) base {args.against} vs after {checkout}: {args.rounds} rounds of {batch} "
                f"requests / {commits} appends per side, alternated; server CPU per call"
            )
            for name, request in (("DescribeTable", DESCRIBE), ("ListTableVersions", LIST), ("commit", None)):
                cpu = {side: 0.0 for side in sides}
                waits: dict[str, list[float]] = {side: [] for side in sides}
                for round_ in range(args.rounds + 1):  # round 0 warms both up, uncounted
                    for side in ("base", "after") if round_ % 2 else ("after", "base"):
                        ns, conn, headers = clients[side]
                        before = common.cpu_seconds(sides[side][0].pid)
                        lat = []
                        for _ in range(commits if request is None else batch):
                            t = time.perf_counter()
                            if request is None:
                                lance.write_dataset(rows, namespace_client=ns, table_id=T, mode="append")
                            else:
                                status = _post(conn, request[0], request[1], headers)
                                assert status == 200, status
                            lat.append(time.perf_counter() - t)
                        if round_:
                            cpu[side] += common.cpu_seconds(sides[side][0].pid) - before
                            waits[side] += lat
                calls = args.rounds * (commits if request is None else batch)
                scale, unit = (1e3, "ms") if request is None else (1e6, "us")
                base, after = (scale * cpu[side] / calls for side in ("base", "after"))
                print(
                    f"  {name:18s} base {base:7.1f} {unit}   after {after:7.1f} {unit}   "
                    f"after/base {cpu['after'] / cpu['base']:.3f}"
                )
                base, after = (scale * statistics.median(waits[side]) for side in ("base", "after"))
                print(
                    f"  {'':18s} round trip median: base {base:7.1f} {unit}   after {after:7.1f} {unit}   "
                    f"after/base {after / base:.3f}"
                )
        finally:
            for server, _, _ in sides.values():
                server.terminate()
                server.wait(30)


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
    variants = [("DescribeTable", DESCRIBE, args.requests), ("ListTableVersions", LIST, args.requests)]
    variants += [("QueryTable, kept", KEPT, args.queries), ("QueryTable, run", RUN, args.queries)]
    for name, (path, body), count in variants:
        if name == "QueryTable, kept":
            print(f"\n(d) QueryTable, {count} requests each: the same small scan, kept vs run each time")
            # The table is queryable once the server's catalog snapshot has refreshed (5 s).
            deadline = time.monotonic() + 30
            while _post(conn, path, body, headers) != 200:
                assert time.monotonic() < deadline, "the table never became queryable"
        for _ in range(50):
            _post(conn, path, body, headers)
        lat = []
        statuses = set()
        cpu0 = common.cpu_seconds(pid)
        for _ in range(count):
            t = time.perf_counter()
            statuses.add(_post(conn, path, body, headers))
            lat.append(time.perf_counter() - t)
        cpu = common.cpu_seconds(pid) - cpu0
        assert statuses == {200}, statuses
        print(
            f"  {name:18s} round trip median {1e6 * statistics.median(lat):5.0f} us   server CPU "
            f"{1e6 * cpu / count:5.0f} us per request"
        )


def _post(conn: http.client.HTTPConnection, path: str, body: bytes, headers: dict[str, str]) -> int:
    conn.request("POST", path, body, headers)
    response = conn.getresponse()
    response.read()
    return response.status


def in_process(args: argparse.Namespace, home: Path, token: str) -> None:
    from lake_platform.observability.logs import configure_logging
    from lake_platform.rest.app import build_app
    from lake_platform.rest.server import RestService
    from lake_platform.settings import load_settings

    # The access log as `lake serve-rest` writes it by default (INFO, text), to /dev/null.
    devnull = open(os.devnull, "w")
    configure_logging("INFO", "text", stream=devnull, force=True)
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
            ("QueryTable, kept", KEPT),
        ):
            status = await call(path, body)
            lat = []
            cpu = time.process_time()
            for _ in range(args.requests):
                t = time.perf_counter()
                await call(path, body)
                lat.append(time.perf_counter() - t)
            cpu = time.process_time() - cpu
            print(
                f"  {name:18s} median {1e6 * statistics.median(lat):5.0f} us   mean CPU "
                f"{1e6 * cpu / args.requests:5.0f} us  (status {status})"
            )

    service.start()
    try:
        asyncio.run(measure())
    finally:
        service.close()
        devnull.close()


if __name__ == "__main__":
    main()
