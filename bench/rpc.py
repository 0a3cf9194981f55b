"""Where a point query's milliseconds go over the wire: per RPC, against bare servers and old code.

    python bench/rpc.py [--rows 1000000] [--runs 300] [--before /work/main] [--home DIR]

Builds a Lance table through the catalog (``_common``'s rows) with a BTREE index on ``id`` and
starts, each in its own process on loopback:

- ``ours``: our Flight SQL endpoint (this checkout's code);
- ``before``: the same endpoint from another checkout (``--before``, e.g. the main branch), for a
  paired before/after on the same table and the same load;
- ``twin``: a second endpoint identical to ``ours`` (A/A: what two identical servers differ by);
- ``arrow``: a bare ``pyarrow.flight`` server (C++ gRPC; the GIL only for the handler) and
  ``grpcio``: a bare grpcio server, both answering ``ListActions`` with the same messages as ours:
  the floor of one trivial RPC on this machine.

Then, interleaved in rounds (each round visits the servers in a new random order, so they share
the same load), it measures from this process:

- ``adbc``: ``cursor.execute`` + fetch of ``SELECT * ... WHERE id = <random>`` through ADBC (the
  end-to-end figure of issue 14; four RPCs);
- the same four RPCs made one by one with a raw pyarrow client (CreatePreparedStatement,
  GetFlightInfo of the prepared statement, DoGet, ClosePreparedStatement), each timed;
- ``ListActions``: a trivial RPC (no SQL), the fixed cost of one call;
- the server's CPU time per ADBC query (``/proc/<pid>/stat``, user + system, over all rounds).

Medians in ms. The machine may be shared: the load average is printed, and only figures taken
in the same run (interleaved) should be compared.
"""

from __future__ import annotations

import argparse
import atexit
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import _common as c  # bench/ is first on sys.path when a script runs

ROOT = Path(__file__).resolve().parent.parent
USER, PASSWORD = "bench", "bench-password"
TABLE = "p.w.ns.trips"
POINT = "SELECT * FROM w.ns.trips WHERE id = {}"
STEPS = ("create", "info", "get", "close")


# == servers (each in its own process) =========================================================


def serve_bare(kind: str) -> None:
    """A bare server answering ListActions exactly as ours does (same messages)."""
    from lake_platform.flight import proto
    from lake_platform.flight.actions import ACTIONS

    actions = [(kind_, action.description) for kind_, action in ACTIONS.items()]
    if kind == "arrow":
        import pyarrow.flight as fl

        class Bare(fl.FlightServerBase):
            def list_actions(self, context: Any) -> list[tuple[str, str]]:
                return actions

        server = Bare("grpc://127.0.0.1:0")
        print(server.port, flush=True)
        server.serve()
        return
    from concurrent import futures

    import grpc

    replies = [proto.ActionType(type=k, description=d).SerializeToString() for k, d in actions]

    def list_actions(request: bytes, context: Any) -> Any:
        return iter(replies)

    def handshake(requests: Any, context: Any) -> Any:
        return iter(())

    handler = grpc.method_handlers_generic_handler(
        "arrow.flight.protocol.FlightService",
        {
            "ListActions": grpc.unary_stream_rpc_method_handler(list_actions),
            "Handshake": grpc.stream_stream_rpc_method_handler(handshake),
        },
    )
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=8))
    server.add_generic_rpc_handlers((handler,))
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    print(port, flush=True)
    server.wait_for_termination()


def start(args: list[str]) -> tuple[subprocess.Popen[bytes], int]:
    proc = c.spawn([sys.executable, *args], stdout=subprocess.PIPE)
    assert proc.stdout is not None
    return proc, int(proc.stdout.readline())


def endpoint(root: Path, home: Path, *options: str) -> tuple[subprocess.Popen[bytes], int]:
    """The endpoint of the checkout at ``root`` (its bench/flight.py puts ``root`` first on
    sys.path); ``options``: ``name=value`` Flight settings."""
    return start([str(root / "bench" / "flight.py"), "--serve-ours", str(home), *options])


# == clients ===================================================================================


