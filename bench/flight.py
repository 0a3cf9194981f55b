"""Flight SQL endpoint vs a bare pyarrow.flight server streaming DataFusion over the same table.

    python bench/flight.py [--rows 5000000] [--runs 3]

Builds a Lance table through the catalog (>= 5M rows, >= 150 MB in Arrow), starts both servers
in their own processes on loopback, and measures from this process:

- SELECT * : our endpoint through ADBC (what analysts use) and through a raw pyarrow Flight SQL
  client, and the bare server through a pyarrow client (the same client, so the server is the
  only difference in the pyarrow/pyarrow ratio);
- a GROUP BY aggregate, the same three ways;
- the median GetFlightInfo latency of a point query (planning, snapshot lookup, ticket sealing);
- the ticket overhead (issue 7): sealing and opening one ticket in microseconds (in process), and
  GetFlightInfo of the point query pinned (ours) vs unpinned (the same planning, the bare SQL as
  the ticket; goal: within 5%) vs a static catalog (no request-local catalog either) vs ours
  with a new DataFusion context per request (no session pool) vs a second identical server
  (A/A: the noise), each server in its own process, called over the wire in blocks
  (``--pin-block`` calls per server, the servers in a new random order per block). The ratios
  are medians of per-block ratios (with their interquartile range), so load swings between
  blocks cancel out, and each server's CPU time per call (``/proc``) is printed next to its
  wall time: the A/A line says how far two identical servers differ in this run. Then the
  whole point query (GetFlightInfo + DoGet through a pyarrow client) pinned vs unpinned vs the
  twin, the same way: what pinning adds to a query, not only to its GetFlightInfo. The twin
  also times its own ``Endpoints.answer`` (pinning's work inside GetFlightInfo: the ticket's id,
  head, MAC and endpoint) over the wire and prints the median: over the wire that code runs cold,
  several times slower than in a loop, and the figure is steadier than the wall-time ratio.

Ratios are ours / bare (goal >= 0.9 on scan and aggregate). Client and servers share the machine's
cores, so absolute figures are a floor. ``--tickets-only`` skips the throughput part.

The snapshot cache (issue 14; ``--cache-only`` runs just this part): a second table, ``w.ns.hot``
(id int64, k int32, x float64, s string; ``--rows`` rows), marked ``cache=hot``. Through ADBC:
``GROUP BY k`` and the point query ``WHERE id = 4242`` on our server once the snapshot is cached,
against DataFusion in this process over the same rows in memory (the same partitions; goal
<= 1.15x); the same queries cold, on a table with ``cache=off``, against a server with the cache
and the session pool off (the request path as before issue 14: cold queries no slower). All
variants run interleaved (``--cache-runs`` rounds, each in a new random order), with the CPU
time per query of the server (ADBC) or of this process (DataFusion); ``--before DIR`` also
measures the endpoint of another checkout (e.g. the main branch) on the hot table. ADBC runs each
query with a new cursor (prepare, execute, close: four RPCs) and, as ``ours_hot_rerun``, with one
cursor re-running it (ADBC keeps the statement prepared: GetFlightInfo + DoGet per run). Where a
re-run's time goes: DataFusion in process with the query planned once (``memory_planned``), and
pyarrow's C++ client on our server making the same two RPCs (``ours_pyarrow``) or re-fetching one
ticket (``ours_pyarrow_doget``): what is left above those is ADBC's own client. The floor for
any server (``bare_rerun``): the same re-run through ADBC on a bare pyarrow.flight Flight SQL
server doing nothing but DataFusion over the same rows in memory (no authentication, pins or
checks). Every server of ours runs with the result cache off (the benches measure running
queries), except ``result``: ours as deployed, whose re-runs are answered from the kept result
(``result_hot``, ``result_hot_rerun``).

The main part runs our endpoint with one endpoint per result (max_endpoints=1), as before splitting.

``--scan-only [--before DIR]``: only SELECT * and the aggregate through pyarrow's client, each
round our endpoint, ``DIR``'s (another checkout, e.g. the main branch) and the bare server once
in a new random order: medians, and medians of the per-round ratios (what a change to the
result path, such as how FlightData is written, costs a bulk scan).

``--endpoints [--parts 4] [--partitions P] [--spool-rows N]``: SELECT * through ADBC with one
endpoint (the default settings), with N endpoints from one replica and with N endpoints across
two replicas (advertised locations; ADBC asks for them with the call header
``x-lake-endpoints: many``), each on the grpcio port and through the data plane
(LAKE_FLIGHT_DATA_LISTEN), against the bare server; ``--partitions``: also the data plane's
single stream with that target_partitions; then a spooled result of N rows (the default
settings: one endpoint streaming the segments as they are written) against the same result
streamed (server peak RSS, time to first batch, total).
"""

from __future__ import annotations

import argparse
import atexit
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import warnings
import weakref
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.flight as fl

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import _common as c  # bench/ is first on sys.path when a script runs

USER, PASSWORD = "bench", "bench-password"
SCAN = "SELECT * FROM w.ns.trips"
AGG = (
    "SELECT category, count(*) AS n, sum(value) AS total, avg(value) AS mean, max(ts) AS last "
    "FROM w.ns.trips GROUP BY category ORDER BY category"
)
POINT = "SELECT * FROM w.ns.trips WHERE id = 123457"


def build(home: Path, rows: int) -> int:
    """The benchmark table (``_common``'s generated rows, made on the fly); its Arrow bytes."""
    from lake_platform.catalog.catalog import Catalog
    from lake_platform.settings import load_settings

    catalog = Catalog(load_settings(home=home))
    catalog.containers.create_project("p")
    catalog.containers.create_warehouse("p.w")
    catalog.containers.create_namespace("p.w.ns")
    tally = c.Tally()
    catalog.tables.create_table("p.w.ns.trips", c.make_reader(rows, 500_000, seed=0, tally=tally))
    catalog.close()
    return tally.nbytes


# == servers (each runs in its own process) ====================================================


def serve_ours(home: str, *options: str) -> None:
    """Our endpoint; ``options``: ``name=value`` Flight settings (max_endpoints=1 ...).

    The result cache is off unless an option turns it on: the benches measure running queries,
    and a re-run answered from a kept result runs nothing (it is measured on its own, as the
    ``result`` server of ``--cache-only``)."""
    from lake_platform.auth.tokens import Identity
    from lake_platform.flight.server import FlightSqlServer
    from lake_platform.settings import load_settings
    from lake_platform.settings.flight import flight_settings
    from lake_platform_tests.doubles import StaticAuthenticator

    settings = load_settings(home=Path(home))
    auth = StaticAuthenticator(users={USER: (PASSWORD, Identity(USER, "user", "p", "reader"))})
    values: dict[str, Any] = {"port": 0, "result_cache_bytes": 0}
    values.update(o.split("=", 1) for o in options)
    timed = values.pop("time_answer", None) is not None
    server = FlightSqlServer(settings, flight_settings(**values), authenticator=auth)
    if timed:
        time_answers(server)
    server.start()
    print(server.port, flush=True)
    server.wait()


