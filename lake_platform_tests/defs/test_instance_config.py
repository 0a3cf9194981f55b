"""dagster.yaml loads into a real instance with the settings the platform relies on, and the
code location validates in a subprocess the way CI's gate would run it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import dagster as dg
import yaml

from lake_platform.definitions import defs

REPO = Path(__file__).resolve().parents[2]


def test_dagster_yaml_limits_one_run_per_table() -> None:
    config = yaml.safe_load((REPO / "dagster.yaml").read_text())
    assert config["telemetry"] == {"enabled": False}
    with dg.instance_for_test(overrides=config) as instance:
        assert type(instance.run_coordinator).__name__ == "QueuedRunCoordinator"
        limits = instance.get_concurrency_config().run_queue_config.tag_concurrency_limits
        assert {"key": "dagster/partition", "value": {"applyLimitPerUniqueValue": True}, "limit": 1} in limits


def test_no_single_run_backfills_and_every_table_asset_shares_the_partitions() -> None:
    d = defs()
    graph = d.resolve_asset_graph()
    for key in graph.get_all_asset_keys():
        node = graph.get(key)
        assert node.backfill_policy is None or node.backfill_policy.max_partitions_per_run == 1
        if key.path[0] not in WAREHOUSE_WIDE:
            assert node.partitions_def is not None and node.partitions_def.name == "lake_tables"


#: Assets that work across tables (trash expiry, the warehouse-level folder scan, the reclaim of
#: spooled query results), unpartitioned.
WAREHOUSE_WIDE = {"expired_trash", "orphan_folder_report", "reclaimed_results"}


def test_the_warehouse_wide_assets_and_their_schedules_are_loaded() -> None:
    d = defs()
    assert {k.path[0] for k in d.resolve_asset_graph().get_all_asset_keys()} >= WAREHOUSE_WIDE
    assert {"orphan_folder_scan_schedule", "trash_expiry_schedule", "results_reclaim_schedule"} <= {
        s.name for s in d.schedules or []
    }


def test_definitions_validate_in_a_subprocess(tmp_path: Path) -> None:
    env = {
        **os.environ,
        "DAGSTER_HOME": str(tmp_path),
        "DAGSTER_DISABLE_TELEMETRY": "1",
        "LAKE_HOME": str(tmp_path / "lake"),
    }
    proc = subprocess.run(
        [sys.executable, "-m", "dagster", "definitions", "validate", "-w", str(REPO / "workspace.yaml")],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "Validation successful" in proc.stdout + proc.stderr
    assert not (tmp_path / "lake").exists()  # loading the definitions touched no lake storage