class Target:
    """One server and the clients this process keeps to it."""

    def __init__(self, name: str, proc: subprocess.Popen[bytes], port: int, sql: bool) -> None:
        import pyarrow.flight as fl

        self.name, self.proc, self.port, self.sql = name, proc, port, sql
        self.raw = fl.connect(f"grpc://127.0.0.1:{port}")
        login = sql  # the bare servers take no credentials
        headers = [self.raw.authenticate_basic_token(USER, PASSWORD)] if login else []
        self.options = fl.FlightCallOptions(headers=headers)
        self.times: dict[str, list[float]] = {k: [] for k in ("adbc", *STEPS, "steps", "list")}
        self.cpu = self.list_cpu = self.steps_cpu = 0.0
        self.adbc_calls = self.list_calls = 0
        if sql:
            import adbc_driver_flightsql.dbapi as fsql

            self.conn = fsql.connect(
                f"grpc://127.0.0.1:{port}",
                db_kwargs={"username": USER, "password": PASSWORD} if login else {},
                autocommit=True,
            )

    def adbc(self, i: int) -> None:
        t = time.perf_counter()
        with self.conn.cursor() as cur:
            cur.execute(POINT.format(i))
            rows = sum(b.num_rows for b in cur.fetch_record_batch())
        self.times["adbc"].append(time.perf_counter() - t)
        assert rows == 1, rows

    def steps(self, i: int) -> None:
        import pyarrow.flight as fl

        from lake_platform.flight import proto

        marks = [time.perf_counter()]
        request = proto.pack(proto.ActionCreatePreparedStatementRequest(query=POINT.format(i)))
        [reply] = list(self.raw.do_action(fl.Action("CreatePreparedStatement", request), self.options))
        _, payload = proto.unpack_any(reply.body.to_pybytes())
        handle = proto.parse(proto.ActionCreatePreparedStatementResult, payload).prepared_statement_handle
        marks.append(time.perf_counter())
        command = proto.pack(proto.CommandPreparedStatementQuery(prepared_statement_handle=handle))
        info = self.raw.get_flight_info(fl.FlightDescriptor.for_command(command), self.options)
        marks.append(time.perf_counter())
        rows = self.raw.do_get(info.endpoints[0].ticket, self.options).read_all().num_rows
        marks.append(time.perf_counter())
        close = proto.pack(proto.ActionClosePreparedStatementRequest(prepared_statement_handle=handle))
        list(self.raw.do_action(fl.Action("ClosePreparedStatement", close), self.options))
        marks.append(time.perf_counter())
        for step, a, b in zip(STEPS, marks[:-1], marks[1:], strict=True):
            self.times[step].append(b - a)
        self.times["steps"].append(marks[-1] - marks[0])
        assert rows == 1, rows

    def list_actions(self) -> None:
        t = time.perf_counter()
        list(self.raw.list_actions(self.options))
        self.times["list"].append(time.perf_counter() - t)

    def median_ms(self, key: str) -> float:
        values = self.times[key]
        return statistics.median(values) * 1000 if values else float("nan")


