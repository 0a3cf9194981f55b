"""Memory bound (issue 7): the endpoint in its own process with a 256 MiB DataFusion pool serves a
full ``SELECT *`` and an ``ORDER BY`` over a table larger than 1.2 GiB in Arrow, every row
counted by the client, the sort spilling to disk; the server's peak RSS (VmHWM, reset between
the two queries through ``/proc/<pid>/clear_refs``) stays under 800 MiB for the scan and under
the table's Arrow size for the sort. (RLIMIT_AS cannot be the cap: DataFusion, Lance and gRPC
reserve far more address space than they touch.)

The rows look like analytics data (the shape ``bench/flight.py`` uses): an id, a timestamp, a
category, a float and a 10-15 character string, ~50 bytes a row, 28M rows (1.40 GB). Wall time is
dominated by writing the table and the sort, on 2 shared cores.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest

from lake_platform.catalog.catalog import Catalog
from lake_platform.settings import load_settings
from lake_platform_tests.flight.conftest import fetch, login, plan
from lake_platform_tests.flight.server_process import spawn

pytestmark = pytest.mark.slow

ROWS = 28_000_000
BATCH = 500_000
POOL = 256 << 20
SCAN_LIMIT = 800 << 20
CATEGORIES = pa.array(["alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel"])


def big_batches(rows: int = ROWS) -> Iterator[pa.RecordBatch]:
    """~1.3 GB of Arrow in about a second: numpy vectors only (no per-row Python)."""
    for start in range(0, rows, BATCH):
        n = min(BATCH, rows - start)
        rng = np.random.default_rng(start)
        ids = np.arange(start, start + n, dtype=np.int64)
        lengths = rng.integers(10, 16, n, dtype=np.int32)
        offsets = np.zeros(n + 1, dtype=np.int32)
        np.cumsum(lengths, out=offsets[1:])
        chars = rng.integers(ord("a"), ord("z") + 1, int(offsets[-1]), dtype=np.uint8)
        yield pa.record_batch(
            {
                "id": pa.array(ids),
                "ts": pa.array(1_700_000_000_000_000 + ids * 1000, pa.int64()).view(
                    pa.timestamp("us", tz="UTC")
                ),
                "category": CATEGORIES.take(pa.array(rng.integers(0, 8, n, dtype=np.int32))),
                "value": pa.array(rng.standard_normal(n)),
                "payload": pa.StringArray.from_buffers(n, pa.py_buffer(offsets), pa.py_buffer(chars)),
            }
        )


def vm_hwm(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmHWM")


def reset_hwm(pid: int) -> None:
    Path(f"/proc/{pid}/clear_refs").write_text("5")  # resets the peak RSS to the current RSS


def folder_bytes(path: Path) -> int:
    total = 0
    for root, _, files in os.walk(path):
        for name in files:
            try:
                total += os.stat(os.path.join(root, name)).st_size
            except FileNotFoundError:
                pass
    return total


@pytest.mark.skipif(not Path("/proc/self/clear_refs").exists(), reason="needs Linux /proc")
@pytest.mark.slow
def test_scan_and_spilling_sort_stay_within_the_memory_bound(tmp_path: Path) -> None:
    started = time.monotonic()
    home = tmp_path / "home"
    catalog = Catalog(load_settings(home=home))
    catalog.containers.create_project("p")
    catalog.containers.create_warehouse("p.w")
    catalog.containers.create_namespace("p.w.ns")
    arrow_bytes = 0

    def counted() -> Iterator[pa.RecordBatch]:
        nonlocal arrow_bytes
        for batch in big_batches():
            arrow_bytes += batch.nbytes
            yield batch

    schema = next(big_batches(10)).schema
    catalog.tables.create_table("p.w.ns.big", pa.RecordBatchReader.from_batches(schema, counted()))
    catalog.close()
    assert arrow_bytes >= 1.2 * (1 << 30)
    built = time.monotonic()

    spill = tmp_path / "spill"
    proc, port = spawn(
        home,
        f"memory_limit_bytes={POOL}",
        f"spill_dir={spill}",
        "max_endpoints=1",  # one stream's bound (a split result runs one stream per endpoint)
    )
    timings: dict[str, float] = {"build": built - started}
    try:
        client, options = login(f"grpc://127.0.0.1:{port}")
        assert fetch(
            client, options, plan(client, options, "SELECT count(*) AS n FROM w.ns.big")
        ).to_pylist() == [{"n": ROWS}]

        # 1. SELECT *: every row through the stream.
        reset_hwm(proc.pid)
        t = time.monotonic()
        info = plan(client, options, "SELECT * FROM w.ns.big")
        rows = streamed = 0
        for chunk in client.do_get(info.endpoints[0].ticket, options):
            rows += chunk.data.num_rows
            streamed += chunk.data.nbytes
        timings["scan"] = time.monotonic() - t
        scan_peak = vm_hwm(proc.pid)
        assert rows == ROWS and streamed >= arrow_bytes * 0.95
        assert scan_peak < SCAN_LIMIT, (
            f"scan: server peak RSS {scan_peak >> 20} MiB >= {SCAN_LIMIT >> 20} MiB"
        )

        # 2. ORDER BY over the whole table: five times the pool, so it must spill.
        reset_hwm(proc.pid)
        spilled = {"max": 0}
        done = threading.Event()

        def watch_spill() -> None:
            while not done.wait(0.1):
                spilled["max"] = max(spilled["max"], folder_bytes(spill))

        watcher = threading.Thread(target=watch_spill, daemon=True)
        watcher.start()
        t = time.monotonic()
        info = plan(client, options, "SELECT * FROM w.ns.big ORDER BY value")
        rows, last = 0, float("-inf")
        for chunk in client.do_get(info.endpoints[0].ticket, options):
            keys = chunk.data.column("value")
            if len(keys):
                assert keys[0].as_py() >= last
                assert pc.all(pc.greater_equal(keys[1:], keys[:-1])).as_py() is not False
                last = keys[-1].as_py()
            rows += chunk.data.num_rows
        timings["sort"] = time.monotonic() - t
        done.set()
        watcher.join()
        sort_peak = vm_hwm(proc.pid)
        assert rows == ROWS
        assert spilled["max"] > POOL, f"the sort spilled only {spilled['max'] >> 20} MiB"
        assert sort_peak < arrow_bytes, (
            f"sort: server peak RSS {sort_peak >> 20} MiB >= the table's {arrow_bytes >> 20} MiB"
        )
        print(
            f"\ntable {arrow_bytes / 1e9:.2f} GB Arrow, {ROWS:,} rows; pool {POOL >> 20} MiB; "
            f"peak RSS scan {scan_peak >> 20} MiB, sort {sort_peak >> 20} MiB; spilled up to "
            f"{spilled['max'] >> 20} MiB; build {timings['build']:.1f}s, scan {timings['scan']:.1f}s, "
            f"sort {timings['sort']:.1f}s"
        )
    finally:
        proc.terminate()
        proc.wait(10)