def time_answers(server: Any) -> None:
    """Time every ``Endpoints.answer`` of ``server`` (what pinning does inside GetFlightInfo:
    the ticket's id, head, MAC and endpoint) with ``perf_counter_ns``; on SIGTERM print the
    median in microseconds and the count (``answer_us MEDIAN COUNT``) and exit. The timer's
    own cost is two clock reads and a list append (~0.2 us)."""
    import signal

    answer, spent = server.endpoints.answer, []
    clock = time.perf_counter_ns

    def timed(*args: Any) -> Any:
        started = clock()
        out = answer(*args)
        spent.append(clock() - started)
        return out

    def report(*_: Any) -> None:
        median = statistics.median(spent) / 1000 if spent else float("nan")
        print(f"answer_us {median:.2f} {len(spent)}", flush=True)
        os._exit(0)

    server.endpoints.answer = timed
    signal.signal(signal.SIGTERM, report)


HOT_AGG = "SELECT k, count(*) AS n, sum(x) AS total FROM w.ns.{t} GROUP BY k"
HOT_POINT = "SELECT * FROM w.ns.{t} WHERE id = 4242"


def hot_rows(rows: int, batch: int = 65_536) -> pa.RecordBatchReader:
    """The issue's table: id int64, k int32 (1,000 groups), x float64, s string (made on the fly)."""
    import pyarrow.compute as pc

    schema = pa.schema([("id", pa.int64()), ("k", pa.int32()), ("x", pa.float64()), ("s", pa.string())])

    def batches() -> Any:
        for start in range(0, rows, batch):
            ids = pa.array(range(start, min(start + batch, rows)), pa.int64())
            yield pa.record_batch(
                [
                    ids,
                    pc.cast(pc.bit_wise_and(ids, 1023), pa.int32()),
                    pc.multiply(pc.cast(ids, pa.float64()), 0.5),
                    pc.binary_join_element_wise("row-", pc.cast(ids, pa.string()), ""),
                ],
                schema=schema,
            )

    return pa.RecordBatchReader.from_batches(schema, batches())


def build_hot(home: Path, rows: int) -> None:
    from lake_platform.catalog.catalog import Catalog
    from lake_platform.settings import load_settings

    catalog = Catalog(load_settings(home=home))
    catalog.tables.create_table("p.w.ns.hot", hot_rows(rows))
    catalog.policies.set_policy("p.w.ns.hot", {"cache": "hot"})
    catalog.tables.create_table("p.w.ns.cold", hot_rows(rows))
    catalog.policies.set_policy("p.w.ns.cold", {"cache": "off"})
    catalog.close()


def serve_before(home: str) -> None:
    """Our server with the snapshot cache and the session pool off: the request path before issue 14."""
    from lake_platform.auth.tokens import Identity
    from lake_platform.flight.server import FlightSqlServer
    from lake_platform.settings import load_settings
    from lake_platform.settings.flight import flight_settings
    from lake_platform_tests.doubles import StaticAuthenticator

    settings = load_settings(home=Path(home))
    auth = StaticAuthenticator(users={USER: (PASSWORD, Identity(USER, "user", "p", "reader"))})
    flight = flight_settings(port=0, cache_bytes=0, session_pool_size=0, result_cache_bytes=0)
    server = FlightSqlServer(settings, flight, authenticator=auth).start()
    print(server.port, flush=True)
    server.wait()


def memory_context(home: Path, partitions: int) -> Any:
    """DataFusion in this process over the hot table's rows in memory, split like the cache
    splits them (round-robin into ``partitions``)."""
    from datafusion import SessionContext

    from lake_platform.catalog.catalog import Catalog
    from lake_platform.settings import load_settings

    with Catalog(load_settings(home=home)) as catalog:
        snap = catalog.reads.open_table("p.w.ns.hot")
        parts: list[list[pa.RecordBatch]] = [[] for _ in range(partitions)]
        for i, batch in enumerate(snap.to_reader()):
            parts[i % partitions].append(batch)
    memory = SessionContext()
    memory.register_record_batches("hot", [p for p in parts if p])
    return memory