def measure(targets: list[Target], rows: int, runs: int, per_round: int) -> None:
    rng = random.Random(14)
    sql = [t for t in targets if t.sql]
    for t in targets:  # warm-up: connections, plans, caches
        for _ in range(10):
            t.list_actions()
            if t.sql:
                t.adbc(rng.randrange(rows))
                t.steps(rng.randrange(rows))
        for values in t.times.values():
            values.clear()
    for _ in range(max(1, runs // per_round)):
        order = list(sql)
        rng.shuffle(order)
        for t in order:
            ids = [rng.randrange(rows) for _ in range(per_round)]
            cpu = c.cpu_seconds(t.proc.pid)
            for i in ids:
                t.adbc(i)
            t.cpu += c.cpu_seconds(t.proc.pid) - cpu
            t.adbc_calls += len(ids)
            cpu = c.cpu_seconds(t.proc.pid)
            for _ in ids:  # other ids: a plan kept from the ADBC query must not serve these
                t.steps(rng.randrange(rows))
            t.steps_cpu += c.cpu_seconds(t.proc.pid) - cpu
        order = list(targets)
        rng.shuffle(order)
        for t in order:
            cpu = c.cpu_seconds(t.proc.pid)
            for _ in range(per_round):
                t.list_actions()
            t.list_cpu += c.cpu_seconds(t.proc.pid) - cpu
            t.list_calls += per_round


def build(home: Path, rows: int) -> None:
    from lake_platform.catalog.catalog import Catalog
    from lake_platform.settings import load_settings

    catalog = Catalog(load_settings(home=home))
    catalog.containers.create_project("p")
    catalog.containers.create_warehouse("p.w")
    catalog.containers.create_namespace("p.w.ns")
    catalog.tables.create_table(TABLE, c.make_reader(rows, 500_000, seed=0, tally=c.Tally()))
    catalog.indexes.create_index(TABLE, "id", "btree")
    catalog.close()


def report(targets: list[Target]) -> None:
    keys: list[tuple[str, str]] = [
        ("adbc", "ADBC execute + fetch"),
        ("steps", "4 RPCs, raw client"),
        ("create", "  CreatePreparedStatement"),
        ("info", "  GetFlightInfo"),
        ("get", "  DoGet (to the last batch)"),
        ("close", "  ClosePreparedStatement"),
        ("list", "ListActions (trivial RPC)"),
    ]
    print(f"median ms{'':24}" + "".join(f"{t.name:>10}" for t in targets))
    for key, label in keys:
        print(f"{label:33}" + "".join(f"{t.median_ms(key):10.3f}" for t in targets))
    print(
        f"{'server CPU ms per ADBC query':33}"
        + "".join(f"{(t.cpu / t.adbc_calls * 1000 if t.adbc_calls else float('nan')):10.3f}" for t in targets)
    )
    print(
        f"{'server CPU ms per 4 raw RPCs':33}"
        + "".join(
            f"{(t.steps_cpu / t.adbc_calls * 1000 if t.adbc_calls else float('nan')):10.3f}" for t in targets
        )
    )
    print(
        f"{'server CPU ms per ListActions':33}"
        + "".join(
            f"{(t.list_cpu / t.list_calls * 1000 if t.list_calls else float('nan')):10.3f}" for t in targets
        )
    )
    by = {t.name: t for t in targets}
    if "ours" in by and "twin" in by:
        ours, twin = by["ours"], by["twin"]
        print(f"A/A (twin / ours), ADBC: {twin.median_ms('adbc') / ours.median_ms('adbc'):.3f}")
    if "ours" in by and "before" in by:
        ours, before = by["ours"], by["before"]
        print(
            f"ours / before: ADBC {ours.median_ms('adbc') / before.median_ms('adbc'):.3f}, "
            f"4 RPCs {ours.median_ms('steps') / before.median_ms('steps'):.3f}"
        )
    if "ours" in by and "grpcio" in by:
        ours = by["ours"]
        floor = by["grpcio"].median_ms("list")
        print(
            f"fixed cost of one RPC: ours {ours.median_ms('list'):.3f} ms, bare grpcio {floor:.3f} ms"
            + (f", bare pyarrow.flight {by['arrow'].median_ms('list'):.3f} ms" if "arrow" in by else "")
        )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--runs", type=int, default=300, help="point queries per server (ADBC and raw each)")
    parser.add_argument("--per-round", type=int, default=10, help="queries per server per round")
    parser.add_argument("--before", type=Path, help="another checkout whose endpoint is measured too")
    parser.add_argument("--home", type=Path, help="reuse (or build) the table here")
    parser.add_argument(
        "--variant",
        action="append",
        default=[],
        metavar="NAME:SETTING=VALUE[,...]",
        help="also measure our endpoint with these Flight settings (e.g. w8:worker_threads=8)",
    )
    parser.add_argument("--serve-bare", choices=("arrow", "grpcio"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    warnings.simplefilter("ignore")
    if args.serve_bare:
        serve_bare(args.serve_bare)
        return

    print(c.machine_line())
    home = args.home
    if home is None:  # a home of our own is removed at exit; a given one is the caller's
        home = Path(tempfile.mkdtemp(prefix="lake-bench-rpc-")) / "home"
        atexit.register(shutil.rmtree, home.parent, True)
    if not home.exists():
        t = time.perf_counter()
        build(home, args.rows)
        print(f"table: {args.rows:,} rows, BTREE on id; built in {time.perf_counter() - t:.1f}s")
    procs: list[tuple[str, Callable[[], tuple[subprocess.Popen[bytes], int]], bool]] = [
        ("ours", lambda: endpoint(ROOT, home), True),
        ("twin", lambda: endpoint(ROOT, home), True),
    ]
    for spec in args.variant:
        name, _, opts = spec.partition(":")
        procs.append((name, lambda o=opts: endpoint(ROOT, home, *o.split(",")), True))
    if args.before:
        procs.append(("before", lambda: endpoint(args.before.resolve(), home), True))
    procs += [
        ("grpcio", lambda: start([__file__, "--serve-bare", "grpcio"]), False),
        ("arrow", lambda: start([__file__, "--serve-bare", "arrow"]), False),
    ]
    targets: list[Target] = []
    started: list[subprocess.Popen[bytes]] = []
    try:
        for name, launch, sql in procs:
            proc, port = launch()
            started.append(proc)
            targets.append(Target(name, proc, port, sql))
        measure(targets, args.rows, args.runs, args.per_round)
        report(targets)
    finally:
        for t in targets:
            if t.sql:
                t.conn.close()
        for proc in started:
            proc.terminate()
            proc.wait(10)
    print(c.load_line())


if __name__ == "__main__":
    main()
