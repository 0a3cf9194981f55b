"""Point queries on an indexed column: through ADBC (end to end), in process, and Lance alone.

    python bench/indexes.py [--rows 5000000] [--runs 50] [--before CHECKOUT] [--variant NAME:SETTING=VALUE]
                            [--floor] [--paired-runs 150] [--idle-ms 0]

Builds a Lance table through the catalog (``_common``'s generated rows: id int64, ts, category,
value, payload), then measures a point query ``SELECT * FROM w.ns.trips WHERE id = <n>`` (a
different id each run but where said, so no result is cached anywhere):

- through ADBC against our Flight SQL endpoint (its own process on loopback): the whole round
  trip an analyst sees, five ways: a new cursor per query (ADBC prepares, GetFlightInfo, DoGet,
  closes: four RPCs); a new cursor per run of the issue's own query ``WHERE id = 4242`` (the
  same four RPCs over the server's kept plan); one cursor with the query prepared once and the
  id bound per run (``WHERE id = ?``: DoPut of the parameters, GetFlightInfo, DoGet); a new
  cursor per query with the id bound (``WHERE id = ?`` prepared, bound, run and closed every
  time: five RPCs, what a JDBC ``PreparedStatement`` per query does); one
  cursor re-running the issue's own query ``WHERE id = 4242`` (ADBC keeps it prepared:
  GetFlightInfo, DoGet; the server reuses its kept plan of that SQL on that snapshot and scans
  every time: no result is reused);
- in process through the query engine (plan + stream, DataFusion over the Lance provider);
- in Lance alone (``dataset.to_table(filter=...)``);
- the bytes Lance read for one point query (its IO statistics);

first without an index, then after ``catalog.indexes.create_index(..., "id", "btree")`` (a registry
commit; the endpoint is restarted so it plans against the new version at once). Also reports
the index build time and size. Medians; the machine is shared, so figures are a floor.

``--before CHECKOUT``: then also our endpoint next to the same endpoint from another checkout
(e.g. the previous release), both on the indexed table, the five ADBC ways interleaved (each
round visits both servers in a new random order, so they share the load): medians and the
median of the per-round ratios, the figure to quote for a change smaller than the run-to-run
noise.

``--variant NAME:SETTING=VALUE[,...]`` (repeatable): our endpoint with these Flight settings
(``lake_platform.settings.flight``' field names) paired the same way, e.g.
``dp:data_listen=127.0.0.1:0`` (the data plane serving the DoGet).

``--floor``: also pair the floor, a Flight SQL server that does no work (``FloorServer``:
pyarrow.flight's C++ transport, no authentication, every statement answered with the one row
precomputed at start): what ADBC and the transport alone take on this machine for each of the
five ways, so ``ours - floor`` is what our endpoint adds (the query included). It also pairs
Lance alone (``to_table(filter=...)`` in this process) and prints ``floor + Lance alone`` per
round: what a server that added nothing but the lookup, overlapping none of it, would take.

``--idle-ms N``: in the paired rounds, an idle pause of N ms before each measured query (on
every side), as an analyst's queries come after think time rather than back to back. Waking
idle threads is not free on a VM: Lance's own lookup takes about twice as long after 10 ms
idle as back to back, and a server whose query crosses more threads pays that more often.
"""

from __future__ import annotations

import argparse
import atexit
import os
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

import pyarrow as pa
import pyarrow.flight as fl

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import _common as c  # bench/ is first on sys.path when a script runs

USER, PASSWORD = "bench", "bench-password"
TABLE = "p.w.ns.trips"
POINT = "SELECT * FROM w.ns.trips WHERE id = {}"
#: The issue's own point query: ``WHERE id = 4242``.
ISSUE_ID = 4242
FLIGHT = Path(__file__).resolve().parent / "flight.py"


def build(home: Path, rows: int) -> int:
    from lake_platform.catalog.catalog import Catalog
    from lake_platform.settings import load_settings

    catalog = Catalog(load_settings(home=home))
    catalog.containers.create_project("p")
    catalog.containers.create_warehouse("p.w")
    catalog.containers.create_namespace("p.w.ns")
    tally = c.Tally()
    catalog.tables.create_table(TABLE, c.make_reader(rows, 500_000, seed=0, tally=tally))
    # The index path, not the snapshot cache: a table queried again and again would otherwise be
    # admitted (``cache=auto``) and scanned in memory.
    catalog.policies.set_policy(TABLE, {"cache": "off"})
    catalog.close()
    return tally.nbytes


