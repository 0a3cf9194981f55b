"""Spooling stays off the heap: the endpoint in its own process spools a ``SELECT *`` several
times larger than the memory it grows by (peak RSS, VmHWM reset before the query, as ``test_memory_bound``
measures; measured 551 MiB peak, 237 MiB growth for 0.6 GB under load), and every row comes
back from the segments."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.flight as fl
import pytest

from lake_platform.catalog.catalog import Catalog
from lake_platform.settings import load_settings
from lake_platform_tests.flight.conftest import login, plan
from lake_platform_tests.flight.server_process import spawn
from lake_platform_tests.flight.test_memory_bound import SCAN_LIMIT, big_batches, reset_hwm, vm_hwm

pytestmark = pytest.mark.slow

ROWS = 12_000_000  # ~600 MB of Arrow


@pytest.mark.skipif(not Path("/proc/self/clear_refs").exists(), reason="needs Linux /proc")
@pytest.mark.slow
def test_spooling_a_large_result_keeps_server_memory_bounded(tmp_path: Path) -> None:
    home = tmp_path / "home"
    catalog = Catalog(load_settings(home=home))
    catalog.containers.create_project("p")
    catalog.containers.create_warehouse("p.w")
    catalog.containers.create_namespace("p.w.ns")
    arrow_bytes = 0

    def counted() -> object:
        nonlocal arrow_bytes
        for batch in big_batches(ROWS):
            arrow_bytes += batch.nbytes
            yield batch

    schema = next(big_batches(10)).schema
    catalog.tables.create_table("p.w.ns.big", pa.RecordBatchReader.from_batches(schema, counted()))
    catalog.close()
    proc, port = spawn(home, f"memory_limit_bytes={128 << 20}", f"spool_min_rows={ROWS}", "endpoints=many")
    try:
        client, options = login(f"grpc://127.0.0.1:{port}")
        plan(client, options, "SELECT count(*) FROM w.ns.big")  # warm up
        base = vm_hwm(proc.pid)
        reset_hwm(proc.pid)
        info = plan(client, options, "SELECT * FROM w.ns.big")  # returns once spooled
        peak = vm_hwm(proc.pid)
        segments = sorted((home / "results" / "p").glob("*/seg-*.arrows"))  # the default area
        written = sum(f.stat().st_size for f in segments)
        assert len(info.endpoints) == len(segments) > 1 and written >= arrow_bytes * 0.9
        growth = peak - base
        print(
            f"\nspooled {arrow_bytes / 1e9:.2f} GB Arrow in {len(segments)} segments; server peak RSS "
            f"{peak >> 20} MiB (base {base >> 20} MiB, growth {growth >> 20} MiB)"
        )
        # The streaming scan's bound (test_memory_bound: 800 MiB for 1.4 GB), and well below the
        # result: a spool that collected it would grow by more than its Arrow size.
        assert peak < SCAN_LIMIT, f"spooling: server peak RSS {peak >> 20} MiB >= {SCAN_LIMIT >> 20} MiB"
        assert growth < arrow_bytes / 2, (
            f"the server grew {growth >> 20} MiB spooling {arrow_bytes >> 20} MiB"
        )
        rows = 0
        for endpoint in info.endpoints:
            for chunk in client.do_get(endpoint.ticket, options):
                rows += chunk.data.num_rows
        assert rows == ROWS
        assert isinstance(info, fl.FlightInfo)
    finally:
        proc.terminate()
        proc.wait(10)
