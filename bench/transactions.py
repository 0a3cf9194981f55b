"""Atomic multi-table commits (``catalog.transaction()``) against single-table commits of the
same rows, on the registry backend of the ``commits.py`` session (section (f) there).

Sides, taking turns one commit at a time so they share the machine's load; median of
``repeats`` commits each:

- ``single``: one ``Catalog.append`` of ``rows`` rows to one table;
- ``tx``: one transaction appending ``rows / tables`` rows to each of ``tables`` tables (the
  same rows in all), every version visible together;
- ``sequential``: the same ``tables`` appends made one by one, not atomic (what a pipeline does
  without transactions), for context.

The issue's bar: ``tx`` within 2x of ``single``.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _common as c
import pyarrow as pa


def _reader(seed: int, index: int, start: int, rows: int) -> pa.RecordBatchReader:
    return pa.RecordBatchReader.from_batches(c.SCHEMA, [c.make_batch(seed, index, start, rows)])


def run_transactions(
    registry_url: str, tmp: Path, *, tables: int = 10, rows: int = 10_000, repeats: int = 7, seed: int = 7
) -> dict[str, float]:
    """Seconds (median) per commit of each side; prints the figures."""
    catalog: Any = c.open_catalog(tmp / "home", registry_url=registry_url)
    names = [f"{c.NAMESPACE}.tx{i:02d}" for i in range(tables)]
    single, seq = f"{c.NAMESPACE}.single", [f"{c.NAMESPACE}.seq{i:02d}" for i in range(tables)]
    per = rows // tables
    try:
        for i, name in enumerate([*names, single, *seq]):
            catalog.tables.create_table(name, _reader(seed, i, 0, per))
        times: dict[str, list[float]] = {"single": [], "tx": [], "sequential": []}
        for rep in range(repeats + 1):  # the first round warms up, untimed
            start = (rep + 1) * rows
            sw = c.Stopwatch()
            catalog.tables.append(single, _reader(seed, rep, start, per * tables))
            single_s = sw.stop()[0]
            sw = c.Stopwatch()
            with catalog.transaction() as tx:
                for i, name in enumerate(names):
                    tx.append(name, _reader(seed, rep * tables + i, start + i * per, per))
            tx_s = sw.stop()[0]
            sw = c.Stopwatch()
            for i, name in enumerate(seq):
                catalog.tables.append(name, _reader(seed, rep * tables + i, start + i * per, per))
            seq_s = sw.stop()[0]
            if rep:
                times["single"].append(single_s)
                times["tx"].append(tx_s)
                times["sequential"].append(seq_s)
        for name in names:
            assert catalog.reads.describe_table(name, with_stats=False).current_version == repeats + 2
    finally:
        catalog.close()
    med = {side: c.median(v) for side, v in times.items()}
    print(f"  one single-table commit of {per * tables:,} rows:        {1000 * med['single']:8.1f} ms")
    print(f"  one {tables}-table atomic commit, {per:,} rows each:    {1000 * med['tx']:8.1f} ms")
    print(f"  {tables} single-table commits one by one (not atomic): {1000 * med['sequential']:8.1f} ms")
    ratio = med["tx"] / med["single"]
    print(
        f"  ratio {tables}-table transaction / single commit: {ratio:.2f} (bar <= 2: "
        f"{'meets' if ratio <= 2 else 'MISSES'}); median of {repeats}  ({c.load_line()})"
    )
    return med