def cache_bench(home: Path, rows: int, runs: int, before: Path | None = None) -> None:
    """Interleaved: each round runs every variant once, in a new random order, so they share the
    same load; medians over ``runs`` rounds, and the median of the per-round ratios."""
    import json
    import os
    import random

    t = time.perf_counter()
    build_hot(home, rows)
    print(
        f"hot/cold tables: {rows:,} rows each (id int64, k int32, x float64, s string), "
        f"built in {time.perf_counter() - t:.1f}s"
    )
    servers = {
        "ours": start("--serve-ours", home),
        "result": start("--serve-ours", home, f"result_cache_bytes={64 << 20}"),  # ours, as deployed
        "before": start("--serve-before", home),
    }
    if before is not None:  # the same server from another checkout (e.g. the main branch)
        proc = c.spawn(
            [sys.executable, str(before / "bench" / "flight.py"), "--serve-ours", str(home)],
            stdout=subprocess.PIPE,
        )
        assert proc.stdout is not None
        servers["main"] = (proc, int(proc.stdout.readline()))
    servers["bare"] = start("--serve-bare-sql", home)
    try:
        conns = {n: c.adbc_connect(port, USER, PASSWORD) for n, (_, port) in servers.items() if n != "bare"}
        conns["bare"] = c.adbc_connect(servers["bare"][1], None)  # it has no authentication

        def health(port: int) -> dict[str, Any]:
            raw = fl.connect(f"grpc://127.0.0.1:{port}")
            opts = fl.FlightCallOptions(headers=[raw.authenticate_basic_token(USER, PASSWORD)])
            [result] = list(raw.do_action(fl.Action("health", b""), opts))
            return json.loads(result.body.to_pybytes())

        def adbc(name: str, sql: str) -> Callable[[], int]:
            """A new cursor per query: ADBC prepares, executes and closes (four RPCs)."""

            def run() -> int:
                with conns[name].cursor() as cur:
                    cur.execute(sql)
                    return cur.fetch_arrow_table().num_rows

            return run

        def adbc_rerun(name: str, sql: str) -> Callable[[], int]:
            """One cursor re-running its query, as a dashboard or any DB-API loop does: ADBC keeps
            the statement prepared, so a run is GetFlightInfo + DoGet (the server reuses its kept
            plan and scans each time: no result is reused)."""
            cur = conns[name].cursor()
            cursors.append(cur)

            def run() -> int:
                cur.execute(sql)
                return cur.fetch_arrow_table().num_rows

            return run

        cursors: list[Any] = []

        hot_servers = [n for n in servers if n not in ("before", "bare")]
        for name in hot_servers:
            adbc(name, HOT_AGG.format(t="hot"))()  # a miss: the load starts in the background
        loaded = time.perf_counter()
        while any(health(servers[n][1])["cache"]["entries"] < 1 for n in hot_servers):
            if time.perf_counter() - loaded > 300:
                raise SystemExit("the hot table was not cached")
            time.sleep(0.05)
        memory = memory_context(home, os.cpu_count() or 1)

        def local(sql: str) -> Callable[[], int]:
            query = sql.format(t="hot").replace("w.ns.hot", "hot")
            return lambda: memory.sql(query).to_arrow_table().num_rows

        def planned_once(sql: str) -> Callable[[], int]:
            """DataFusion in process, planned once and collected each time (ours keeps plans)."""
            df = memory.sql(sql.format(t="hot").replace("w.ns.hot", "hot"))
            return lambda: df.to_arrow_table().num_rows

        from lake_platform.flight import proto

        raw = fl.connect(f"grpc://127.0.0.1:{servers['ours'][1]}")
        raw_options = fl.FlightCallOptions(headers=[raw.authenticate_basic_token(USER, PASSWORD)])

        def pyarrow_client(sql: str, *, refetch: bool) -> Callable[[], int]:
            """pyarrow's C++ Flight client on our server: GetFlightInfo + DoGet, the two RPCs an
            ADBC re-run makes, without ADBC's client; ``refetch``: DoGet of one ticket alone."""
            command = proto.pack(proto.CommandStatementQuery(query=sql.format(t="hot")))
            descriptor = fl.FlightDescriptor.for_command(command)
            ticket = raw.get_flight_info(descriptor, raw_options).endpoints[0].ticket

            def run() -> int:
                got = ticket if refetch else raw.get_flight_info(descriptor, raw_options).endpoints[0].ticket
                return raw.do_get(got, raw_options).read_all().num_rows

            return run

        rng = random.Random(14)
        for label, sql in (("GROUP BY k", HOT_AGG), ("WHERE id = 4242", HOT_POINT)):
            variants: dict[str, Callable[[], int]] = {
                "memory": local(sql),
                "memory_planned": planned_once(sql),
            }
            for name in hot_servers:
                variants[f"{name}_hot"] = adbc(name, sql.format(t="hot"))
            variants["ours_hot_rerun"] = adbc_rerun("ours", sql.format(t="hot"))
            variants["result_hot_rerun"] = adbc_rerun("result", sql.format(t="hot"))
            variants["ours_pyarrow"] = pyarrow_client(sql, refetch=False)
            variants["ours_pyarrow_doget"] = pyarrow_client(sql, refetch=True)
            variants["bare_rerun"] = adbc_rerun("bare", sql.format(t="hot"))
            if "main" in servers:
                variants["main_hot_rerun"] = adbc_rerun("main", sql.format(t="hot"))
            variants["ours_cold"] = adbc("ours", sql.format(t="cold"))
            variants["before_cold"] = adbc("before", sql.format(t="cold"))
            times: dict[str, list[float]] = {k: [] for k in variants}
            cpu = {k: 0.0 for k in variants}
            for fn in variants.values():
                fn()  # warm-up
            for _ in range(runs):
                order = list(variants)
                rng.shuffle(order)
                for k in order:
                    pid = servers[k.split("_")[0]][0].pid if not k.startswith("memory") else None
                    c0 = c.cpu_seconds(pid) if pid else time.process_time()
                    t0 = time.perf_counter()
                    variants[k]()
                    times[k].append(time.perf_counter() - t0)
                    cpu[k] += (c.cpu_seconds(pid) if pid else time.process_time()) - c0

            def ratio(
                a: str, b: str, times: dict[str, list[float]] = times, cpu: dict[str, float] = cpu
            ) -> str:
                per_round = statistics.median(x / y for x, y in zip(times[a], times[b], strict=True))
                return f"{per_round:.3f}x (CPU {cpu[a] / cpu[b]:.3f}x)"

            med = {k: statistics.median(v) * 1000 for k, v in times.items()}
            print(
                f"{label}: median ms over {runs} interleaved rounds (CPU ms per query: this process "
                "for DataFusion, the server for ADBC)"
            )
            for k in variants:
                print(f"  {k:15s} {med[k]:8.1f} ({cpu[k] / runs * 1000:7.1f})")
            print(
                "  hot via ADBC / DataFusion in process over memory: "
                f"{ratio('ours_hot', 'memory')} (goal <= 1.15x); one cursor re-running it: "
                f"{ratio('ours_hot_rerun', 'memory')}"
            )
            print(
                "  with the result cache (the default; a re-run is answered from the kept result): "
                f"new cursor {ratio('result_hot', 'memory')}; one cursor re-running it "
                f"{ratio('result_hot_rerun', 'memory')}"
            )
            print(
                "  where the re-run's time goes, each / DataFusion in process: "
                f"planned once {ratio('memory_planned', 'memory')}; "
                f"pyarrow's client, GetFlightInfo + DoGet {ratio('ours_pyarrow', 'memory')}; "
                f"DoGet alone {ratio('ours_pyarrow_doget', 'memory')}"
            )
            print(
                "  the floor, a bare Flight SQL server (DataFusion over the same rows in memory) "
                f"re-run through ADBC / DataFusion in process: {ratio('bare_rerun', 'memory')}; "
                f"ours / that bare server, both re-run: {ratio('ours_hot_rerun', 'bare_rerun')}"
            )
            if "main_hot" in times:
                print(
                    f"  hot via ADBC, this checkout / {before}: {ratio('ours_hot', 'main_hot')}; "
                    f"one cursor re-running it: {ratio('ours_hot_rerun', 'main_hot_rerun')}"
                )
            print(
                f"  cold via ADBC / before (cache and session pool off): {ratio('ours_cold', 'before_cold')}"
            )
        for cur in cursors:
            cur.close()
        for conn in conns.values():
            conn.close()
        raw.close()
    finally:
        c.terminate(proc for proc, _ in servers.values())
    print(c.load_line())


