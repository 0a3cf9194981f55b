"""Cost of observability (metrics, request log, query audit) on the point-query benchmark.

    python bench/metrics.py [--rows 1000000] [--runs 300]

Two Flight SQL endpoints over the same table, each in its own process: "observed" as shipped
(the gRPC interceptor counting every RPC, query rows/bytes and in-flight counters, the audit
trail written to a JSONL file, a metrics HTTP port that this script scrapes once per 50 queries,
JSON request logs at INFO to /dev/null), and "plain", the same server with all of it switched off
in its process (no interceptor, the stream not wrapped, no audit, no metrics port, logging off).
The client runs the point query of bench/flight.py (GetFlightInfo + DoGet, one row) against both,
alternating which goes first; median per query and the ratio (goal: observed within 2 %).

Also, in process: the cost of one ``observe_request`` call and of one request-log line.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pyarrow.flight as fl

sys.path.insert(0, str(Path(__file__).resolve().parent))
# The repository's root too: the test doubles (lake_platform_tests.doubles) stand in for the catalog.
sys.path.insert(1, str(Path(__file__).resolve().parent.parent))

import _common as c

USER, PASSWORD = "bench", "bench-password"
POINT = "SELECT * FROM w.ns.trips WHERE id = 123457"


def build(home: Path, rows: int) -> None:
    from lake_platform.catalog.catalog import Catalog
    from lake_platform.settings import load_settings

    catalog = Catalog(load_settings(home=home))
    catalog.containers.create_project("p")
    catalog.containers.create_warehouse("p.w")
    catalog.containers.create_namespace("p.w.ns")
    catalog.tables.create_table("p.w.ns.trips", c.make_reader(rows, 250_000, seed=0))
    catalog.close()


def serve(home: str, mode: str) -> None:
    import logging

    import lake_platform.flight.server as server_mod
    from lake_platform.auth.tokens import Identity
    from lake_platform.observability.logs import configure_logging
    from lake_platform.settings import load_settings
    from lake_platform.settings.flight import flight_settings
    from lake_platform_tests.doubles import StaticAuthenticator

    # A mode is a set of features: i (interceptor: RPC counters, latency, request log), s (the
    # result stream observed: rows, bytes, in flight), a (audit trail), l (JSON request log),
    # m (metrics port). "observed" is all of them, "plain" none.
    features = {"observed": "isalm", "plain": ""}.get(mode, mode)
    overrides: dict[str, object] = {"home": Path(home)}
    overrides["metrics_port"] = 0 if "m" in features else None
    overrides["audit_log"] = (
        str(Path(home) / "audit" / f"bench-{time.time_ns()}.jsonl") if "a" in features else "off"
    )
    if "l" in features:
        configure_logging("INFO", "json", stream=open("/dev/null", "w"), force=True)  # noqa: SIM115
    else:
        logging.disable(logging.CRITICAL)
    if "s" not in features:
        server_mod.observed = lambda batches, *_a, **_k: batches  # type: ignore[assignment]
        server_mod.failed = lambda *_a, **_k: None  # type: ignore[assignment]
    if "i" not in features:
        import lake_platform.flight.transport as transport_mod

        original = transport_mod.FlightTransport.__init__

        def without_interceptors(self: object, *a: object, **kw: object) -> None:
            kw["interceptors"] = ()
            original(self, *a, **kw)  # type: ignore[arg-type]

        transport_mod.FlightTransport.__init__ = without_interceptors  # type: ignore[method-assign]
    settings = load_settings(**overrides)
    auth = StaticAuthenticator(users={USER: (PASSWORD, Identity(USER, "user", "p", "reader"))})
    server = server_mod.FlightSqlServer(settings, flight_settings(port=0), authenticator=auth).start()
    metrics_port = server.metrics_server.port if server.metrics_server is not None else 0
    print(server.port, metrics_port, flush=True)
    server.wait()


def start(mode: str, home: Path) -> tuple[subprocess.Popen[bytes], int, int]:
    proc = c.spawn([sys.executable, __file__, "--serve", mode, str(home)], stdout=subprocess.PIPE)
    assert proc.stdout is not None
    port, metrics = proc.stdout.readline().split()
    return proc, int(port), int(metrics)


def point_query(
    client: fl.FlightClient, options: fl.FlightCallOptions, descriptor: fl.FlightDescriptor
) -> int:
    info = client.get_flight_info(descriptor, options)
    return client.do_get(info.endpoints[0].ticket, options).read_all().num_rows


def scrape(port: int) -> int:
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    with opener.open(f"http://127.0.0.1:{port}/metrics", timeout=10) as resp:
        return len(resp.read())


def in_process(n: int = 200_000) -> tuple[float, float]:
    import io
    import logging

    from lake_platform.observability import context
    from lake_platform.observability.logs import configure_logging, log_request
    from lake_platform.observability.metrics import observe_request

    t = time.perf_counter()
    for _ in range(n):
        observe_request("bench", "DoGet", "OK", 0.001)
    per_observe = (time.perf_counter() - t) / n
    configure_logging("INFO", "json", stream=io.StringIO(), force=True)
    info = context.RequestInfo("bench", "DoGet", principal="p", project="p")
    m = n // 10
    t = time.perf_counter()
    for _ in range(m):
        log_request(info, "OK", 0.001)
    per_log = (time.perf_counter() - t) / m
    logging.getLogger().handlers.clear()
    return per_observe, per_log


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--runs", type=int, default=300, help="point queries per server (default 300)")
    parser.add_argument(
        "--modes", nargs="*", default=[], help="extra servers with some features only (letters of isalm)"
    )
    parser.add_argument("--serve", nargs=2, metavar=("MODE", "HOME"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        serve(args.serve[1], args.serve[0])
        return
    from lake_platform.flight import proto

    print(c.machine_line())
    per_observe, per_log = in_process()
    print(
        f"in process: observe_request {per_observe * 1e6:.2f} us per call; "
        f"one JSON request-log line {per_log * 1e6:.2f} us"
    )
    with c.scratch_dir("bench-metrics-") as tmp:
        home = tmp / "home"
        build(home, args.rows)
        procs = {mode: start(mode, home) for mode in ("observed", "plain", *args.modes)}
        try:
            clients = {}
            for mode, (_, port, _) in procs.items():
                client = fl.connect(f"grpc://127.0.0.1:{port}")
                clients[mode] = (
                    client,
                    fl.FlightCallOptions(headers=[client.authenticate_basic_token(USER, PASSWORD)]),
                )
            descriptor = fl.FlightDescriptor.for_command(proto.pack(proto.CommandStatementQuery(query=POINT)))
            for client, options in clients.values():
                for _ in range(20):
                    assert point_query(client, options, descriptor) == 1  # warm-up
            modes = list(clients)
            times: dict[str, list[float]] = {m: [] for m in modes}
            scraped = 0
            cpu0 = {m: c.cpu_seconds(procs[m][0].pid) for m in modes}
            for n in range(args.runs):
                for k in range(len(modes)):
                    mode = modes[(n + k) % len(modes)]
                    client, options = clients[mode]
                    t = time.perf_counter()
                    point_query(client, options, descriptor)
                    times[mode].append(time.perf_counter() - t)
                if n % 50 == 0:
                    scraped = scrape(procs["observed"][2])  # as Prometheus would, now and then
            cpu = {m: (c.cpu_seconds(procs[m][0].pid) - cpu0[m]) / args.runs for m in modes}
            med = {m: statistics.median(v) for m, v in times.items()}
            print(f"({c.load_line()})")
            print(f"point query (GetFlightInfo + DoGet, 1 row of {args.rows:,}), median of {args.runs} each:")
            for mode in modes:
                print(
                    f"  {mode:<9}{med[mode] * 1000:8.3f} ms wall   "
                    f"server CPU {cpu[mode] * 1000:7.3f} ms per query"
                )
            cpu_overhead = cpu["observed"] / cpu["plain"] - 1
            print(
                f"  server CPU per query: {cpu_overhead * 100:+.2f} % observed vs plain (the steadier "
                "figure on a shared machine)"
            )
            overhead = med["observed"] / med["plain"] - 1
            pairs = [o / p - 1 for o, p in zip(times["observed"], times["plain"], strict=True)]
            print(
                f"  overhead: {overhead * 100:+.2f} % (ratio of medians); median of paired ratios "
                f"{statistics.median(pairs) * 100:+.2f} %  (goal < 2 %: "
                f"{'meets' if overhead < 0.02 else 'MISSES'}); /metrics page {scraped:,} bytes"
            )
        finally:
            for proc, _, _ in procs.values():
                proc.terminate()
                proc.wait(timeout=30)


if __name__ == "__main__":
    main()
