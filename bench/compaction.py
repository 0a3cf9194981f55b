"""Compaction benchmark: the same fragmented table compacted by bare Lance, by the catalog in one
process (plan → every task → commit under the lease), and by Dagster's ``table_compaction`` job (one
step per task) on the in-process executor. (The multiprocess executor adds one Python start with
Lance imported per step, ~5-12 s each on this machine: see lake_platform_tests/defs/test_fanout.py.)

Each variant starts from an identical table: F appends of R rows (F fragments), merged into
fragments of ``--target`` rows. Prints seconds and the ratio to bare Lance.

    python bench/compaction.py [--fragments 48] [--rows 20000] [--target 200000]
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import time
from pathlib import Path

import dagster as dg
import lance
import pyarrow as pa

from lake_platform.catalog.catalog import Catalog
from lake_platform.defs.maintenance import table_compaction_job
from lake_platform.defs.partitions import TABLES
from lake_platform.defs.resources import LakeResource
from lake_platform.maintenance.compaction import compact_table
from lake_platform.settings import load_settings

TABLE = "bench.w.ns.frag"


def batch(start: int, rows: int) -> pa.Table:
    ids = pa.array(range(start, start + rows), pa.int64())
    return pa.table(
        {"id": ids, "v": pa.array([float(i) for i in range(rows)]), "s": pa.array(["x" * 24] * rows)}
    )


def fragmented_lake(home: Path, fragments: int, rows: int, target: int) -> Catalog:
    catalog = Catalog(load_settings(home=home))
    catalog.containers.create_project("bench")
    catalog.containers.create_warehouse("bench.w")
    catalog.containers.create_namespace("bench.w.ns")
    catalog.tables.create_table(TABLE, batch(0, rows).to_reader())
    for i in range(1, fragments):
        catalog.tables.append(TABLE, batch(i * rows, rows).to_reader())
    catalog.policies.set_policy(TABLE, {"compact_min_fragments": 2, "target_rows_per_fragment": target})
    return catalog


def bare(path: Path, fragments: int, rows: int, target: int) -> float:
    lance.write_dataset(batch(0, rows), str(path))
    for i in range(1, fragments):
        lance.write_dataset(batch(i * rows, rows), str(path), mode="append")
    ds = lance.dataset(str(path))
    started = time.perf_counter()
    ds.optimize.compact_files(target_rows_per_fragment=target)
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--fragments", type=int, default=48)
    parser.add_argument("--rows", type=int, default=20_000)
    parser.add_argument("--target", type=int, default=200_000)
    args = parser.parse_args()
    os.environ.setdefault("DAGSTER_DISABLE_TELEMETRY", "1")
    root = Path(tempfile.mkdtemp(prefix="bench-compaction-"))
    f, r, t = args.fragments, args.rows, args.target
    print(f"{f} fragments x {r} rows -> fragments of {t} rows ({(f * r + t - 1) // t} tasks' worth)")
    try:
        base = bare(root / "bare.lance", f, r, t)
        print(f"bare Lance compact_files           {base:7.2f} s   1.00x")

        catalog = fragmented_lake(root / "catalog", f, r, t)
        started = time.perf_counter()
        outcome = compact_table(catalog, TABLE)
        took = time.perf_counter() - started
        catalog.close()
        print(
            f"catalog compact_table (1 process)   {took:7.2f} s   {took / base:.2f}x  ({outcome.tasks} tasks)"
        )

        home = root / "dagster"
        fragmented_lake(home, f, r, t).close()
        job = dg.Definitions(
            jobs=[table_compaction_job],
            resources={"lake": LakeResource(home=str(home))},
            executor=dg.in_process_executor,
        ).resolve_job_def(table_compaction_job.name)
        with dg.instance_for_test() as instance:
            instance.add_dynamic_partitions(TABLES, [TABLE])
            started = time.perf_counter()
            result = job.execute_in_process(instance=instance, partition_key=TABLE)
            took = time.perf_counter() - started
        assert result.success
        print(f"Dagster table_compaction (in-proc) {took:7.2f} s   {took / base:.2f}x")
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
