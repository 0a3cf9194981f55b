"""The snapshot cache's budget bounds the server's memory: four hot tables of ~50 MiB each (decoded),
a 64 MiB budget. The server process's peak RSS while all four are queried and loaded (each
evicting the one before) stays at least one table below a control server whose budget keeps
all four (measured: +127-170 MiB against +256 MiB), and its own accounting never passes the
budget."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.flight as fl
import pytest

from lake_platform_tests.flight.conftest import build_catalog, fetch, login, plan, wait_until
from lake_platform_tests.flight.server_process import spawn
from lake_platform_tests.flight.test_memory_bound import reset_hwm, vm_hwm

pytestmark = pytest.mark.slow

ROWS = 1_000_000
BUDGET = 64 << 20


def wide_rows(seed: int) -> pa.RecordBatchReader:
    """~56 MiB decoded: an id and a 40-character string per row."""
    schema = pa.schema([("id", pa.int64()), ("s", pa.string())])

    def batches() -> Iterator[pa.RecordBatch]:
        for start in range(0, ROWS, 100_000):
            ids = pa.array(range(start, start + 100_000), pa.int64())
            text = pc.binary_join_element_wise(pc.cast(ids, pa.string()), f"-{seed:03d}-" + "x" * 30, "")
            yield pa.record_batch([ids, text], schema=schema)

    return pa.RecordBatchReader.from_batches(schema, batches())


def serve_and_query(home: Path, budget: int) -> tuple[int, dict[str, int]]:
    """Query the four tables twice each through a server with this cache budget (each load
    evicting what no longer fits); its peak RSS growth over the run and its cache statistics."""
    proc, port = spawn(
        home,
        f"cache_bytes={budget}",
        "memory_limit_bytes=268435456",
        "snapshot_ttl_seconds=0.1",
        "operator_project=p",  # the health action's cache figures: an operator's
    )
    try:
        client, options = login(f"grpc://127.0.0.1:{port}")

        def cache() -> dict[str, int]:
            [result] = list(client.do_action(fl.Action("health", b""), options))
            return json.loads(result.body.to_pybytes())["cache"]

        assert fetch(client, options, plan(client, options, "SELECT count(*) AS n FROM w.ns.t")).num_rows == 1
        reset_hwm(proc.pid)
        before = vm_hwm(proc.pid)
        for i in range(4):
            sql = f"SELECT count(*) AS n FROM w.ns.wide{i}"
            assert fetch(client, options, plan(client, options, sql)).column("n")[0].as_py() == ROWS
            assert wait_until(lambda i=i: cache()["loads"] == i + 1, timeout=120)
            hits = cache()["hits"]

            def served_from_cache(sql: str = sql, hits: int = hits) -> bool:
                # A plan kept from before the load (same snapshot view) may serve one more query
                # from Lance; the next planning reads the cached snapshot.
                assert fetch(client, options, plan(client, options, sql)).column("n")[0].as_py() == ROWS
                return cache()["hits"] > hits

            assert wait_until(served_from_cache, timeout=60)
        return vm_hwm(proc.pid) - before, cache()
    finally:
        proc.terminate()
        proc.wait(10)


@pytest.mark.slow
def test_peak_rss_stays_within_the_budget(tmp_path: Path) -> None:
    home = tmp_path / "home"
    settings, catalog = build_catalog(home)
    sizes = []
    for i in range(4):
        catalog.tables.create_table(f"p.w.ns.wide{i}", wide_rows(i))
        catalog.policies.set_policy(f"p.w.ns.wide{i}", {"cache": "hot"})
        sizes.append(pa.Table.from_batches(list(wide_rows(i))).nbytes)
    catalog.close()
    total = sum(sizes)
    assert all(BUDGET > s > BUDGET // 2 for s in sizes)  # one fits, two do not
    grown, stats = serve_and_query(home, BUDGET)
    assert stats["entries"] == 1 and stats["evictions"] == 3 and stats["hits"] >= 4
    assert stats["peak_bytes"] <= BUDGET and stats["used_bytes"] <= BUDGET
    # The control, in the same conditions: a budget that keeps all four tables. The bounded server
    # must stay at least a table's worth below it: it holds one table (two while the next one
    # loads and the last is not yet evicted) where the control holds four; the rest of both
    # processes' growth, scan buffers and allocator pages, is alike.
    control, unbounded = serve_and_query(home, 2 * total)
    assert unbounded["entries"] == 4 and unbounded["evictions"] == 0
    assert grown + min(sizes) < control, (
        f"the server grew {grown >> 20} MiB with a {BUDGET >> 20} MiB cache, {control >> 20} MiB with "
        f"room for all {total >> 20} MiB of tables"
    )
