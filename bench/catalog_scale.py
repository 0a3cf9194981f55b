"""Catalog scale: what a replica and a reader pay at 100 tables and at 100,000 (issue 49).

Each size is a fresh lake: one real table (``p.w.real.t``, Lance, 1,000 rows) and N tables of
10 versions each written straight into the registry (``lake_platform_tests.registry.
catalog_records``: records only, which everything measured here reads exactly as it reads real
ones), 100 per namespace. Side by side, with the ratio large / small:

- refresh, no change: one ``load_snapshot(store, previous)`` with nothing committed since
  (registry requests, and time);
- refresh after one commit: the same after one table's head moved;
- cold load: a replica starting (current heads, page by page), for reference;
- DescribeTable: the catalog's Lance Namespace ``describe_table`` of the real table (what REST's
  DescribeTable runs, minus HTTP);
- GetFlightInfo of a point query (``SELECT * FROM w.real.t WHERE id = 7``) against an in-process
  Flight SQL server over the lake;
- table list of one namespace of 100 tables (``catalog.reads.list_tables``, what
  ``lake table list --json p.w.ns00007`` runs).

Times are medians of ``--rounds``. ``--dynamodb`` runs the same on moto (the test suite's
moto_server). There the records are loaded with BatchWriteItem, in the items the registry's own
encoder makes: moto copies the whole table on every TransactWriteItems (the registry's write),
so loading 110,000 records by transactions is quadratic (~60M item copies at 10,000 tables; a
run was killed by the OOM killer at 24 GB). Every commit measured is still a transaction.
Prints figures only; asserts nothing.

    python bench/catalog_scale.py [--sizes 100,100000] [--versions 10] [--rounds 30]
                                  [--dynamodb 100,2000]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import _common as common

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from lake_platform.catalog.pylance_namespace import LakeNamespace  # noqa: E402
from lake_platform.query.snapshot import load_snapshot  # noqa: E402
from lake_platform.registry.store import Op  # noqa: E402
from lake_platform_tests.registry.catalog_records import (  # noqa: E402
    Reads,
    commit,
    dynamodb_batch_loader,
    write_catalog,
)

PER_NAMESPACE = 100


def median_ms(fn: Callable[[], object], rounds: int) -> float:
    spent = []
    for _ in range(rounds):
        started = time.perf_counter()
        fn()
        spent.append(time.perf_counter() - started)
    return statistics.median(spent) * 1000


def bare_requests(endpoint: str, table: str, rounds: int) -> dict[str, float]:
    """The emulator's own cost of one request at this size, our code not involved (boto3 straight
    to moto): a GetItem of the real table's record, and a Query of one change-feed shard's
    partition, the request a refresh makes 16 times. What moto spends per Query grows with its
    whole table where DynamoDB's does not."""
    import boto3

    from lake_platform.naming import TableName
    from lake_platform.registry import keys
    from lake_platform.registry.dynamodb_items import key_of

    client = boto3.client("dynamodb", endpoint_url=endpoint)
    key = key_of(keys.table(TableName.parse("p.w.real.t")))
    query = {
        "TableName": table,
        "KeyConditionExpression": "p = :p",
        "ExpressionAttributeValues": {":p": key_of(keys.change_record(0, 0))["p"]},
        "ConsistentRead": True,
    }
    return {
        "bare moto GetItem (ms)": median_ms(
            lambda: client.get_item(TableName=table, Key=key, ConsistentRead=True), rounds
        ),
        "bare moto Query of a feed shard (ms)": median_ms(lambda: client.query(**query), rounds),
    }


