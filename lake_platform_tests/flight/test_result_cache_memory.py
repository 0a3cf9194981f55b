"""The result cache's budget bounds the server's memory: 120 distinct queries of ~1.3 MiB results
each (~151 MiB in all) through a server whose result cache may keep 8 MiB grow it at least half
of that less than through a control server whose budget keeps them all (measured: +68 MiB
against +204 MiB, and +55 MiB with the result cache off), and its own accounting never passes
the budget."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.flight as fl
import pytest

from lake_platform_tests.flight.conftest import build_catalog, fetch, login, plan
from lake_platform_tests.flight.server_process import spawn
from lake_platform_tests.flight.test_cache_memory import ROWS, wide_rows
from lake_platform_tests.flight.test_memory_bound import reset_hwm, vm_hwm

pytestmark = pytest.mark.slow

BUDGET = 8 << 20
RANGES = 40
VARIANTS = 3  # the same rows under different SQL: a key each
QUERIES = RANGES * VARIANTS


def serve_and_query(home: Path, budget: int) -> tuple[int, int, dict[str, int]]:
    """Run every query twice through a server with this result cache budget: its peak RSS
    growth, the result bytes streamed, and its result cache's statistics."""
    proc, port = spawn(
        home,
        "cache_bytes=0",  # the snapshot cache off: only results are kept
        f"result_cache_bytes={budget}",
        "result_cache_entry_bytes=4194304",
        "memory_limit_bytes=268435456",
        "operator_project=p",  # the health action's result cache figures: an operator's
    )
    try:
        client, options = login(f"grpc://127.0.0.1:{port}")
        assert fetch(client, options, plan(client, options, "SELECT count(*) AS n FROM w.ns.t")).num_rows == 1
        reset_hwm(proc.pid)
        before = vm_hwm(proc.pid)
        step = ROWS // RANGES
        streamed = 0
        for _ in range(2):
            for v in range(VARIANTS):
                for i in range(RANGES):
                    where = f"id >= {i * step} AND id < {(i + 1) * step}"
                    sql = f"SELECT s, {v} AS v FROM w.ns.wide0 WHERE {where}"
                    got = fetch(client, options, plan(client, options, sql))
                    assert got.num_rows == step
                    streamed += got.nbytes
        [result] = list(client.do_action(fl.Action("health", b""), options))
        return vm_hwm(proc.pid) - before, streamed // 2, json.loads(result.body.to_pybytes())["result_cache"]
    finally:
        proc.terminate()
        proc.wait(10)


@pytest.mark.slow
def test_peak_rss_stays_within_the_result_cache_budget(tmp_path: Path) -> None:
    home = tmp_path / "home"
    _, catalog = build_catalog(home)
    catalog.tables.create_table("p.w.ns.wide0", wide_rows(0))
    catalog.close()
    grown, total, stats = serve_and_query(home, BUDGET)
    assert total > 12 * BUDGET
    assert stats["used_bytes"] <= BUDGET and stats["evictions"] >= QUERIES - BUDGET // (1 << 20)
    control, _, kept = serve_and_query(home, 4 * total)  # keeps them all (and the count(*))
    assert kept["entries"] == QUERIES + 1 and kept["hits"] == QUERIES and kept["evictions"] == 0
    assert grown + total // 2 < control, (
        f"the server grew {grown >> 20} MiB with an {BUDGET >> 20} MiB result cache, {control >> 20} MiB "
        f"with room for all {total >> 20} MiB of results"
    )