def start_endpoint(
    home: Path, checkout: Path | None = None, options: tuple[str, ...] = ()
) -> tuple[subprocess.Popen[bytes], int]:
    """Our Flight SQL endpoint in its own process (bench/flight.py's server entry point), from
    ``checkout`` when given (its code, through ``PYTHONPATH``); ``options``: ``name=value``
    Flight settings."""
    flight, env = FLIGHT, None
    if checkout is not None:
        flight = checkout.resolve() / "bench" / "flight.py"
        env = {**os.environ, "PYTHONPATH": str(checkout.resolve())}
    proc = c.spawn(
        [sys.executable, str(flight), "--serve-ours", str(home), *options], stdout=subprocess.PIPE, env=env
    )
    assert proc.stdout is not None
    return proc, int(proc.stdout.readline())


def median_ms(fn: Callable[[int], int], ids: list[int]) -> tuple[float, float]:
    """(median, p90) milliseconds of ``fn(id)`` over ``ids`` after one warm-up call."""
    fn(ids[0])
    times = []
    for i in ids:
        t = time.perf_counter()
        assert fn(i) == 1
        times.append((time.perf_counter() - t) * 1000)
    times.sort()
    return statistics.median(times), times[int(len(times) * 0.9) - 1]


def measure(home: Path, rows: int, runs: int, label: str) -> dict[str, Any]:
    from lake_platform.catalog.catalog import Catalog
    from lake_platform.engine.indexes import scan_io
    from lake_platform.query.engine import QueryEngine
    from lake_platform.query.snapshot import load_snapshot
    from lake_platform.settings import load_settings

    rng = random.Random(label)
    ids = [rng.randrange(rows) for _ in range(runs)]
    out: dict[str, Any] = {}
    settings = load_settings(home=home)
    with Catalog(settings) as catalog:
        ds = catalog.reads.open_table(TABLE).dataset
        out["lance"] = median_ms(lambda i: ds.to_table(filter=f"id = {i}").num_rows, ids)
        scan_io(ds)
        ds.to_table(filter=f"id = {ids[0]}")
        out["lance_bytes"] = scan_io(ds)[0]
        engine = QueryEngine(settings)
        view = load_snapshot(catalog.store).project("p")

        def in_process(i: int) -> int:
            planned = engine.plan(POINT.format(i), view)
            return sum(b.num_rows for b in engine.stream(planned))

        out["datafusion"] = median_ms(in_process, ids)
        planned = engine.plan(POINT.format(ids[0]), view)
        dataset = engine.dataset(planned.refs[0])
        scan_io(dataset)
        pa.Table.from_batches(list(engine.stream(planned)), schema=planned.schema)
        out["datafusion_bytes"] = scan_io(dataset)[0]
    proc, port = start_endpoint(home)
    try:
        ways = AdbcWays(port)
        for key in ("adbc", "adbc_issue", "adbc_bound", "adbc_new_bound", "adbc_rerun"):
            out[key] = median_ms(getattr(ways, key), ids)
        ways.close()
    finally:
        proc.terminate()
        proc.wait(10)
    return out


