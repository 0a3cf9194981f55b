"""Orphan-scan benchmark: a registered table with >= 2,000 live versions and >= 20,000 files.

Each version is one catalog append of 7 rows with a blob v2 column whose values go to dedicated
sidecar files, so every version adds a data file, 7 blob sidecars, a manifest and a transaction
file (~10 files). 200 old orphans are planted. The script times:

- a bare listing of the table folder (the same pyarrow listing the scan uses, and os.walk);
- the full scan: registry versions, Lance's tracked_files over every manifest, branch/tag
  resolution, the listing and the classification.

and prints files/s and the ratio scan / bare listing. The table is built once under
``bench/.data/orphans`` and reused (delete the folder to rebuild).

    python bench/orphans.py [--versions 2000]
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import time
from datetime import timedelta
from pathlib import Path

import pyarrow as pa
from lance.blob import blob_array, blob_field

import lake_platform.engine.lance_engine as engine
from lake_platform.catalog.catalog import Catalog
from lake_platform.errors import NamespaceAlreadyExists
from lake_platform.maintenance import orphans
from lake_platform.settings import load_settings

TABLE = "bench.w.ns.blobs"
SCHEMA = pa.schema(
    [pa.field("id", pa.int64()), blob_field("b", inline_size_threshold=16, dedicated_size_threshold=512)]
)
ROWS_PER_APPEND = 7
PLANTED = 200


def batch(start: int) -> pa.Table:
    return pa.table(
        {
            "id": pa.array(range(start, start + ROWS_PER_APPEND), pa.int64()),
            "b": blob_array([os.urandom(600) for _ in range(ROWS_PER_APPEND)]),
        },
        schema=SCHEMA,
    )


def build(catalog: Catalog, versions: int) -> None:
    for create, name in (
        (catalog.containers.create_project, "bench"),
        (catalog.containers.create_warehouse, "bench.w"),
        (catalog.containers.create_namespace, "bench.w.ns"),
    ):
        try:
            create(name)
        except NamespaceAlreadyExists:
            pass
    if not any(t.name == TABLE for t in catalog.reads.list_tables("bench.w.ns")):
        catalog.tables.create_table(TABLE, batch(0).to_reader())
    current = catalog.reads.open_table(TABLE).version
    started = time.monotonic()
    for v in range(current, versions):
        catalog.tables.append(TABLE, batch(v * ROWS_PER_APPEND).to_reader())
        if v % 250 == 0:
            print(f"  built version {v + 1}/{versions} ({time.monotonic() - started:.0f}s)", file=sys.stderr)


def plant(root: Path) -> set[str]:
    old = time.time() - 3 * 86400
    planted = set()
    for i in range(PLANTED):
        rel = f"data/{i:050d}.lance"
        path = root / rel
        if not path.exists():
            path.write_bytes(b"orphan" * 10)
        os.utime(path, (old, old))
        planted.add(rel)
    return planted


def age_everything(root: Path) -> None:
    old = time.time() - 2 * 86400
    for dirpath, _, files in os.walk(root):
        for name in files:
            os.utime(os.path.join(dirpath, name), (old, old))


def best(fn, runs: int = 3) -> tuple[float, object]:
    times, result = [], None
    for _ in range(runs):
        t0 = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - t0)
    return min(times), result


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--versions", type=int, default=2000)
    parser.add_argument("--home", type=Path, default=Path(__file__).parent / ".data" / "orphans")
    parser.add_argument("--fresh", action="store_true", help="rebuild the table from scratch")
    args = parser.parse_args()
    if args.fresh:
        shutil.rmtree(args.home, ignore_errors=True)
    settings = load_settings(home=args.home)
    with Catalog(settings) as catalog:
        print(f"building/reusing {TABLE} with {args.versions} versions under {args.home}", file=sys.stderr)
        build(catalog, args.versions)
        record = catalog.reads.open_table(TABLE).record
        root = Path(record.location)
        age_everything(root)
        planted = plant(root)

        list_s, listing = best(lambda: list(engine.list_files(record.location)))
        walk_s, walked = best(lambda: sum(len(f) for _, _, f in os.walk(root)))
        scan_s, report = best(lambda: orphans.scan(catalog, TABLE, min_age=timedelta(hours=1)))

    files = len(listing)  # type: ignore[arg-type]
    assert report.orphan_count == len(planted), (report.orphan_count, len(planted))  # type: ignore[union-attr]
    assert {o.path for o in report.orphans} <= planted  # type: ignore[union-attr]
    print(
        f"table            {TABLE}: {record.current_version} live versions, {files} files "
        f"({walked} by os.walk)"
    )
    print(f"bare listing     {list_s:.3f}s  ({files / list_s:,.0f} files/s)   os.walk {walk_s:.3f}s")
    print(
        f"orphan scan      {scan_s:.3f}s  ({files / scan_s:,.0f} files/s)  "
        f"found {report.orphan_count} planted orphans, 0 false positives"
    )  # type: ignore[union-attr]
    print(f"ratio            scan / bare listing = {scan_s / list_s:.1f}x")


if __name__ == "__main__":
    main()
