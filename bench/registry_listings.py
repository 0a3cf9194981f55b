"""Registry listings on DynamoDB (moto): what a listing over a kind's 16 buckets takes.

One registry of ``--tables`` tables (100 per namespace, records only: ``lake_platform_tests.
registry.catalog_records``) on the test suite's moto server, then, median of ``--rounds`` each:

- table list of one warehouse (``catalog.reads.list_tables("p.w")``: one merge of 16 buckets);
- table list of one namespace (``list_tables("p.w.ns00000")``: two merges, nested then own);
- a page of 100 of all tables (``all_tables(limit=100)``, as REST's ListTables pages);
- the DynamoDB requests each makes, and one bare Query of a bucket (boto3 straight to moto): moto
  serves one request at a time and reads its whole table per Query, so a listing cannot take
  less than its Queries times that (DynamoDB answers a Query in milliseconds, in parallel).

``--rtt-ms N`` makes each of the store's requests wait N ms before it is sent (a botocore
``before-send`` hook in the worker): a stand-in for the network round trip to DynamoDB, which
moto on loopback does not have, so what a listing's requests in a row cost shows.

``--before DIR`` measures the same registry with another checkout's code too (its
``lake_platform``), the two alternating round by round in worker processes, and prints the ratio
after / before. Prints figures only; asserts nothing.

    python bench/registry_listings.py [--tables 300] [--rounds 10] [--runs 2] [--rtt-ms 0] [--before DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import _common as common

ROOT = Path(__file__).resolve().parents[1]
LISTINGS = ("warehouse list (ms)", "namespace list (ms)", "page of 100 (ms)")


def worker(url: str, home: str, rounds: int, rtt_ms: float) -> dict[str, float]:
    """One round of each listing, ``rounds`` times (in this process's ``lake_platform``)."""
    from lake_platform.catalog.catalog import Catalog
    from lake_platform.registry.dynamodb import DynamoMetaStore
    from lake_platform.settings import load_settings
    from lake_platform_tests.servers import SLOW_IO

    # moto's Query grows with its whole table: more than the 1 s a registry read gets by default.
    settings = load_settings(home=Path(home), _env_file=None, registry_url=url, **SLOW_IO)
    store = DynamoMetaStore.from_url(url, settings)
    queries: list[str] = []
    store.events.register("before-call.dynamodb", lambda model, **_: queries.append(model.name))
    if rtt_ms:
        store.events.register("before-send.dynamodb", lambda **_: time.sleep(rtt_ms / 1000))
    catalog = Catalog(settings, store, heartbeat=False)
    calls = {
        LISTINGS[0]: lambda: list(catalog.reads.list_tables("p.w")),
        LISTINGS[1]: lambda: list(catalog.reads.list_tables("p.w.ns00000")),
        LISTINGS[2]: lambda: catalog.reads.all_tables(limit=100),
    }
    out: dict[str, float] = {}
    try:
        for name, call in calls.items():
            call()  # warm: the store's layout, connections
            spent = []
            for _ in range(rounds):
                queries.clear()
                started = time.perf_counter()
                call()
                spent.append(time.perf_counter() - started)
            out[name] = statistics.median(spent) * 1000
            out[name.replace("(ms)", "(requests)")] = len(queries)
    finally:
        catalog.close()
    return out


def run_worker(code: Path, url: str, home: Path, rounds: int, rtt_ms: float) -> dict[str, float]:
    env = {**os.environ, "PYTHONPATH": f"{code}{os.pathsep}{ROOT}"}
    cmd = [sys.executable, __file__, "--worker", url, str(home), str(rounds), str(rtt_ms)]
    answer = subprocess.run(cmd, env=env, check=True, capture_output=True, text=True, cwd=code)
    return json.loads(answer.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tables", type=int, default=300)
    ap.add_argument("--rounds", type=int, default=10, help="listings per worker run")
    ap.add_argument("--runs", type=int, default=2, help="worker runs per checkout, alternating")
    ap.add_argument("--rtt-ms", type=float, default=0.0, help="a wait before each request is sent")
    ap.add_argument("--before", type=Path, help="another checkout to compare with")
    args = ap.parse_args()
    print(common.machine_line())
    print(common.load_line())
    common.moto_dummy_credentials()
    import boto3

    from lake_platform.registry.dynamodb import DynamoMetaStore
    from lake_platform.registry.dynamodb_admin import init_table
    from lake_platform.registry.dynamodb_items import key_of
    from lake_platform.registry.dynamodb_layout import partition_of
    from lake_platform.settings import load_settings
    from lake_platform_tests.registry.catalog_records import dynamodb_batch_loader, write_catalog
    from lake_platform_tests.servers import start_moto_server

    with common.scratch_dir("bench-listings-") as tmp:
        endpoint, stop = start_moto_server(tmp)  # the test suite's: one request at a time
        try:
            url = common.dynamodb_url(endpoint, "listings")
            settings = load_settings(home=tmp / "home", _env_file=None, registry_url=url)
            init_table(url, settings)
            store = DynamoMetaStore.from_url(url, settings)
            load = dynamodb_batch_loader(endpoint, "listings")  # BatchWriteItem: moto copies per transaction
            write_catalog(
                store, "p", namespaces=max(1, args.tables // 100), per_namespace=100, versions=1, write=load
            )
            store.close()
            bare = boto3.client("dynamodb", endpoint_url=endpoint)
            bucket = key_of("tbl/p/w/ns00000/t0000")["p"]
            assert bucket["S"] == partition_of("tbl/p/w/ns00000/t0000")
            query = {"TableName": "listings", "KeyConditionExpression": "p = :p", "ConsistentRead": True}
            query["ExpressionAttributeValues"] = {":p": bucket}
            spent = []
            for _ in range(args.rounds):
                started = time.perf_counter()
                bare.query(**query)
                spent.append(time.perf_counter() - started)
            bare_ms = statistics.median(spent) * 1000
            print(
                f"{args.tables:,} tables; bare moto Query of a bucket: {bare_ms:.1f} ms; rtt {args.rtt_ms} ms"
            )
            checkouts = {"after": ROOT, **({"before": args.before.resolve()} if args.before else {})}
            runs: dict[str, list[dict[str, float]]] = {name: [] for name in checkouts}
            for _ in range(args.runs):
                for name, code in checkouts.items():
                    runs[name].append(run_worker(code, url, tmp / "home", args.rounds, args.rtt_ms))
        finally:
            stop()
    ratio = "       ratio" if args.before else ""
    print(f"  {'':28}" + "".join(f"{name:>12}" for name in checkouts) + ratio)
    for key in runs["after"][0]:
        figures = [statistics.median(r[key] for r in runs[name]) for name in checkouts]
        ratio = f"{figures[0] / figures[1]:>12.3f}" if args.before and figures[1] else ""
        print(f"  {key:28}" + "".join(f"{f:>12.1f}" for f in figures) + ratio)
    print(common.load_line())


if __name__ == "__main__":
    if sys.argv[1:2] == ["--worker"]:
        sys.path.insert(0, os.getcwd())
        print(json.dumps(worker(sys.argv[2], sys.argv[3], int(sys.argv[4]), float(sys.argv[5]))))
    else:
        sys.path.insert(0, str(ROOT))
        main()
