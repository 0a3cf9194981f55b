"""Compaction tasks fanned out over worker processes (spawned, each opening the table at the
planned version through the registry), then committed by the catalog."""

from __future__ import annotations

from pathlib import Path

from lake_platform.maintenance.compaction import compact_table, due
from lake_platform_tests.maintenance.helpers import make_lake, rows

TABLE = "p.w.ns.frag"


def test_tasks_run_in_worker_processes_and_commit_once(tmp_path: Path) -> None:
    catalog = make_lake(tmp_path / "home")
    try:
        catalog.create_table(TABLE, rows(0, 10).to_reader())
        for i in range(1, 6):
            catalog.append(TABLE, rows(10 * i, 10).to_reader())
        catalog.set_policy(TABLE, {"compact_min_fragments": 4, "target_rows_per_fragment": 20})
        assert due(catalog, TABLE)[0]
        before = catalog.open_table(TABLE)
        outcome = compact_table(catalog, TABLE, workers=2, actor="test")
        assert outcome.status == "committed", outcome
        assert outcome.tasks >= 2 and outcome.workers == 2
        assert outcome.fragments_before == 6 and outcome.fragments_after == 3
        after = catalog.open_table(TABLE)
        assert after.count_rows() == 60 and after.version == outcome.version > before.version
        assert sorted(after.to_reader().read_all().column("id").to_pylist()) == list(range(60))
        assert [e.operation for e in catalog.history(TABLE)][-2:] == ["compact", "compact#1"]
        assert not due(catalog, TABLE)[0]
        assert compact_table(catalog, TABLE, workers=2).status == "nothing-to-do"
    finally:
        catalog.close()
