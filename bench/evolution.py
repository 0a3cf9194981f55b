"""Schema evolution: what an append that adds or widens columns costs, vs bare Lance doing the same.

On a table of ``--rows`` rows (id int32, value float32, name string), one append of
``--append-rows`` rows that

  (a) fits as it is (a plain append, for reference);
  (b) adds a column (``schema_evolution=add_columns``): the catalog holds Lance's
      ``add_columns`` version back and registers it with the append in one transaction; bare
      Lance runs ``ds.add_columns(schema)`` then ``write_dataset(mode="append")``;
  (c) widens id int32 -> int64 and value float32 -> float64 (``widen``): Lance rewrites those
      columns of every existing fragment (``alter_columns`` with a cast), then appends.

Each case runs once untimed per side (warm-up), then ``--repeats`` times on a fresh copy of the
table (the change happens once per table), alternating which side goes first; it prints median
seconds and the ratio catalog/bare.

    python bench/evolution.py                       # defaults: 1M rows, 100k appended, 3 repeats
    python bench/evolution.py --rows 200000 --repeats 1
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _common  # noqa: F401 - sets Lance's log filter before lance loads
import numpy as np
import pyarrow as pa

TABLE = "p.w.ns.t"


def data(start: int, rows: int, *, wide: bool = False, extra: bool = False) -> pa.Table:
    ids = np.arange(start, start + rows)
    cols = {
        "id": pa.array(ids, pa.int64() if wide else pa.int32()),
        "value": pa.array(ids / 3, pa.float64() if wide else pa.float32()),
        "name": pa.array([f"n{i % 1000}" for i in range(rows)]),
    }
    if extra:
        cols["extra"] = pa.array(ids * 2, pa.int64())
    return pa.table(cols)


def catalog_case(base: pa.Table, new: pa.Table, mode: str) -> float:
    from lake_platform.catalog.catalog import Catalog
    from lake_platform.settings import load_settings

    with tempfile.TemporaryDirectory() as tmp:
        catalog = Catalog(load_settings(home=Path(tmp) / "home", warehouse_roots=str(Path(tmp) / "wh")))
        catalog.containers.create_project("p")
        catalog.containers.create_warehouse("p.w", root=str(Path(tmp) / "wh"))
        catalog.containers.create_namespace("p.w.ns")
        catalog.tables.create_table(TABLE, base.to_reader())
        catalog.policies.set_policy(TABLE, {"schema_evolution": mode})
        t = time.perf_counter()
        catalog.tables.append(TABLE, new.to_reader())
        took = time.perf_counter() - t
        assert catalog.reads.open_table(TABLE).count_rows() == base.num_rows + new.num_rows
        catalog.close()
        return took


def bare_case(base: pa.Table, new: pa.Table, mode: str) -> float:
    import lance

    with tempfile.TemporaryDirectory() as tmp:
        uri = str(Path(tmp) / "t.lance")
        ds = lance.write_dataset(base, uri)
        t = time.perf_counter()
        added = [new.schema.field(n) for n in new.schema.names if n not in base.schema.names]
        widened = [
            {"path": f.name, "data_type": new.schema.field(f.name).type}
            for f in base.schema
            if new.schema.field(f.name).type != f.type
        ]
        if widened:
            ds.alter_columns(*widened)
        if added:
            ds.add_columns(pa.schema(added))
        lance.write_dataset(new, uri, mode="append")
        took = time.perf_counter() - t
        assert lance.dataset(uri).count_rows() == base.num_rows + new.num_rows
        return took


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rows", type=int, default=1_000_000)
    p.add_argument("--append-rows", type=int, default=100_000)
    p.add_argument("--repeats", type=int, default=3)
    args = p.parse_args(argv)
    base = data(0, args.rows)
    cases: list[tuple[str, pa.Table, str]] = [
        ("plain append (fits)", data(args.rows, args.append_rows), "strict"),
        ("append adding a column", data(args.rows, args.append_rows, extra=True), "add_columns"),
        ("append widening 2 columns", data(args.rows, args.append_rows, wide=True), "widen"),
    ]
    print(f"table of {args.rows:,} rows; appending {args.append_rows:,} rows; {args.repeats} repeat(s)")
    print(f"{'case':<28} {'catalog s':>10} {'bare s':>10} {'ratio':>7}")
    for label, new, mode in cases:
        sides: dict[str, list[float]] = {"catalog": [], "bare": []}
        runs: list[tuple[str, Callable[[pa.Table, pa.Table, str], float]]] = [
            ("catalog", catalog_case),
            ("bare", bare_case),
        ]
        for _, fn in runs:  # warm-up (imports, Lance's session): untimed
            fn(base, new, mode)
        for r in range(args.repeats):
            for side, fn in runs if r % 2 == 0 else runs[::-1]:
                sides[side].append(fn(base, new, mode))
        cat, bare = statistics.median(sides["catalog"]), statistics.median(sides["bare"])
        print(f"{label:<28} {cat:>10.3f} {bare:>10.3f} {cat / bare:>7.2f}")


if __name__ == "__main__":
    main()
