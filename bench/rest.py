"""Lance REST server benchmark: commits/s and DescribeTable latency through `lake serve-rest`,
against the reference server shipped in pylance (``lance.namespace.RestAdapter("dir")``), in its
default configuration and with managed versioning on.

Two references, because a pylance append is not the same exchange against each: against
``RestAdapter("dir")`` as configured by default the client asks one question (DescribeTable) and
commits the manifest to storage itself; against a server that answers
``managed_versioning=true`` (ours, always: the registry is the authority for every commit) it
asks three (DescribeTable, ListTableVersions, CreateTableVersion) and the server commits.
``RestAdapter("dir", table_version_tracking_enabled=true)`` is the reference doing that same
exchange, so the two ratios separate what the protocol costs from what the server costs.

- (a) 100-row appends with pylance's RestNamespace as ``namespace_client=``: one client, the
  three servers taking turns in chunks of 10 appends (same load), then 4 client processes at once
  per server (``--proc-runs`` runs each, the servers taking turns; the median of the runs'
  ratios, since a few conflict retries move a single short run a lot); plus the same appends
  through the in-process catalog namespace (``LakeNamespace``) to print the latency REST adds
  per commit.
- (b) DescribeTable latency (p50/p99) with 8 client processes, each a keep-alive session.
- (c) QueryTable of a whole table through pylance's ``RestNamespace.query_table`` (one Arrow IPC
  file, ours streamed): each server's peak RSS (VmHWM, a fresh server per size) answering 1M and
  10M rows, side by side (the bar: ours at 10M within 2x ours at 1M), then the throughput of
  10M-row answers against ``RestAdapter("dir")`` over the same rows (the servers taking turns,
  ``--query-runs`` each; the bar: at least 0.8x). Our server runs with the snapshot cache off
  (``LAKE_FLIGHT_CACHE_BYTES=0``), as the reference has none: repeated runs would otherwise be
  answered from memory.

Our server runs as its own process (``python -m lake_platform.cli serve-rest``); each reference
runs in a process of its own too. Prints figures only; asserts nothing.

    python bench/rest.py [--appends 200] [--proc-appends 50] [--proc-runs 5] [--describes 150]
                         [--sections commits,query] [--query-rows 1000000,10000000] [--query-runs 3]
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import _common as common
import lance
import pyarrow as pa
import pyarrow.compute as pc
import requests
from lance.namespace import RestNamespace

from lake_platform.catalog.pylance_namespace import LakeNamespace

T = ["p", "w", "ns", "t"]


def batch(i: int) -> pa.Table:
    return pa.table({"id": pa.array(range(i * 100, i * 100 + 100), pa.int64()), "v": [f"r{i}"] * 100})


#: The reference with managed versioning: Lance's directory namespace tracks table versions and
#: its ``CreateTableVersion`` publishes the client's staged manifest (put-if-not-exists).
#: Inline optimization on: it keeps the namespace's own manifest table compacted, the faster of
#: its two settings here (its commits still slow down as a table's history grows).
MANAGED = {
    "manifest_enabled": "true",
    "table_version_tracking_enabled": "true",
    "inline_optimization_enabled": "true",
}
DIR, DIR_MANAGED, OURS = "RestAdapter(dir)", "RestAdapter(dir, managed)", "lake REST"


def oracle_process(root: str, port: int, props: dict[str, str], stop, ready=None) -> None:  # type: ignore[no-untyped-def]
    from lance.namespace import RestAdapter

    adapter = RestAdapter("dir", {"root": root, **props}, host="127.0.0.1", port=port)
    adapter.start()
    if ready is not None:
        ready.put(os.getpid())
    stop.wait()
    adapter.stop()


def appender(url: str, token: str, table_id: list[str], first: int, count: int, start, out) -> None:  # type: ignore[no-untyped-def]
    ns = RestNamespace(uri=url, **{"header.Authorization": f"Bearer {token}"})
    out.put("ready")
    start.wait()
    t0 = time.time()
    for i in range(first, first + count):
        lance.write_dataset(batch(i), namespace_client=ns, table_id=table_id, mode="append")
    out.put((t0, time.time()))


def describer(url: str, token: str, path: str, count: int, start, out) -> None:  # type: ignore[no-untyped-def]
    session = requests.Session()
    session.headers["Authorization"] = f"Bearer {token}"
    session.post(url + path, json={}, timeout=30).raise_for_status()  # warm the connection
    out.put("ready")
    start.wait()
    lat = []
    t0 = time.time()
    for _ in range(count):
        t1 = time.perf_counter()
        session.post(url + path, json={}, timeout=30).raise_for_status()
        lat.append(time.perf_counter() - t1)
    out.put((t0, time.time(), lat))


def in_processes(target, args_of, n: int) -> tuple[float, list]:  # type: ignore[no-untyped-def]
    ctx = mp.get_context("spawn")
    start, out = ctx.Event(), ctx.Queue()
    procs = [ctx.Process(target=target, args=(*args_of(w), start, out)) for w in range(n)]
    for p in procs:
        p.start()
    for _ in procs:  # every interpreter has imported lance and connected: start together
        assert out.get(timeout=600) == "ready"
    start.set()
    results = [out.get(timeout=900) for _ in procs]
    for p in procs:
        p.join()
    # wall time from the first start to the last end, measured by the workers themselves
    wall = max(r[1] for r in results) - min(r[0] for r in results)
    return wall, results


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--appends", type=int, default=200, help="single-client appends per side")
    ap.add_argument("--proc-appends", type=int, default=50, help="appends per process (4 processes)")
    ap.add_argument("--proc-runs", type=int, default=5, help="4-process runs per server, taking turns")
    ap.add_argument("--describes", type=int, default=150, help="DescribeTable calls per client (8 clients)")
    ap.add_argument("--sections", default="commits,query", help="which to run: commits (a, a', b), query (c)")
    ap.add_argument("--query-rows", default="1000000,10000000", help="QueryTable sizes, small then large")
    ap.add_argument("--query-runs", type=int, default=3, help="10M-row answers per server, taking turns")
    args = ap.parse_args()
    print(common.machine_line())
    print(common.load_line())
    sections = set(args.sections.split(","))
    if "commits" in sections:
        commits(args)
    if "query" in sections:
        query(args)
    print(common.load_line())


def commits(args: argparse.Namespace) -> None:
    with common.scratch_dir("bench-rest-") as tmp:
        home = tmp / "home"
        catalog, token = common.rest_lake(home)
        ours_port = common.free_port()
        server = common.serve_rest(home, ours_port)
        ctx = mp.get_context("spawn")
        stop = ctx.Event()
        urls = {OURS: f"http://127.0.0.1:{ours_port}"}
        refs = []
        for name, props in ((DIR, {}), (DIR_MANAGED, MANAGED)):
            root, port = tmp / name.replace(" ", "_"), common.free_port()
            root.mkdir()
            refs.append(ctx.Process(target=oracle_process, args=(str(root), port, props, stop)))
            refs[-1].start()
            urls[name] = f"http://127.0.0.1:{port}"
        try:
            for name, url in urls.items():
                common.wait_rest(url)
                if name != OURS:
                    for ident in ("p", "p$w", "p$w$ns"):
                        requests.post(
                            f"{url}/v1/namespace/{ident}/create", json={}, timeout=30
                        ).raise_for_status()
            run(args, catalog, urls, token)
        finally:
            server.terminate()
            server.wait(30)
            stop.set()
            for ref in refs:
                ref.join(30)
            catalog.close()


def run(args: argparse.Namespace, catalog, urls: dict[str, str], token: str) -> None:  # type: ignore[no-untyped-def]
    tokens = {OURS: token, DIR: "", DIR_MANAGED: ""}
    clients: dict[str, object] = {
        name: RestNamespace(uri=url, **({"header.Authorization": f"Bearer {token}"} if name == OURS else {}))
        for name, url in urls.items()
    }
    clients["in-process LakeNamespace"] = LakeNamespace(catalog)
    tables = dict.fromkeys(clients, T) | {"in-process LakeNamespace": ["p", "w", "ns", "local"]}
    for name, ns in clients.items():
        lance.write_dataset(batch(0), namespace_client=ns, table_id=tables[name], mode="create")
    spent = dict.fromkeys(clients, 0.0)
    first_half: dict[str, float] = {}
    done = 0
    while done < args.appends:
        chunk = min(10, args.appends - done)
        for name, ns in clients.items():
            t0 = time.perf_counter()
            for i in range(done, done + chunk):
                lance.write_dataset(batch(i + 1), namespace_client=ns, table_id=tables[name], mode="append")
            spent[name] += time.perf_counter() - t0
        done += chunk
        if not first_half and done >= args.appends // 2:
            first_half = dict(spent)
    print(f"\n(a) {args.appends} appends of 100 rows, one client, servers taking turns in chunks of 10")
    for name in clients:
        rate, ms = args.appends / spent[name], 1000 * spent[name] / args.appends
        print(f"  {name:26s} {rate:7.1f} commits/s  {ms:7.1f} ms/commit")
    for ref, what in (
        (DIR, "the client commits to storage: 1 request"),
        (DIR_MANAGED, "the same 3 requests"),
    ):
        halves = [
            first_half[ref] / first_half[OURS],
            (spent[ref] - first_half[ref]) / (spent[OURS] - first_half[OURS]),
        ]
        print(
            f"  lake REST vs {ref}: {spent[ref] / spent[OURS]:.2f}x the reference's commit rate "
            f"(first half {halves[0]:.2f}x, second {halves[1]:.2f}x; {what})"
        )
    added = (spent[OURS] - spent["in-process LakeNamespace"]) / args.appends
    print(f"  latency REST adds per commit over the in-process catalog: {1000 * added:.1f} ms")

    n, runs = args.proc_appends, args.proc_runs
    print(f"\n(a') 4 client processes x {n} appends at once, {runs} runs per server, taking turns")
    rates: dict[str, list[float]] = {name: [] for name in urls}
    for run_no in range(runs):
        for name, url in urls.items():
            first = 1000 + run_no * 4 * n

            def args_of(w: int, u: str = url, k: str = tokens[name], f: int = first) -> tuple:
                return (u, k, T, f + w * n, n)

            wall, _ = in_processes(appender, args_of, 4)
            rates[name].append(4 * n / wall)
    for name, found in rates.items():
        shown = ", ".join(f"{r:.1f}" for r in found)
        print(f"  {name:26s} {statistics.median(found):7.1f} commits/s median ({shown})")
    for ref in (DIR, DIR_MANAGED):
        per_run = [a / b for a, b in zip(rates[OURS], rates[ref], strict=True)]
        print(
            f"  lake REST vs {ref}: {statistics.median(per_run):.2f}x median of the runs' "
            f"ratios ({', '.join(f'{r:.2f}' for r in per_run)})"
        )
    print("  (a few conflict retries move one run a lot)")
    snap = catalog.reads.open_table("p.w.ns.t")
    expected = 100 * (1 + args.appends + 4 * n * runs)
    print(f"  registry check: version {snap.version}, rows {snap.count_rows()} (expected {expected})")

    k = args.describes
    print(f"\n(b) DescribeTable, 8 client processes x {k} calls (keep-alive)")
    for name, url in urls.items():
        wall, lats = in_processes(
            describer, lambda w, u=url, t=tokens[name] or "x": (u, t, "/v1/table/p$w$ns$t/describe", k), 8
        )
        flat = [x for r in lats for x in r[2]]
        print(
            f"  {name:26s} p50 {1000 * pct(flat, 0.5):6.1f} ms  p99 {1000 * pct(flat, 0.99):6.1f} ms  "
            f"{len(flat) / wall:7.0f} calls/s"
        )
    print()


# -- (c) QueryTable: memory and throughput of whole-table answers ---------------------------------


def numbers(rows: int) -> Iterator[pa.RecordBatch]:
    """``id`` 0..rows-1 and ``v`` = id / 2: 16 bytes a row, sums known exactly."""
    for start in range(0, rows, 1 << 20):
        ids = pa.array(range(start, min(rows, start + (1 << 20))), pa.int64())
        yield pa.record_batch({"id": ids, "v": pc.divide(pc.cast(ids, pa.float64()), 2.0)})


def peak_rss(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError("no VmHWM")


def serve_ours(home: Path) -> tuple[object, str]:
    port = common.free_port()
    env = {**os.environ, "LAKE_HOME": str(home), "LAKE_REST_PORT": str(port), "LAKE_FLIGHT_CACHE_BYTES": "0"}
    proc = common.spawn(
        [sys.executable, "-m", "lake_platform.cli", "serve-rest"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}"
    common.wait_rest(url)
    return proc, url


def serve_reference(root: Path) -> tuple[int, str, object, object]:
    ctx = mp.get_context("spawn")
    stop, ready = ctx.Event(), ctx.Queue()
    port = common.free_port()
    proc = ctx.Process(target=oracle_process, args=(str(root), port, {}, stop, ready))
    proc.start()
    pid = ready.get(timeout=120)
    url = f"http://127.0.0.1:{port}"
    common.wait_rest(url)
    return pid, url, stop, proc


def read_all(ns: RestNamespace, table: str) -> tuple[float, int, float]:
    """(seconds, rows, sum of v) of one whole-table query_table."""
    t0 = time.perf_counter()
    data = ns.query_table({"id": ["p", "w", "ns", table], "vector": {}, "k": 0}).data
    seconds = time.perf_counter() - t0
    answer = pa.ipc.open_file(pa.BufferReader(data)).read_all()
    return seconds, answer.num_rows, pc.sum(answer.column("v")).as_py()


def query(args: argparse.Namespace) -> None:
    sizes = [int(n) for n in args.query_rows.split(",")]
    tables = {n: f"t{n}" for n in sizes}
    schema = pa.schema([("id", pa.int64()), ("v", pa.float64())])
    with common.scratch_dir("bench-rest-query-") as tmp:
        home, root = tmp / "home", tmp / "reference"
        root.mkdir()
        catalog, token = common.rest_lake(home)
        ref_pid, ref_url, ref_stop, ref_proc = serve_reference(root)
        for ident in ("p", "p$w", "p$w$ns"):
            requests.post(f"{ref_url}/v1/namespace/{ident}/create", json={}, timeout=30).raise_for_status()
        ref_ns = RestNamespace(uri=ref_url)
        for n, name in tables.items():
            catalog.tables.create_table(
                f"p.w.ns.{name}", pa.RecordBatchReader.from_batches(schema, numbers(n))
            )
            reader = pa.RecordBatchReader.from_batches(schema, numbers(n))
            lance.write_dataset(
                reader, namespace_client=ref_ns, table_id=["p", "w", "ns", name], mode="create"
            )
        catalog.close()
        ref_stop.set()
        ref_proc.join(30)
        print("\n(c) QueryTable of a whole table (id int64, v float64) through pylance's query_table")
        print(f"  {'rows':>10s}  {'ours peak RSS':>14s}  {'reference peak RSS':>19s}")
        peaks: dict[int, tuple[int, int]] = {}
        for n, name in tables.items():
            proc, url = serve_ours(home)  # a fresh server per size: its peak is this answer's
            ns = RestNamespace(uri=url, **{"header.Authorization": f"Bearer {token}"})
            _, rows, total = read_all(ns, name)
            assert (rows, total) == (n, n * (n - 1) / 4), (rows, total)
            ours = peak_rss(proc.pid)  # type: ignore[attr-defined]
            common.terminate([proc])  # type: ignore[list-item]
            pid, url, stop, ref = serve_reference(root)
            _, rows, total = read_all(RestNamespace(uri=url), name)
            assert (rows, total) == (n, n * (n - 1) / 4), (rows, total)
            peaks[n] = (ours, peak_rss(pid))
            stop.set()
            ref.join(30)  # type: ignore[attr-defined]
            print(f"  {n:>10,d}  {ours / 2**20:10.0f} MiB  {peaks[n][1] / 2**20:15.0f} MiB")
        small, large = sizes[0], sizes[-1]
        growth = peaks[large][0] / peaks[small][0]
        print(f"  ours at {large:,d} / ours at {small:,d}: {growth:.2f}x (bar: <= 2x)")

        big = tables[large]
        proc, url = serve_ours(home)
        pid, ref_url, stop, ref = serve_reference(root)
        clients = {
            OURS: RestNamespace(uri=url, **{"header.Authorization": f"Bearer {token}"}),
            DIR: RestNamespace(uri=ref_url),
        }
        seconds: dict[str, list[float]] = {name: [] for name in clients}
        for ns in clients.values():  # warm: the table opened, the connection made
            ns.query_table({"id": ["p", "w", "ns", big], "vector": {}, "k": 10})
        try:
            for _ in range(args.query_runs):
                for name, ns in clients.items():
                    took, rows, _ = read_all(ns, big)
                    assert rows == large
                    seconds[name].append(took)
        finally:
            common.terminate([proc])  # type: ignore[list-item]
            stop.set()
            ref.join(30)  # type: ignore[attr-defined]
        print(f"\n  {large:,d}-row answers, {args.query_runs} runs each, servers taking turns")
        for name, runs in seconds.items():
            shown = ", ".join(f"{s:.2f}" for s in runs)
            median = statistics.median(runs)
            print(f"  {name:26s} {median:6.2f} s median ({shown})  {large * 16 / median / 1e6:6.0f} MB/s")
        ratio = statistics.median(seconds[DIR]) / statistics.median(seconds[OURS])
        print(f"  lake REST vs {DIR}: {ratio:.2f}x the reference's throughput (bar: >= 0.8x)")


if __name__ == "__main__":
    main()