def measure(
    home: Path,
    tables: int,
    versions: int,
    rounds: int,
    registry_url: str | None,
    load: Callable[[Sequence[Op]], None] | None = None,
) -> dict[str, float]:
    import pyarrow as pa
    from lance_namespace_urllib3_client.models import DescribeTableRequest

    from lake_platform_tests.flight.conftest import login, plan, start_server

    if registry_url:
        from lake_platform.registry.dynamodb_admin import init_table
        from lake_platform.settings import load_settings

        init_table(registry_url, load_settings(home=home, _env_file=None, registry_url=registry_url))
    catalog = common.open_catalog(home, registry_url=registry_url)
    out: dict[str, float] = {}
    try:
        catalog.containers.create_project("p")
        catalog.containers.create_warehouse("p.w")
        catalog.containers.create_namespace("p.w.real")
        rows = pa.table({"id": pa.array(range(1000), pa.int64()), "s": [f"r{i}" for i in range(1000)]})
        catalog.tables.create_table("p.w.real.t", rows.to_reader())
        started = time.perf_counter()
        names = write_catalog(
            catalog.store,
            "p",
            namespaces=max(1, tables // PER_NAMESPACE),
            per_namespace=PER_NAMESPACE,
            versions=versions,
            write=load,
        )
        print(f"  {tables} tables x {versions} versions written in {time.perf_counter() - started:.1f} s")
        store = Reads(catalog.store)
        started = time.perf_counter()
        snap = load_snapshot(store)
        out["cold load (ms)"] = (time.perf_counter() - started) * 1000
        out["cold load (requests)"] = store.count
        store.reset()
        snap = load_snapshot(store, snap)
        out["refresh, no change (requests)"] = store.count
        out["refresh, no change (ms)"] = median_ms(lambda: load_snapshot(store, snap), rounds)
        spent, requests = [], []
        for i in range(rounds):
            commit(catalog.store, names[(i * 7919) % len(names)])
            store.reset()
            started = time.perf_counter()
            snap = load_snapshot(store, snap)
            spent.append(time.perf_counter() - started)
            requests.append(store.count)
        out["refresh after one commit (requests)"] = statistics.median(requests)
        out["refresh after one commit (ms)"] = statistics.median(spent) * 1000
        ns = LakeNamespace(catalog)
        describe = DescribeTableRequest(id=["p", "w", "real", "t"])
        out["DescribeTable (ms)"] = median_ms(lambda: ns.describe_table(describe), rounds)
        out["table list of one namespace (ms)"] = median_ms(
            lambda: list(catalog.reads.list_tables("p.w.ns00000")), rounds
        )
        settings = catalog.settings
        server = start_server(settings, catalog, snapshot_ttl_seconds=5.0)
        try:
            client, options = login(f"grpc://127.0.0.1:{server.port}")
            sql = "SELECT * FROM w.real.t WHERE id = 7"
            plan(client, options, sql)
            out["GetFlightInfo, point query (ms)"] = median_ms(lambda: plan(client, options, sql), rounds)
        finally:
            server.stop(grace=0)
    finally:
        catalog.close()
    return out


def side_by_side(label: str, sizes: list[int], results: list[dict[str, float]]) -> None:
    small, large = results[0], results[-1]
    print(f"\n{label}: {sizes[0]:,} vs {sizes[-1]:,} tables")
    print(f"  {'':40} {sizes[0]:>12,} {sizes[-1]:>12,} {'ratio':>8}")
    for key in small:
        ratio = large[key] / small[key] if small[key] else float("nan")
        print(f"  {key:40} {small[key]:>12.2f} {large[key]:>12.2f} {ratio:>8.2f}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="100,100000", help="table counts on SQLite, small then large")
    ap.add_argument("--versions", type=int, default=10)
    ap.add_argument("--rounds", type=int, default=30)
    ap.add_argument("--dynamodb", default="", help="table counts on moto (e.g. 100,2000); empty: skip")
    args = ap.parse_args()
    print(common.machine_line())
    print(common.load_line())
    sizes = [int(s) for s in args.sizes.split(",") if s]
    results = []
    for size in sizes:
        with common.scratch_dir("bench-scale-") as tmp:
            print(f"SQLite, {size:,} tables")
            results.append(measure(tmp / "home", size, args.versions, args.rounds, None))
    if sizes:
        side_by_side("SQLite", sizes, results)
    if args.dynamodb:
        sizes = [int(s) for s in args.dynamodb.split(",") if s]
        results = []
        from lake_platform_tests.servers import start_moto_server

        common.moto_dummy_credentials()
        # moto copies the whole table once per TransactWriteItems: at tens of thousands of items a
        # bulk write takes longer than the default 2 s registry I/O timeout (DynamoDB does not).
        for name, value in (("TTL", "120"), ("SAFETY_MARGIN", "60"), ("IO_TIMEOUT", "30")):
            os.environ.setdefault(f"LAKE_LEASE_{name}_SECONDS", value)
        with common.scratch_dir("bench-scale-moto-") as tmp:
            # The test suite's moto: one request at a time, TransactGetItems of 100 as DynamoDB.
            endpoint, stop = start_moto_server(tmp)
            try:
                for size in sizes:
                    url = common.dynamodb_url(endpoint, f"scale-{size}")
                    print(f"DynamoDB (moto), {size:,} tables")
                    loader = dynamodb_batch_loader(endpoint, f"scale-{size}")
                    results.append(
                        measure(tmp / f"home-{size}", size, args.versions, args.rounds, url, loader)
                    )
                    results[-1].update(bare_requests(endpoint, f"scale-{size}", args.rounds))
            finally:
                stop()
        side_by_side("DynamoDB (moto)", sizes, results)
    print(common.load_line())


if __name__ == "__main__":
    main()
