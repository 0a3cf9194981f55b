"""Ingest throughput: the catalog write path vs bare ``lance.write_dataset``, and peak memory.

Streams a deterministic, generator-backed ``pa.RecordBatchReader`` (id int64, ts timestamp,
category string from 8 values, value float64, payload 10-15 letters) into

  (a) the catalog: ``catalog.tables.create_table(name, reader)``, then ``catalog.tables.append(name, reader)``
      of the same number of rows onto that table;
  (b) bare Lance: ``lance.write_dataset(reader, uri, mode="create")``, then ``mode="append"``
      of the same rows onto it;

each side ``--repeats`` times, alternating which side goes first, and prints medians of rows/s and
MB/s (Arrow bytes of the stream) plus the ratio catalog/bare. Then it measures the peak RSS
(VmHWM) of the catalog create path at two input sizes in fresh subprocesses: streaming means the
peak should not grow with the input.

With ``--io-manager`` it measures the Dagster side instead: ``LakeIOManager.handle_output`` of the
same stream (one commit of a new table) vs ``lance.write_dataset``, and ``load_input`` of that
table as a pyarrow Table vs a bare Lance scan (``lance.dataset(uri).to_table()``), printed as
ratios (goal >= 0.90 each), plus one whole ``dagster.materialize`` run of the writing asset.

    python bench/ingest.py                      # defaults: 5M rows (~250 MB of Arrow data), 5 repeats
    python bench/ingest.py --rows 1000000 --repeats 1 --skip-rss   # quick look
    python bench/ingest.py --io-manager --repeats 1                # the IO-manager case
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _common as c

TABLE = f"{c.NAMESPACE}.events"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=__doc__.split("\n\n", 1)[1],
    )
    p.add_argument("--rows", type=int, default=5_000_000, help="rows per timed write (default 5,000,000)")
    p.add_argument("--batch-rows", type=int, default=65_536, help="rows per generated batch (default 65,536)")
    p.add_argument("--seed", type=int, default=42, help="data generator seed (default 42)")
    p.add_argument(
        "--repeats", type=int, default=5, help="timed runs per side; the median is reported (default 5)"
    )
    p.add_argument("--skip-append", action="store_true", help="time only create, not append")
    p.add_argument(
        "--rss-rows",
        type=int,
        nargs=2,
        default=[1_250_000, 5_000_000],
        metavar=("SMALL", "LARGE"),
        help="input sizes for the peak-RSS check (default 1,250,000 and 5,000,000)",
    )
    p.add_argument(
        "--rss-bare", action="store_true", help="also measure the peak RSS of bare Lance, for context"
    )
    p.add_argument("--skip-rss", action="store_true", help="skip the peak-RSS subprocess runs")
    p.add_argument(
        "--min-mb", type=float, default=150.0, help="warn if the stream is smaller than this (default 150)"
    )
    p.add_argument("--keep", action="store_true", help="keep the temp folders (their paths are printed)")
    p.add_argument(
        "--io-manager", action="store_true", help="the Dagster IO manager's write and load vs bare Lance"
    )
    # Internal: one peak-RSS measurement in this (fresh) process, printed as JSON.
    p.add_argument("--_rss-child", dest="rss_child", choices=["catalog", "bare"], help=argparse.SUPPRESS)
    return p.parse_args(argv)


# -- one timed write per side ----------------------------------------------------------------------


def run_bare(args: argparse.Namespace, tmp: Path, append: bool) -> dict[str, float]:
    import lance

    uri = (tmp / "bare.lance").as_posix()
    out: dict[str, float] = {}
    tally = c.Tally()
    sw = c.Stopwatch()
    lance.write_dataset(c.make_reader(args.rows, args.batch_rows, args.seed, tally), uri, mode="create")
    out["create_s"], out["create_cpu"] = sw.stop()
    out["rows"], out["nbytes"] = tally.rows, tally.nbytes
    if append:
        tally = c.Tally()
        sw = c.Stopwatch()
        lance.write_dataset(
            c.make_reader(args.rows, args.batch_rows, args.seed + 1, tally, start_id=args.rows),
            uri,
            mode="append",
        )
        out["append_s"], out["append_cpu"] = sw.stop()
        assert lance.dataset(uri).count_rows() == 2 * args.rows
    return out


def run_catalog(args: argparse.Namespace, tmp: Path, append: bool) -> dict[str, float]:
    catalog = c.open_catalog(tmp / "home")  # registry + hierarchy set up outside the timing
    out: dict[str, float] = {}
    try:
        tally = c.Tally()
        sw = c.Stopwatch()
        result = catalog.tables.create_table(
            TABLE, c.make_reader(args.rows, args.batch_rows, args.seed, tally)
        )
        out["create_s"], out["create_cpu"] = sw.stop()
        out["rows"], out["nbytes"] = tally.rows, tally.nbytes
        assert result.rows_added == args.rows, result
        if append:
            sw = c.Stopwatch()
            result = catalog.tables.append(
                TABLE, c.make_reader(args.rows, args.batch_rows, args.seed + 1, start_id=args.rows)
            )
            out["append_s"], out["append_cpu"] = sw.stop()
            assert result.rows_added == args.rows, result
            assert catalog.reads.open_table(TABLE).count_rows() == 2 * args.rows
    finally:
        catalog.close()
    return out


# -- the Dagster IO manager ------------------------------------------------------------------------


def run_io_manager(args: argparse.Namespace, tmp: Path) -> dict[str, float]:
    """One handle_output (a new table, one commit) and one load_input of it, timed."""
    import uuid

    import dagster as dg
    import pyarrow as pa

    from lake_platform.defs.io_manager import LakeIOManager
    from lake_platform.defs.resources import LakeResource

    c.open_catalog(tmp / "home").close()  # registry + hierarchy set up outside the timing
    lake = LakeResource(home=str(tmp / "home"))
    manager = LakeIOManager(lake=lake)
    key = dg.AssetKey(TABLE.split("."))
    out: dict[str, float] = {}
    with dg.instance_for_test() as instance:
        reader = c.make_reader(args.rows, args.batch_rows, args.seed)
        context = dg.build_output_context(
            asset_key=key, run_id=str(uuid.uuid4()), step_key="events", instance=instance
        )
        sw = c.Stopwatch()
        manager.handle_output(context, reader)
        out["write_s"], out["write_cpu"] = sw.stop()
        arrow = dg.PythonObjectDagsterType(pa.Table)

        def context() -> dg.InputContext:
            # Dagster's test helper takes ~80 ms a context; in a run Dagster builds it anyway.
            return dg.build_input_context(asset_key=key, instance=instance, dagster_type=arrow)

        out["load_s"], out["load_cpu"] = timed_loads(manager.load_input, args.rows, context)

        @dg.asset(key=[*TABLE.split(".")[:-1], "run_events"], io_manager_key="lake_io")
        def run_events() -> object:
            return c.make_reader(args.rows, args.batch_rows, args.seed)

        t0 = time.perf_counter()
        dg.materialize([run_events], instance=instance, resources={"lake_io": manager})
        out["run_s"] = time.perf_counter() - t0
    return out


def run_bare_scan(args: argparse.Namespace, tmp: Path) -> dict[str, float]:
    import lance

    uri = (tmp / "bare.lance").as_posix()
    out: dict[str, float] = {}
    sw = c.Stopwatch()
    lance.write_dataset(c.make_reader(args.rows, args.batch_rows, args.seed), uri, mode="create")
    out["write_s"], out["write_cpu"] = sw.stop()
    out["load_s"], out["load_cpu"] = timed_loads(lambda _: lance.dataset(uri).to_table(), args.rows)
    return out


#: Loads timed per run (a load is short, so one is at the mercy of a loaded machine): the median.
LOADS = 5


def timed_loads(
    load: Callable[[Any], object], rows: int, argument: Callable[[], Any] = lambda: None
) -> tuple[float, float]:
    """Median wall and CPU seconds of ``LOADS`` loads of ``load(argument())``, the argument made
    outside the timing; each table is freed outside the timing."""
    walls, cpus = [], []
    for _ in range(LOADS):
        arg = argument()
        sw = c.Stopwatch()
        table = load(arg)
        wall, cpu = sw.stop()
        assert table.num_rows == rows  # type: ignore[attr-defined]
        del table
        walls.append(wall)
        cpus.append(cpu)
    return c.median(walls), c.median(cpus)


def io_manager_case(args: argparse.Namespace) -> int:
    warm = argparse.Namespace(**{**vars(args), "rows": 2 * args.batch_rows})
    for side in (run_bare_scan, run_io_manager):
        with c.scratch_dir("bench-io-warm-") as tmp:
            side(warm, tmp)
    runs: dict[str, list[dict[str, float]]] = {"bare": [], "io": []}
    sides = {"bare": run_bare_scan, "io": run_io_manager}
    for rep in range(args.repeats):
        for side in ["bare", "io"] if rep % 2 == 0 else ["io", "bare"]:
            with c.scratch_dir(f"bench-io-{side}-", keep=args.keep) as tmp:
                r = sides[side](args, tmp)
            runs[side].append(r)
            extra = f", whole materialize run {r['run_s']:.2f} s" if side == "io" else ""
            print(f"  run {rep + 1} {side:<4}: write {r['write_s']:.2f} s, load {r['load_s']:.2f} s{extra}")
    print(f"  ({c.load_line()})")
    for op, what in (("write", "handle_output vs lance.write_dataset"), ("load", "load_input vs Lance scan")):
        paired = c.median(
            [b[f"{op}_s"] / k[f"{op}_s"] for b, k in zip(runs["bare"], runs["io"], strict=True)]
        )
        verdict = "meets" if paired >= 0.9 else "MISSES"
        print(f"ratio io-manager/bare {op} ({what}): {paired:.3f} (goal >= 0.90: {verdict})")
    run_ratio = c.median([b["write_s"] / k["run_s"] for b, k in zip(runs["bare"], runs["io"], strict=True)])
    print(f"ratio whole materialize run/bare write (Dagster's run overhead included): {run_ratio:.3f}")
    return 0


# -- peak RSS in a fresh process -----------------------------------------------------------------


def rss_child(args: argparse.Namespace) -> None:
    import lance

    with c.scratch_dir("bench-ingest-rss-") as tmp:
        if args.rss_child == "catalog":
            catalog = c.open_catalog(tmp / "home")
            baseline = c.vm_hwm_bytes()
            t0 = time.perf_counter()
            catalog.tables.create_table(TABLE, c.make_reader(args.rows, args.batch_rows, args.seed))
            elapsed = time.perf_counter() - t0
            catalog.close()
        else:
            baseline = c.vm_hwm_bytes()
            t0 = time.perf_counter()
            lance.write_dataset(
                c.make_reader(args.rows, args.batch_rows, args.seed),
                (tmp / "b.lance").as_posix(),
                mode="create",
            )
            elapsed = time.perf_counter() - t0
        peak = c.vm_hwm_bytes()
    print(json.dumps({"rows": args.rows, "baseline": baseline, "peak": peak, "seconds": elapsed}))


def measure_rss(args: argparse.Namespace, mode: str, rows: int) -> dict[str, float]:
    cmd = [
        sys.executable,
        str(Path(__file__).resolve()),
        "--_rss-child",
        mode,
        "--rows",
        str(rows),
        "--batch-rows",
        str(args.batch_rows),
        "--seed",
        str(args.seed),
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"peak-RSS child failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


# -- main ------------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.rss_child:
        rss_child(args)
        return 0

    print(c.machine_line())
    print(
        f"config: rows={args.rows:,} batch_rows={args.batch_rows:,} seed={args.seed} repeats={args.repeats}"
    )
    if args.io_manager:
        return io_manager_case(args)

    # The generator alone, so its cost can be read against the write figures.
    tally = c.Tally()
    t0 = time.perf_counter()
    for _ in c.make_reader(args.rows, args.batch_rows, args.seed, tally):
        pass
    gen_s = time.perf_counter() - t0
    mb = tally.nbytes / c.MB
    ok = "ok" if mb >= args.min_mb else f"BELOW the {args.min_mb:.0f} MB floor"
    print(
        f"stream: {tally.rows:,} rows, {mb:,.1f} MB Arrow nbytes ({ok}); "
        f"generator alone {gen_s:.2f} s = {tally.rows / gen_s / 1e6:.1f} M rows/s (included in every "
        "figure below)"
    )

    append = not args.skip_append
    # Warm-up (untimed): the first Lance write in a process pays one-off setup costs.
    warm = argparse.Namespace(**{**vars(args), "rows": 2 * args.batch_rows})
    for side in (run_bare, run_catalog):
        with c.scratch_dir("bench-ingest-warm-") as tmp:
            side(warm, tmp, append)
    runs: dict[str, list[dict[str, float]]] = {"bare": [], "catalog": []}
    sides = {"bare": run_bare, "catalog": run_catalog}
    for rep in range(args.repeats):
        order = ["bare", "catalog"] if rep % 2 == 0 else ["catalog", "bare"]
        for side in order:
            with c.scratch_dir(f"bench-ingest-{side}-", keep=args.keep) as tmp:
                r = sides[side](args, tmp, append)
            runs[side].append(r)
            extra = f", append {r['append_s']:.2f} s" if append else ""
            print(f"  run {rep + 1} {side:<7}: create {r['create_s']:.2f} s{extra}", flush=True)
    print(f"  ({c.load_line()})")

    print()
    print(f"{'write':<18}{'median s':>10}{'rows/s':>14}{'MB/s':>10}{'CPU s':>8}")
    medians: dict[tuple[str, str], float] = {}
    cpu: dict[tuple[str, str], float] = {}
    for op in ["create", "append"] if append else ["create"]:
        for side in ("bare", "catalog"):
            secs = c.median([r[f"{op}_s"] for r in runs[side]])
            medians[(op, side)] = secs
            cpu[(op, side)] = c.median([r[f"{op}_cpu"] for r in runs[side]])
            print(
                f"{side + ' ' + op:<18}{secs:>10.2f}{args.rows / secs:>14,.0f}{mb / secs:>10.1f}"
                f"{cpu[(op, side)]:>8.2f}"
            )
    print()
    for op in ["create", "append"] if append else ["create"]:
        ratio = medians[(op, "bare")] / medians[(op, "catalog")]
        # Runs of one repeat are back to back, so they share the machine's load at that moment.
        paired = c.median(
            [b[f"{op}_s"] / k[f"{op}_s"] for b, k in zip(runs["bare"], runs["catalog"], strict=True)]
        )
        verdict = "meets" if paired >= 0.9 else "MISSES"
        print(
            f"ratio catalog/bare ({op}): {paired:.3f} median of per-repeat ratios (goal >= 0.90: {verdict}); "
            f"ratio of medians {ratio:.3f}; by CPU time {cpu[(op, 'bare')] / cpu[(op, 'catalog')]:.3f}"
        )

    if not args.skip_rss:
        print()
        small, large = args.rss_rows
        modes = ["catalog", "bare"] if args.rss_bare else ["catalog"]
        for mode in modes:
            res = {rows: measure_rss(args, mode, rows) for rows in (small, large)}
            for rows in (small, large):
                r = res[rows]
                print(
                    f"peak RSS {mode:<7} {rows:>10,} rows: VmHWM {r['peak'] / 2**20:7.0f} MiB "
                    f"(before the write {r['baseline'] / 2**20:.0f} MiB, growth "
                    f"{(r['peak'] - r['baseline']) / 2**20:.0f} MiB; "
                    f"write {r['seconds']:.1f} s)"
                )
            ratio = res[large]["peak"] / res[small]["peak"]
            growth = (res[large]["peak"] - res[large]["baseline"]) / max(
                1, res[small]["peak"] - res[small]["baseline"]
            )
            verdict = "meets" if ratio <= 1.15 else "MISSES"
            print(
                f"peak RSS ratio {mode} {large / small:.0f}x input: {ratio:.2f} (growth-over-baseline ratio "
                f"{growth:.2f}; goal: flat, <= 1.15: {verdict})"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