class AdbcWays:
    """The point query through ADBC, the five ways the module's docstring names: a new cursor
    per query (``adbc``), one cursor with the id bound per run (``adbc_bound``), a new cursor
    with the id bound per query (``adbc_new_bound``), one cursor
    re-running the issue's own query (``adbc_rerun``); and a new cursor per run of the issue's
    own query (``adbc_issue``: four RPCs, but the server's kept plan). Each returns the rows it
    got.
    ``login``: False for a server without authentication (the floor)."""

    def __init__(self, port: int, login: bool = True) -> None:
        self.conn = c.adbc_connect(port, USER if login else None, PASSWORD)
        self._bound = self.conn.cursor()
        self._rerun = self.conn.cursor()

    def adbc(self, i: int) -> int:
        with self.conn.cursor() as cur:
            cur.execute(POINT.format(i))
            return sum(b.num_rows for b in cur.fetch_record_batch())

    def adbc_bound(self, i: int) -> int:
        self._bound.execute(POINT.format("?"), (i,))
        return sum(b.num_rows for b in self._bound.fetch_record_batch())

    def adbc_new_bound(self, i: int) -> int:
        with self.conn.cursor() as cur:
            cur.execute(POINT.format("?"), (i,))
            return sum(b.num_rows for b in cur.fetch_record_batch())

    def adbc_issue(self, _: int) -> int:
        with self.conn.cursor() as cur:
            cur.execute(POINT.format(ISSUE_ID))
            return sum(b.num_rows for b in cur.fetch_record_batch())

    def adbc_rerun(self, _: int) -> int:
        self._rerun.execute(POINT.format(ISSUE_ID))
        return sum(b.num_rows for b in self._rerun.fetch_record_batch())

    def close(self) -> None:
        self._bound.close()
        self._rerun.close()
        self.conn.close()


class FloorServer(c.SqlInfoServer):
    """A Flight SQL server that does no work: the least any server costs ADBC's five ways.

    It answers what they call (GetSqlInfo at connect; CreatePreparedStatement, with a parameter
    schema for a ``?``; a DoPut of parameters; GetFlightInfo; DoGet; ClosePreparedStatement)
    with the one row ``row`` for every statement, without authentication, parsing or planning."""

    def __init__(self, row: pa.Table) -> None:
        super().__init__()
        self.row = row
        self.schema = row.schema.serialize().to_pybytes()

    def do_action(self, context: Any, action: fl.Action) -> Any:
        from lake_platform.flight import proto

        name, payload = proto.unpack_any(action.body.to_pybytes())
        if name == "ActionCreatePreparedStatementRequest":
            sql = proto.parse(proto.ActionCreatePreparedStatementRequest, payload).query
            params = pa.schema([pa.field(str(i), pa.null()) for i in range(sql.count("?"))])
            result = proto.ActionCreatePreparedStatementResult(
                prepared_statement_handle=sql.encode(),
                dataset_schema=self.schema,
                parameter_schema=params.serialize().to_pybytes(),
            )
            yield fl.Result(proto.pack(result))

    def do_put(self, context: Any, descriptor: fl.FlightDescriptor, reader: Any, writer: Any) -> None:
        from lake_platform.flight import proto

        reader.read_all()
        handle = proto.prepared_handle(descriptor.command)
        result = proto.DoPutPreparedStatementResult(prepared_statement_handle=handle)
        writer.write(pa.py_buffer(result.SerializeToString()))

    def statement_info(self, name: str, payload: bytes, descriptor: fl.FlightDescriptor) -> fl.FlightInfo:
        return fl.FlightInfo(self.row.schema, descriptor, [fl.FlightEndpoint(b"row", [])], -1, -1)

    def statement_stream(self, ticket: bytes) -> fl.RecordBatchStream:
        return fl.RecordBatchStream(self.row)


def serve_floor(home: str) -> None:
    """The floor (``FloorServer``) in this process, answering with the issue's row."""
    from lake_platform.catalog.catalog import Catalog
    from lake_platform.settings import load_settings

    with Catalog(load_settings(home=Path(home))) as catalog:
        row = catalog.reads.open_table(TABLE).dataset.to_table(filter=f"id = {ISSUE_ID}")
    server = FloorServer(row)
    print(server.port, flush=True)
    server.serve()


def start_floor(home: Path) -> tuple[subprocess.Popen[bytes], int]:
    proc = c.spawn([sys.executable, __file__, "--serve-floor", str(home)], stdout=subprocess.PIPE)
    assert proc.stdout is not None
    return proc, int(proc.stdout.readline())