def serve_variant(home: str, variant: str) -> None:
    """Our server with GetFlightInfo of a statement changed, for the pinning overhead:

    - ``unpinned``: ours exactly (the same handler, planning, checks and FlightInfo building),
      but the ticket is the bare SQL: no snapshots, no sealing, no expiry, so nothing to keep
      for the DoGet and no early start to consider (``Answer.ticket_id`` None). The one step
      replaced is ``Endpoints.answer``: what pinning itself costs;
    - ``static``: planning against a static (Rust, in-memory) catalog holding the current
      table provider, in one context reused by every request, with the same SQL checks, and the
      bare SQL as the ticket: what pinning and the request-local catalog cost together;
    - ``fresh``: ours exactly, but a new DataFusion context for every request (no session pool,
      as before issue 14): what reusing sessions saves.
    """
    from datafusion.catalog import Catalog, Schema

    from lake_platform.auth.tokens import Identity
    from lake_platform.flight import proto
    from lake_platform.flight.endpoints import Answer, Endpoints
    from lake_platform.flight.server import FlightSqlServer
    from lake_platform.query.batches import advertised_schema
    from lake_platform.query.planner import READ_ONLY
    from lake_platform.query.sql import check_query, qualify_nested, rewrite_placeholders
    from lake_platform.settings import load_settings
    from lake_platform.settings.flight import flight_settings
    from lake_platform_tests.doubles import StaticAuthenticator

    class Variant(FlightSqlServer):
        catalog: Any = None

        def do_get(self, call: Any, ticket: fl.Ticket) -> Any:
            """``unpinned``: DoGet of the bare-SQL ticket as ours serves a sealed one (kept plan,
            admission, audit), but planned against the current snapshot: no ticket to open,
            no pins."""
            if variant != "unpinned":
                return super().do_get(call, ticket)
            from lake_platform.observability.query import QueryInfo, observed

            identity = call.identity
            sql = proto.statement_handle(ticket.ticket).decode()
            planned = self.engine.plan(sql, self._view(identity), scope=identity)
            query = QueryInfo.of("flight", identity, sql, None, planned.refs)
            return planned.schema, observed(
                self.streams.stream(call, planned, "unpinned"), query, self.audit, call.is_cancelled
            )

        def get_flight_info(self, call: Any, descriptor: fl.FlightDescriptor) -> fl.FlightInfo:
            identity = call.identity
            name, payload = self._command(descriptor)
            if name != "CommandStatementQuery":
                return super().get_flight_info(call, descriptor)
            if variant in ("fresh", "unpinned"):
                return super().get_flight_info(call, descriptor)
            sql = proto.parse(proto.CommandStatementQuery, payload).query
            ticket = proto.pack(proto.TicketStatementQuery(statement_handle=sql.encode()))
            if self.catalog is None:
                ref = self._view(identity).table("w", "ns", "trips").ref
                tables = Schema.memory_schema()
                tables.register_table("trips", self.engine.table(ref))
                self.catalog = Catalog.memory_catalog()
                self.catalog.register_schema("ns", tables)
                self.ctx = self.engine.context()
                self.ctx.register_catalog_provider("w", self.catalog)
            check_query(sql, self.settings.max_sql_bytes)
            text, _ = rewrite_placeholders(qualify_nested(sql, lambda wh, ns: (wh, ns) == ("w", "ns")))
            df = self.ctx.sql_with_options(text, READ_ONLY)
            type(df.logical_plan().to_variant()).__name__  # noqa: B018 - the same root check as ours
            return fl.FlightInfo(
                advertised_schema(df.schema()), descriptor, [fl.FlightEndpoint(ticket, [])], -1, -1
            )

    class BareTickets(Endpoints):
        """``unpinned``: the bare SQL as the one endpoint's ticket, nothing sealed or kept."""

        #: Each plan's answer, worked out once, as ours keeps its claims per plan.
        answers: weakref.WeakKeyDictionary[Any, Answer] = weakref.WeakKeyDictionary()

        def answer(self, identity: Identity, planned: Any, params: Any) -> Answer:
            kept = self.answers.get(planned)
            if kept is None:
                ticket = proto.pack(proto.TicketStatementQuery(statement_handle=planned.sql.encode()))
                endpoint = fl.FlightEndpoint(ticket, [])  # no expiry: nothing expires
                kept = self.answers[planned] = Answer([endpoint], False, planned.schema)
            return kept

    settings = load_settings(home=Path(home))
    auth = StaticAuthenticator(users={USER: (PASSWORD, Identity(USER, "user", "p", "reader"))})
    server = Variant(settings, flight_settings(port=0, early_start_seconds=0), authenticator=auth)
    if variant == "unpinned":
        server.endpoints.__class__ = BareTickets  # the server's own, built as ours; only answer() changes
    if variant == "fresh":
        server.engine.sessions.capacity = 0  # every request makes (and drops) its own context
    server.start()
    print(server.port, flush=True)
    server.wait()


def ticket_overhead(home: Path, runs: int) -> dict[str, float]:
    """Seal and open one statement ticket (the point query, one snapshot), in process: sealed
    from scratch and from a kept plan's checked claims, and opened by another replica."""
    import secrets

    from lake_platform.auth.tokens import Identity, Sealer
    from lake_platform.flight.tickets import TicketLimits, Tickets
    from lake_platform.query.snapshot import load_snapshot
    from lake_platform.registry.factory import open_metastore
    from lake_platform.settings import load_settings

    settings = load_settings(home=home)
    store = open_metastore(settings)
    ref = load_snapshot(store).project("p").table("w", "ns", "trips").ref
    store.close()
    keys = [("k1", secrets.token_bytes(32)), ("k2", secrets.token_bytes(32))]
    tickets, elsewhere = (
        Tickets(Sealer(keys), TicketLimits(), lifetime=3600, prepared_lifetime=3600) for _ in range(2)
    )
    who = Identity(USER, "user", "p", "reader")
    claims = tickets.statement_claims(who, POINT, None, (ref,))  # what a kept plan keeps
    seal, kept, open_, size = [], [], [], 0
    for _ in range(runs):
        t = time.perf_counter()
        blob, _ = tickets.seal_statement(who, POINT, None, (ref,))
        t1 = time.perf_counter()
        tickets.seal_claims(claims)
        t2 = time.perf_counter()
        elsewhere.open_statement(blob, who)
        t3 = time.perf_counter()
        seal.append(t1 - t)
        kept.append(t2 - t1)
        open_.append(t3 - t2)
        size = len(blob)
    return {
        "seal_us": statistics.median(seal) * 1e6,
        "kept_us": statistics.median(kept) * 1e6,
        "open_us": statistics.median(open_) * 1e6,
        "bytes": size,
    }


def info_latency(clients: list[tuple[fl.FlightClient, fl.FlightCallOptions]], runs: int) -> list[float]:
    """Median GetFlightInfo latency of the point query on each server, interleaved."""
    from lake_platform.flight import proto

    descriptor = fl.FlightDescriptor.for_command(proto.pack(proto.CommandStatementQuery(query=POINT)))
    times: list[list[float]] = [[] for _ in clients]
    for client, options in clients:
        for _ in range(10):
            client.get_flight_info(descriptor, options)  # warm-up
    for n in range(runs):
        for k in range(len(clients)):  # rotate who goes first, so no server is always first
            i = (n + k) % len(clients)
            client, options = clients[i]
            t = time.perf_counter()
            client.get_flight_info(descriptor, options)
            times[i].append(time.perf_counter() - t)
    return [statistics.median(t) for t in times]


