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

Our server runs as its own process (``python -m lake_platform.cli serve-rest``); each reference
runs in a process of its own too. Prints figures only; asserts nothing.

    python bench/rest.py [--appends 200] [--proc-appends 50] [--proc-runs 5] [--describes 150]
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import statistics
import time

import _common as common
import lance
import pyarrow as pa
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


def oracle_process(root: str, port: int, props: dict[str, str], stop: mp.synchronize.Event) -> None:
    from lance.namespace import RestAdapter

    adapter = RestAdapter("dir", {"root": root, **props}, host="127.0.0.1", port=port)
    adapter.start()
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
    args = ap.parse_args()
    print(common.machine_line())
    print(common.load_line())
    with common.scratch_dir("bench-rest-") as tmp:
        home = tmp / "home"
        catalog, token = common.rest_lake(home)
        ours_port = common._free_port()
        server = common.serve_rest(home, ours_port)
        ctx = mp.get_context("spawn")
        stop = ctx.Event()
        urls = {OURS: f"http://127.0.0.1:{ours_port}"}
        refs = []
        for name, props in ((DIR, {}), (DIR_MANAGED, MANAGED)):
            root, port = tmp / name.replace(" ", "_"), common._free_port()
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
    print(common.load_line())


if __name__ == "__main__":
    main()