def paired(
    home: Path,
    rows: int,
    runs: int,
    before: Path | None,
    variants: list[str],
    floor: bool = False,
    idle: float = 0.0,
) -> None:
    """``--before`` / ``--variant`` / ``--floor``: the five ADBC ways on this checkout's
    endpoint and on each other side, interleaved (every round visits every side in a new random
    order); with ``floor``, Lance alone in this process as one more side. ``idle``: seconds of
    idle before each measured query."""
    from lake_platform.catalog.catalog import Catalog
    from lake_platform.settings import load_settings

    sides: dict[str, tuple[Path | None, tuple[str, ...]]] = {"ours": (None, ())}
    if before is not None:
        sides["before"] = (before, ())
    for spec in variants:  # an empty option list is a second, identical endpoint (A/A)
        name, _, opts = spec.partition(":")
        sides[name] = (None, tuple(o for o in opts.split(",") if o))
    servers: dict[str, tuple[subprocess.Popen[bytes], int]] = {}
    try:
        for name, (checkout, options) in sides.items():
            servers[name] = start_endpoint(home, checkout, options)
        if floor:
            servers["floor"] = start_floor(home)
        ways = {name: AdbcWays(port, login=name != "floor") for name, (_, port) in servers.items()}
        dataset = None
        if floor:
            with Catalog(load_settings(home=home)) as catalog:
                dataset = catalog.reads.open_table(TABLE).dataset
        rng = random.Random("paired")
        others = [side for side in servers if side != "ours"]
        idled = f", {idle * 1000:g} ms idle before each query" if idle else ""
        print(f"paired (btree on id; {runs} interleaved rounds{idled}): median ms; ours / each other side")
        print(
            f"  {'':34} {'ours':>8}"
            + "".join(f" {side:>8}" for side in others)
            + (f" {'lance':>8}" if dataset is not None else "")
            + "".join(f" {'/' + side:>10}" for side in others)
        )
        for kind, name in (
            ("adbc", "a new cursor per query"),
            ("adbc_issue", "a new cursor, id = 4242 each time"),
            ("adbc_bound", "one cursor, id = ? bound"),
            ("adbc_new_bound", "a new cursor, id = ? bound"),
            ("adbc_rerun", "one cursor, id = 4242 re-run"),
        ):
            fns = {side: getattr(ways[side], kind) for side in servers}
            if dataset is not None:
                fns["lance"] = lambda i, ds=dataset: ds.to_table(filter=f"id = {i}").num_rows
            times: dict[str, list[float]] = {side: [] for side in fns}
            for fn in fns.values():
                for _ in range(5):  # warm-up: the plans kept, early starts known
                    fn(ISSUE_ID)
            for _ in range(runs):
                i = rng.randrange(rows)
                for side in rng.sample(list(fns), len(fns)):
                    if idle:
                        time.sleep(idle)  # think time, not synchronization: nothing is awaited
                    t = time.perf_counter()
                    assert fns[side](i) == 1
                    times[side].append(time.perf_counter() - t)
            ratios = [
                statistics.median(a / b for a, b in zip(times["ours"], times[side], strict=True))
                for side in others
            ]
            print(
                f"  {name:34}"
                + "".join(f" {statistics.median(times[side]) * 1000:8.2f}" for side in fns)
                + "".join(f" {ratio:10.3f}" for ratio in ratios)
            )
            if floor:
                added = statistics.median(a - b for a, b in zip(times["ours"], times["floor"], strict=True))
                bound = statistics.median(a + b for a, b in zip(times["floor"], times["lance"], strict=True))
                print(
                    f"  {'':34} ours - floor (median per round): {added * 1000:.2f} ms; "
                    f"floor + Lance alone: {bound * 1000:.2f} ms"
                )
        for side in ways.values():
            side.close()
    finally:
        c.terminate(proc for proc, _ in servers.values())


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rows", type=int, default=5_000_000)
    parser.add_argument("--runs", type=int, default=50)
    parser.add_argument("--before", type=Path, help="also pair our endpoint with this checkout's")
    parser.add_argument(
        "--variant",
        action="append",
        default=[],
        metavar="NAME:SETTING=VALUE[,...]",
        help="also pair our endpoint with itself under these Flight settings "
        "(e.g. dp:data_listen=127.0.0.1:0; 'twin:' an identical one)",
    )
    parser.add_argument(
        "--floor", action="store_true", help="also pair a Flight SQL server that does no work (FloorServer)"
    )
    parser.add_argument(
        "--paired-runs", type=int, default=150, help="--before/--variant/--floor: interleaved rounds"
    )
    parser.add_argument(
        "--idle-ms",
        type=float,
        default=0.0,
        help="--before/--variant/--floor: idle milliseconds before each measured query",
    )
    args = parser.parse_args()
    warnings.simplefilter("ignore")

    from lake_platform.catalog.catalog import Catalog
    from lake_platform.engine.lance_engine import version_stats
    from lake_platform.settings import load_settings

    print(c.machine_line())
    home = Path(tempfile.mkdtemp(prefix="lake-bench-indexes-")) / "home"
    atexit.register(shutil.rmtree, home.parent, True)  # the table is hundreds of MB: never left behind
    t = time.perf_counter()
    nbytes = build(home, args.rows)
    with Catalog(load_settings(home=home)) as catalog:
        stats = version_stats(catalog.reads.open_table(TABLE).dataset)
    print(
        f"table: {args.rows:,} rows, {nbytes / 1e6:,.0f} MB in Arrow, {stats.data_bytes / 1e6:,.0f} MB "
        f"on disk, {stats.fragments} fragments; built in {time.perf_counter() - t:.1f}s"
    )
    before = measure(home, args.rows, args.runs, "before")
    with Catalog(load_settings(home=home)) as catalog:
        t = time.perf_counter()
        result = catalog.indexes.create_index(TABLE, "id", "btree")
        built = time.perf_counter() - t
        (info,) = catalog.indexes.list_indexes(TABLE)
        size = sum(d.total_size_bytes for d in catalog.reads.open_table(TABLE).dataset.describe_indices())
    print(
        f"index: btree on id built in {built:.2f}s as registry version {result.version} "
        f"({info.rows_indexed:,} rows, {size / 1e6:.1f} MB)"
    )
    after = measure(home, args.rows, args.runs, "after")
    print(f"point query, median (p90) of {args.runs} distinct ids, ms:")
    print(f"  {'':34} {'no index':>18} {'btree on id':>18}")
    for key, name in (
        ("adbc", "ADBC, a new cursor per query"),
        ("adbc_issue", "ADBC, a new cursor, id = 4242"),
        ("adbc_bound", "ADBC, one cursor, id = ? bound"),
        ("adbc_new_bound", "ADBC, a new cursor, id = ? bound"),
        ("adbc_rerun", "ADBC, one cursor, id = 4242 re-run"),
        ("datafusion", "in process (query engine)"),
        ("lance", "Lance alone (to_table filter)"),
    ):
        b, a = before[key], after[key]
        print(f"  {name:34} {b[0]:9.2f} ({b[1]:6.2f}) {a[0]:9.2f} ({a[1]:6.2f})")
    print("bytes read by one point query (Lance IO stats):")
    for key, name in (("datafusion_bytes", "in process (query engine)"), ("lance_bytes", "Lance alone")):
        print(
            f"  {name:34} {before[key] / 1e6:9.2f} MB -> {after[key] / 1e3:9.1f} kB "
            f"({after[key] / stats.data_bytes * 100:.3f}% of the table's {stats.data_bytes / 1e6:.0f} MB)"
        )
    print("goal: ADBC point query on an indexed column <= 5 ms median:")
    for key, how in (
        ("adbc", "a new cursor per query"),
        ("adbc_issue", "the issue's query, a new cursor each time"),
        ("adbc_bound", "a prepared query, id bound per run"),
        ("adbc_new_bound", "a new cursor per query, id bound"),
        ("adbc_rerun", "the issue's query re-run on one cursor"),
    ):
        goal = after[key][0]
        print(f"  {how:40} {goal:6.2f} ms -> {'MEETS' if goal <= 5 else 'MISSES'}")
    if args.before is not None or args.variant or args.floor:
        paired(home, args.rows, args.paired_runs, args.before, args.variant, args.floor, args.idle_ms / 1000)
    print(c.load_line())


if __name__ == "__main__":
    if len(sys.argv) > 2 and sys.argv[1] == "--serve-floor":
        serve_floor(sys.argv[2])
    else:
        main()