def pin_overhead(
    servers: dict[str, tuple[subprocess.Popen[bytes], int]], runs: int, block: int, *, fetch: bool = False
) -> dict[str, dict[str, Any]]:
    """GetFlightInfo of the point query on each server, interleaved in blocks of ``block`` calls
    (each block visits the servers in a new random order, so they share the same load), with the
    server's CPU time per call. Per server: median wall ms, CPU ms per call, and the per-block
    medians (for ratios taken within a block: a paired figure that load swings cannot skew)."""
    import random

    from lake_platform.flight import proto

    descriptor = fl.FlightDescriptor.for_command(proto.pack(proto.CommandStatementQuery(query=POINT)))
    clients = {}
    for name, (proc, port) in servers.items():
        client = fl.connect(f"grpc://127.0.0.1:{port}")
        options = fl.FlightCallOptions(headers=[client.authenticate_basic_token(USER, PASSWORD)])
        for _ in range(20):
            client.get_flight_info(descriptor, options)  # warm-up: plans kept, sessions pooled
        clients[name] = (proc, client, options)
    out: dict[str, dict[str, Any]] = {n: {"times": [], "blocks": [], "cpu": 0.0} for n in servers}
    rng = random.Random(7)
    for _ in range(max(1, runs // block)):
        order = list(clients)
        rng.shuffle(order)
        for name in order:
            proc, client, options = clients[name]
            times = []
            cpu = c.cpu_seconds(proc.pid)
            for _ in range(block):
                t = time.perf_counter()
                info = client.get_flight_info(descriptor, options)
                if fetch:  # the whole query: its DoGet too
                    client.do_get(info.endpoints[0].ticket, options).read_all()
                times.append(time.perf_counter() - t)
            out[name]["cpu"] += c.cpu_seconds(proc.pid) - cpu
            out[name]["times"] += times
            out[name]["blocks"].append(statistics.median(times))
    for figures in out.values():
        figures["median_ms"] = statistics.median(figures["times"]) * 1000
        figures["cpu_ms"] = figures["cpu"] / len(figures["times"]) * 1000
    return out


def paired(out: dict[str, dict[str, Any]], a: str, b: str) -> str:
    """``a`` relative to ``b``: the median of the per-block ratios (with its interquartile
    range), and the ratio of CPU time per call."""
    ratios = sorted(x / y for x, y in zip(out[a]["blocks"], out[b]["blocks"], strict=True))
    q = len(ratios) // 4
    return (
        f"wall {(statistics.median(ratios) - 1) * 100:+.1f}% (IQR {(ratios[q] - 1) * 100:+.1f}% .. "
        f"{(ratios[-q - 1] - 1) * 100:+.1f}%, {len(ratios)} blocks), "
        f"CPU {(out[a]['cpu_ms'] / out[b]['cpu_ms'] - 1) * 100:+.1f}%"
    )


class BareServer(fl.FlightServerBase):
    """What a minimal server does: the ticket is the SQL; DataFusion's stream goes out as is."""

    def __init__(self, home: str) -> None:
        super().__init__("grpc://127.0.0.1:0")
        from lake_platform.catalog.catalog import Catalog
        from lake_platform.settings import load_settings

        self.catalog = Catalog(load_settings(home=Path(home)))
        self.snapshot = self.catalog.reads.open_table("p.w.ns.trips")

    def do_get(self, context: Any, ticket: fl.Ticket) -> fl.RecordBatchStream:
        from datafusion import SessionContext

        ctx = SessionContext()
        ctx.register_table("trips", self.snapshot.table_provider())
        sql = ticket.ticket.decode().replace("w.ns.trips", "trips")
        return fl.RecordBatchStream(pa.RecordBatchReader.from_stream(ctx.sql(sql)))


class BareSqlServer(c.SqlInfoServer):
    """The least a Flight SQL server through ADBC can do (cache part): DataFusion over the hot
    table's rows in memory (``memory_context``), no authentication, no pins, no checks. It answers
    only what an ADBC re-run needs: GetSqlInfo (at connect), CreatePreparedStatement (plans once,
    as ours keeps plans), GetFlightInfo (the handle is the ticket) and DoGet (DataFusion's stream
    as is)."""

    def __init__(self, home: str) -> None:
        import os

        super().__init__()
        self.memory = memory_context(Path(home), os.cpu_count() or 1)
        self.plans: dict[bytes, Any] = {}

    def do_action(self, context: Any, action: fl.Action) -> Any:
        from lake_platform.flight import proto

        name, payload = proto.unpack_any(action.body.to_pybytes())
        if name == "ActionCreatePreparedStatementRequest":
            sql = proto.parse(proto.ActionCreatePreparedStatementRequest, payload).query
            df = self.memory.sql(sql.replace("w.ns.hot", "hot"))
            handle = str(len(self.plans)).encode()
            self.plans[handle] = df
            schema = df.schema().serialize().to_pybytes()
            result = proto.ActionCreatePreparedStatementResult(
                prepared_statement_handle=handle, dataset_schema=schema
            )
            yield fl.Result(proto.pack(result))

    def statement_info(self, name: str, payload: bytes, descriptor: fl.FlightDescriptor) -> fl.FlightInfo:
        from lake_platform.flight import proto

        handle = proto.parse(proto.CommandPreparedStatementQuery, payload).prepared_statement_handle
        schema = self.plans[handle].schema()
        return fl.FlightInfo(schema, descriptor, [fl.FlightEndpoint(handle, [])], -1, -1)

    def statement_stream(self, ticket: bytes) -> fl.RecordBatchStream:
        return fl.RecordBatchStream(pa.RecordBatchReader.from_stream(self.plans[ticket]))


def serve_bare_sql(home: str) -> None:
    server = BareSqlServer(home)
    print(server.port, flush=True)
    server.serve()


def serve_bare(home: str) -> None:
    server = BareServer(home)
    print(server.port, flush=True)
    server.serve()


def start(mode: str, home: Path, *options: str) -> tuple[subprocess.Popen[bytes], int]:
    proc = c.spawn([sys.executable, __file__, mode, str(home), *options], stdout=subprocess.PIPE)
    assert proc.stdout is not None
    return proc, int(proc.stdout.readline())


# == clients ===================================================================================


def timed(fn: Callable[[], int], runs: int) -> tuple[float, int]:
    fn()  # warm-up (caches, connections, first-query costs)
    times, n = [], 0
    for _ in range(runs):
        t = time.perf_counter()
        n = fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times), n


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rows", type=int, default=5_000_000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--point-runs", type=int, default=50)
    parser.add_argument("--ticket-runs", type=int, default=2000)
    parser.add_argument(
        "--pin-runs", type=int, default=3000, help="GetFlightInfo calls per server (pinned/unpinned)"
    )
    parser.add_argument(
        "--pin-block", type=int, default=50, help="calls per server per block (pinning overhead)"
    )
    parser.add_argument("--tickets-only", action="store_true", help="only the ticket-overhead part")
    parser.add_argument("--cache-only", action="store_true", help="only the snapshot-cache part")
    parser.add_argument(
        "--scan-only",
        action="store_true",
        help="only the bulk scan and aggregate, interleaved (pyarrow client)",
    )
    parser.add_argument("--cache-runs", type=int, default=20, help="interleaved rounds (cache part)")
    parser.add_argument(
        "--before",
        type=Path,
        help="cache and scan parts: also measure this checkout's endpoint (e.g. /work/main)",
    )
    parser.add_argument(
        "--endpoints",
        action="store_true",
        help="only the multi-endpoint part: one endpoint vs N from one replica vs N across two, vs bare",
    )
    parser.add_argument("--parts", type=int, default=4, help="endpoints per result in --endpoints")
    parser.add_argument(
        "--partitions",
        type=int,
        default=0,
        help="with --endpoints: also the data plane's single endpoint with this target_partitions",
    )
    parser.add_argument(
        "--spool-rows", type=int, default=0, help="with --endpoints: also spool a result of this many rows"
    )
    args = parser.parse_args()

    from lake_platform.flight import proto

    warnings.simplefilter("ignore")
    home = Path(tempfile.mkdtemp(prefix="lake-bench-flight-")) / "home"
    atexit.register(shutil.rmtree, home.parent, True)  # ~150 MB a run: never left behind
    if args.cache_only:
        from lake_platform.catalog.catalog import Catalog
        from lake_platform.settings import load_settings

        catalog = Catalog(load_settings(home=home))
        catalog.containers.create_project("p")
        catalog.containers.create_warehouse("p.w")
        catalog.containers.create_namespace("p.w.ns")
        catalog.close()
        cache_bench(home, args.rows, args.cache_runs, args.before)
        return
    t = time.perf_counter()
    nbytes = build(home, args.rows)
    print(
        f"table: {args.rows:,} rows, {nbytes / 1e6:,.0f} MB in Arrow, built in {time.perf_counter() - t:.1f}s"
    )
    if args.scan_only:
        scan_part(home, nbytes, args.runs, args.before)
        return
    overhead = ticket_overhead(home, args.ticket_runs)
    print(
        f"ticket: seal {overhead['seal_us']:.1f} us (a kept plan's claims: {overhead['kept_us']:.1f} us), "
        f"open (+ validate) {overhead['open_us']:.1f} us, "
        f"{overhead['bytes']:.0f} bytes (point query, one snapshot; median of {args.ticket_runs})"
    )
    if args.endpoints:
        try:
            endpoints_part(home, nbytes, args)
        finally:
            shutil.rmtree(home.parent, ignore_errors=True)
        return
    # Early starts off on every server of this part: it measures pinning, and the unpinned
    # variant's GetFlightInfo does not start queries.
    ours, ours_port = start("--serve-ours", home, "max_endpoints=1", "early_start_seconds=0")
    variants = {
        "unpinned": start("--serve-unpinned", home),
        "static": start("--serve-static", home),
        "fresh": start("--serve-fresh", home),
        # A/A: a second server identical to ours, but for a timer around Endpoints.answer
        "twin": start("--serve-ours", home, "max_endpoints=1", "early_start_seconds=0", "time_answer=1"),
    }
    try:
        out = pin_overhead({"pinned": (ours, ours_port), **variants}, args.pin_runs, args.pin_block)
        print(
            f"point query GetFlightInfo ({len(out['pinned']['times'])} calls per server, in blocks of "
            f"{args.pin_block}, servers in random order per block): median ms (server CPU ms per call)"
        )
        for name, label in (
            ("pinned", "ours (pinned ticket)"),
            ("unpinned", "unpinned: same planning, bare-SQL ticket"),
            ("static", "static catalog, bare-SQL ticket"),
            ("fresh", "ours with a new DataFusion context per request"),
            ("twin", "A/A: a second server identical to ours"),
        ):
            print(f"  {label:48s} {out[name]['median_ms']:.3f} ({out[name]['cpu_ms']:.3f})")
        print(f"  pinning overhead (pinned / unpinned):   {paired(out, 'pinned', 'unpinned')}  (goal < 5%)")
        print(f"  A/A control (twin / pinned; the noise): {paired(out, 'twin', 'pinned')}")
        whole = pin_overhead(
            {
                k: v
                for k, v in {"pinned": (ours, ours_port), **variants}.items()
                if k in ("pinned", "unpinned", "twin")
            },
            args.pin_runs // 2,
            args.pin_block,
            fetch=True,
        )
        print(
            f"  the whole point query (GetFlightInfo + DoGet, pyarrow client): pinned "
            f"{whole['pinned']['median_ms']:.3f} ms, unpinned {whole['unpinned']['median_ms']:.3f} ms"
        )
        print(
            "  pinning overhead per query (pinned / unpinned): "
            f"{paired(whole, 'pinned', 'unpinned')}  (goal < 5%)"
        )
        print(f"  A/A control per query (twin / pinned):          {paired(whole, 'twin', 'pinned')}")
        print(f"  request-local catalog + pinning (pinned / static): {paired(out, 'pinned', 'static')}")
        print(
            f"  session reuse saves {out['fresh']['median_ms'] - out['pinned']['median_ms']:.3f} ms "
            f"(CPU {out['fresh']['cpu_ms'] - out['pinned']['cpu_ms']:.3f} ms) per call"
        )
        twin = variants["twin"][0]
        twin.terminate()
        assert twin.stdout is not None
        report = twin.stdout.read().decode().split()
        print(
            f"  pinning's own work inside the server (Endpoints.answer, twin, median of {report[2]} "
            f"calls over the wire): {float(report[1]):.1f} us"
        )
        print(c.load_line())
    finally:
        for proc, _ in variants.values():
            proc.terminate()
            proc.wait(10)
    if args.tickets_only:
        ours.terminate()
        ours.wait(10)
        return
    cache_bench(home, args.rows, args.cache_runs, args.before)
    bare, bare_port = start("--serve-bare", home)
    try:
        conn = c.adbc_connect(ours_port, USER, PASSWORD)
        raw = fl.connect(f"grpc://127.0.0.1:{ours_port}")
        opts = fl.FlightCallOptions(headers=[raw.authenticate_basic_token(USER, PASSWORD)])
        plain = fl.connect(f"grpc://127.0.0.1:{bare_port}")

        def adbc(sql: str) -> Callable[[], int]:
            def run() -> int:
                with conn.cursor() as cur:
                    cur.execute(sql)
                    return sum(b.num_rows for b in cur.fetch_record_batch())

            return run

        def ours_raw(sql: str) -> Callable[[], int]:
            descriptor = fl.FlightDescriptor.for_command(proto.pack(proto.CommandStatementQuery(query=sql)))

            def run() -> int:
                info = raw.get_flight_info(descriptor, opts)
                return sum(c.data.num_rows for c in raw.do_get(info.endpoints[0].ticket, opts))

            return run

        def bare_raw(sql: str) -> Callable[[], int]:
            def run() -> int:
                return sum(c.data.num_rows for c in plain.do_get(fl.Ticket(sql.encode())))

            return run

        results: dict[str, dict[str, float]] = {}
        for label, sql in (("scan", SCAN), ("aggregate", AGG)):
            row = {}
            for who, make in (("ours/adbc", adbc), ("ours/pyarrow", ours_raw), ("bare/pyarrow", bare_raw)):
                seconds, n = timed(make(sql), args.runs)
                row[who] = seconds
                extra = f", {nbytes / seconds / 1e6:,.0f} MB/s" if label == "scan" else ""
                print(f"{label:9s} {who:13s} {seconds * 1000:8.1f} ms  ({n:,} rows{extra})")
            results[label] = row

        descriptor = fl.FlightDescriptor.for_command(proto.pack(proto.CommandStatementQuery(query=POINT)))
        raw.get_flight_info(descriptor, opts)
        latencies = []
        for _ in range(args.point_runs):
            t = time.perf_counter()
            raw.get_flight_info(descriptor, opts)
            latencies.append(time.perf_counter() - t)
        full = []
        for _ in range(max(5, args.point_runs // 5)):
            t = time.perf_counter()
            ours_raw(POINT)()
            full.append(time.perf_counter() - t)
        print(
            f"point query GetFlightInfo: median {statistics.median(latencies) * 1000:.2f} ms, "
            f"p90 {sorted(latencies)[int(len(latencies) * 0.9)] * 1000:.2f} ms; "
            f"GetFlightInfo + DoGet median {statistics.median(full) * 1000:.2f} ms"
        )
        print("ratios (throughput ours / bare; goal >= 0.9):")
        for label, row in results.items():
            print(
                f"  {label:9s} pyarrow client {row['bare/pyarrow'] / row['ours/pyarrow']:.2f}   "
                f"ADBC client {row['bare/pyarrow'] / row['ours/adbc']:.2f}"
            )
        conn.close()
    finally:
        for proc in (ours, bare):
            proc.terminate()
            proc.wait(10)


def scan_part(home: Path, nbytes: int, runs: int, before: Path | None) -> None:
    """SELECT * and the aggregate through pyarrow's client (GetFlightInfo + DoGet), each round
    every server once in a new random order: ours, ``before``'s (another checkout's endpoint,
    e.g. the main branch) and the bare server. Medians, and medians of per-round ratios."""
    import random

    from lake_platform.flight import proto

    servers = {"ours": start("--serve-ours", home, "max_endpoints=1")}
    if before is not None:
        proc = c.spawn(
            [
                sys.executable,
                str(before / "bench" / "flight.py"),
                "--serve-ours",
                str(home),
                "max_endpoints=1",
            ],
            stdout=subprocess.PIPE,
        )
        assert proc.stdout is not None
        servers["before"] = (proc, int(proc.stdout.readline()))
    servers["bare"] = start("--serve-bare", home)
    try:
        clients: dict[str, Any] = {}
        for name, (_, port) in servers.items():
            client = fl.connect(f"grpc://127.0.0.1:{port}")
            auth = [] if name == "bare" else [client.authenticate_basic_token(USER, PASSWORD)]
            clients[name] = (client, fl.FlightCallOptions(headers=auth))

        def run(name: str, sql: str) -> int:
            client, options = clients[name]
            if name == "bare":
                return sum(chunk.data.num_rows for chunk in client.do_get(fl.Ticket(sql.encode())))
            command = proto.pack(proto.CommandStatementQuery(query=sql))
            info = client.get_flight_info(fl.FlightDescriptor.for_command(command), options)
            return sum(chunk.data.num_rows for chunk in client.do_get(info.endpoints[0].ticket, options))

        for label, sql in (("scan", SCAN), ("aggregate", AGG)):
            times: dict[str, list[float]] = {name: [] for name in servers}
            cpu = dict.fromkeys(servers, 0.0)
            for name in servers:
                run(name, sql)  # warm-up
            for _ in range(runs):
                for name in random.sample(list(servers), len(servers)):
                    c0 = c.cpu_seconds(servers[name][0].pid)
                    t0 = time.perf_counter()
                    run(name, sql)
                    times[name].append(time.perf_counter() - t0)
                    cpu[name] += c.cpu_seconds(servers[name][0].pid) - c0
            print(f"{label}: median ms over {runs} interleaved rounds (server CPU ms per query)")
            for name in servers:
                extra = (
                    f", {nbytes / statistics.median(times[name]) / 1e6:,.0f} MB/s" if label == "scan" else ""
                )
                print(
                    f"  {name:7s} {statistics.median(times[name]) * 1000:8.1f} "
                    f"({cpu[name] / runs * 1000:7.1f}){extra}"
                )
            for a, b in (("ours", "before"), ("ours", "bare")):
                if b in times:
                    ratio = statistics.median(x / y for x, y in zip(times[a], times[b], strict=True))
                    print(f"  {a} / {b}: {ratio:.3f}x time (CPU {cpu[a] / cpu[b]:.3f}x)")
        print(c.load_line())
    finally:
        c.terminate(proc for proc, _ in servers.values())


def endpoints_part(home: Path, nbytes: int, args: argparse.Namespace) -> None:
    """SELECT * through ADBC: one endpoint, N endpoints from one replica, N endpoints across two
    replicas (locations), and the bare server through pyarrow; then (``--spool-rows``) a spooled
    result against the same result streamed."""
    import secrets

    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    from lake_platform_tests.servers import free_ports

    keys = f"keys=k1:{secrets.token_hex(32)}"
    # Several endpoints only for a call that asks (``x-lake-endpoints: many``; ``adbc`` below).
    split = [f"max_endpoints={args.parts}", f"endpoint_target_rows={-(-args.rows // args.parts)}"]
    port_a, port_b, port_c, port_d, data_c, data_d = free_ports(6)
    uri_a, uri_b = f"grpc://127.0.0.1:{port_a}", f"grpc://127.0.0.1:{port_b}"
    uri_c, uri_d = f"grpc://127.0.0.1:{port_c}", f"grpc://127.0.0.1:{port_d}"
    data = "data_listen=127.0.0.1:0"
    duri_c, duri_d = f"grpc://127.0.0.1:{data_c}", f"grpc://127.0.0.1:{data_d}"
    # (label, server options of each replica; the client connects to the first)
    variants: list[tuple[str, list[list[str]]]] = [
        ("ours/adbc, 1 endpoint", [[]]),  # the default settings
        (f"ours/adbc, {args.parts} endpoints, 1 replica", [split]),
        (
            f"ours/adbc, {args.parts} endpoints, 2 replicas",
            [
                [*split, keys, f"port={port_a}", f"advertise={uri_a}", f"peers={uri_b}"],
                [*split, keys, f"port={port_b}", f"advertise={uri_b}", f"peers={uri_a}"],
            ],
        ),
        ("data plane/adbc, 1 endpoint", [[data]]),
        (f"data plane/adbc, {args.parts} endpoints, 1 replica", [[*split, data]]),
        (
            f"data plane/adbc, {args.parts} endpoints, 2 replicas",
            [
                [*split, keys, f"port={port_c}", f"advertise={uri_c}", f"peers={uri_d}",
                 f"data_listen=127.0.0.1:{data_c}", f"data_peers={duri_d}"],
                [*split, keys, f"port={port_d}", f"advertise={uri_d}", f"peers={uri_c}",
                 f"data_listen=127.0.0.1:{data_d}", f"data_peers={duri_c}"],
            ],
        ),
    ]  # fmt: skip
    if args.partitions:
        variants.append(
            (
                f"data plane/adbc, 1 endpoint, target_partitions={args.partitions}",
                [["max_endpoints=1", data, f"target_partitions={args.partitions}"]],
            )
        )
    bare_proc = start("--serve-bare", home)
    procs = [bare_proc]
    started: list[tuple[str, tuple[int, ...]]] = []
    try:
        for label, replicas in variants:
            ports = []
            for options in replicas:
                proc = start("--serve-ours", home, *options)
                procs.append(proc)
                ports.append(proc[1])
            started.append((label, tuple(ports)))
        bare = bare_proc[1]
        single, one_replica = started[0][1][0], started[1][1][0]

        def adbc(port: int, many: bool) -> Callable[[], int]:
            import adbc_driver_flightsql.dbapi as fsql

            login = {"username": USER, "password": PASSWORD}
            if many:  # ask for several endpoints, as a user of ADBC would
                login["adbc.flight.sql.rpc.call_header.x-lake-endpoints"] = "many"
            conn = fsql.connect(f"grpc://127.0.0.1:{port}", db_kwargs=login, autocommit=True)

            def run() -> int:
                with conn.cursor() as cur:
                    cur.execute(SCAN)
                    return sum(b.num_rows for b in cur.fetch_record_batch())

            return run

        clients = []
        for port, asked in ((single, []), (one_replica, [(b"x-lake-endpoints", b"many")])):
            client = fl.connect(f"grpc://127.0.0.1:{port}")
            clients.append(
                (
                    client,
                    fl.FlightCallOptions(headers=[client.authenticate_basic_token(USER, PASSWORD), *asked]),
                )
            )
        unsplit, splitting = info_latency(clients, args.pin_runs)
        print(
            f"point query GetFlightInfo (median of {args.pin_runs}, round-robin): max_endpoints=1 "
            f"{unsplit * 1000:.3f} ms, max_endpoints={args.parts} {splitting * 1000:.3f} ms "
            f"({(splitting / unsplit - 1) * 100:+.1f}%)"
        )
        plain = fl.connect(f"grpc://127.0.0.1:{bare}")

        def bare_raw() -> int:
            return sum(c.data.num_rows for c in plain.do_get(fl.Ticket(SCAN.encode())))

        import psutil

        servers = {port: psutil.Process(proc.pid) for proc, port in procs}

        def cpu(ports: tuple[int, ...]) -> tuple[float, float]:
            """(servers' CPU seconds, this client's CPU seconds) so far."""
            own = psutil.Process().cpu_times()
            return (
                sum(servers[p].cpu_times().user + servers[p].cpu_times().system for p in ports),
                own.user + own.system,
            )

        def pyarrow_at_locations(port: int) -> Callable[[], int]:
            """Our server read by the bare server's client: GetFlightInfo, then each endpoint's
            DoGet where its location says (isolates the server from ADBC's client)."""
            from lake_platform.flight import proto

            client = fl.connect(f"grpc://127.0.0.1:{port}")
            options = fl.FlightCallOptions(headers=[client.authenticate_basic_token(USER, PASSWORD)])
            descriptor = fl.FlightDescriptor.for_command(proto.pack(proto.CommandStatementQuery(query=SCAN)))
            readers: dict[str, fl.FlightClient] = {}

            def run() -> int:
                n = 0
                for endpoint in client.get_flight_info(descriptor, options).endpoints:
                    uri = endpoint.locations[0].uri.decode() if endpoint.locations else ""
                    where = readers.setdefault(uri, fl.connect(uri)) if uri else client
                    n += sum(c.data.num_rows for c in where.do_get(endpoint.ticket, options))
                return n

            return run

        rows = {}
        measured = [("bare/pyarrow, 1 stream", bare_raw, (bare,))]
        measured += [(label, adbc(ports[0], "endpoints" in label), ports) for label, ports in started]
        data_single = dict(started)["data plane/adbc, 1 endpoint"]
        measured.append(("data plane/pyarrow, 1 endpoint", pyarrow_at_locations(data_single[0]), data_single))
        for label, fn, ports in measured:
            before = cpu(ports)
            seconds, n = timed(fn, args.runs)
            after = cpu(ports)
            rows[label] = seconds
            runs = args.runs + 1  # timed() warms up once
            print(
                f"{label:52s} {seconds * 1000:8.1f} ms  ({n:,} rows, {nbytes / seconds / 1e6:,.0f} MB/s); "
                f"CPU per run: server {(after[0] - before[0]) / runs * 1000:6.0f} ms, "
                f"client {(after[1] - before[1]) / runs * 1000:6.0f} ms"
            )
        base = rows["bare/pyarrow, 1 stream"]
        print("ratios (throughput):")
        print(
            f"  data plane/pyarrow, 1 endpoint / bare (same client){'':9s} "
            f"{base / rows['data plane/pyarrow, 1 endpoint']:.2f}"
        )
        for plane in ("ours/adbc", "data plane/adbc"):
            one = rows[f"{plane}, 1 endpoint"]
            print(f"  {plane}, 1 endpoint / bare{'':28s} {base / one:.2f} (goal >= 0.9)")
            for label in rows:
                if label.startswith(f"{plane}, ") and label != f"{plane}, 1 endpoint":
                    tail = label.removeprefix(f"{plane}, ")
                    print(
                        f"  {plane}, {tail:40s} / 1 endpoint {one / rows[label]:.2f} (goal >= 1.5), "
                        f"/ bare {base / rows[label]:.2f}"
                    )
    finally:
        for proc, _ in procs:
            proc.terminate()
            proc.wait(10)
    if args.spool_rows:
        spool_part(args.spool_rows)


def spool_part(rows: int) -> None:
    """A spooled result of ``rows`` rows vs the same result streamed: server peak RSS, time to
    first batch, total time (one replica)."""
    from pathlib import Path as P

    home = P(tempfile.mkdtemp(prefix="lake-bench-spool-")) / "home"
    atexit.register(shutil.rmtree, home.parent, True)
    t = time.perf_counter()
    nbytes = build(home, rows)
    print(
        f"spool table: {rows:,} rows, {nbytes / 1e9:.2f} GB in Arrow, built in {time.perf_counter() - t:.1f}s"
    )
    from lake_platform.flight import proto

    firsts: dict[str, float] = {}
    for label, options in (
        ("streamed", ["spool=false"]),
        ("spooled", ["spool_min_rows=1"]),  # by size, the default settings: one endpoint
    ):
        proc, port = start("--serve-ours", home, *options)
        try:
            client = fl.connect(f"grpc://127.0.0.1:{port}")
            opts = fl.FlightCallOptions(headers=[client.authenticate_basic_token(USER, PASSWORD)])
            count = "SELECT count(*) FROM w.ns.trips"
            client.get_flight_info(
                fl.FlightDescriptor.for_command(proto.pack(proto.CommandStatementQuery(query=count))), opts
            )
            _reset_hwm(proc.pid)
            descriptor = fl.FlightDescriptor.for_command(proto.pack(proto.CommandStatementQuery(query=SCAN)))
            t = time.perf_counter()
            info = client.get_flight_info(descriptor, opts)
            first = None
            n = 0
            for endpoint in info.endpoints:
                for chunk in client.do_get(endpoint.ticket, opts):
                    if first is None:
                        first = time.perf_counter() - t
                    n += chunk.data.num_rows
            total = time.perf_counter() - t
            firsts[label] = first or 0.0
            peak = _vm_hwm(proc.pid)
            print(
                f"{label:9s} {len(info.endpoints):4d} endpoints: first batch {first or 0:6.2f} s, "
                f"total {total:6.2f} s "
                f"({n:,} rows, {nbytes / total / 1e6:,.0f} MB/s), server peak RSS {peak >> 20} MiB"
            )
        finally:
            proc.terminate()
            proc.wait(10)
    print(
        f"time to the first batch, spooled / streamed: {firsts['spooled'] / firsts['streamed']:.2f} "
        "(goal <= 1.5)"
    )
    shutil.rmtree(home.parent, ignore_errors=True)


def _vm_hwm(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    return 0


def _reset_hwm(pid: int) -> None:
    Path(f"/proc/{pid}/clear_refs").write_text("5")


if __name__ == "__main__":
    if len(sys.argv) > 2 and sys.argv[1] == "--serve-ours":
        serve_ours(sys.argv[2], *sys.argv[3:])
    elif len(sys.argv) > 2 and sys.argv[1] == "--serve-before":
        serve_before(sys.argv[2])
    elif len(sys.argv) > 2 and sys.argv[1] == "--serve-bare-sql":
        serve_bare_sql(sys.argv[2])
    elif len(sys.argv) > 2 and sys.argv[1] == "--serve-bare":
        serve_bare(sys.argv[2])
    elif len(sys.argv) > 2 and sys.argv[1] in ("--serve-unpinned", "--serve-static", "--serve-fresh"):
        serve_variant(sys.argv[2], sys.argv[1].removeprefix("--serve-"))
    else:
        main()
