"""The code location (lake_platform.defs.definitions): what it defines, that it validates in a
subprocess the way CI's gate runs it (touching no lake storage), and where its steps run."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import dagster as dg
import pytest

from lake_platform.defs import demo_assets
from lake_platform.defs.definitions import STEP_PRELOAD, build, defs
from lake_platform.errors import SettingsError
from lake_platform.settings import dagster_settings

REPO = Path(__file__).resolve().parents[2]


def test_no_single_run_backfills_and_every_table_asset_shares_the_partitions() -> None:
    d = defs()
    graph = d.resolve_asset_graph()
    for key in graph.get_all_asset_keys():
        node = graph.get(key)
        assert node.backfill_policy is None or node.backfill_policy.max_partitions_per_run == 1
        if key.path[0] not in WAREHOUSE_WIDE and key not in DEMO_PROJECT:
            assert node.partitions_def is not None and node.partitions_def.name == "lake_tables"


#: Assets that work across tables (trash expiry, the warehouse-level folder scan, the reclaim of
#: spooled query results), unpartitioned.
WAREHOUSE_WIDE = {"expired_trash", "orphan_folder_report", "reclaimed_results"}
#: The demo's user project (a table asset and a user asset written through the IO manager):
#: a user's assets, partitioned as the user likes.
DEMO_PROJECT = {a.key for a in demo_assets.ASSETS}


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


def test_the_definitions_load_without_dagster_s_preview_warnings() -> None:
    # Per-table asset checks are a preview feature; the code location silences that one warning
    # by its text, so any other preview warning still fails here.
    code = (
        "import warnings, dagster as dg; warnings.simplefilter('error', dg.PreviewWarning); "
        "import lake_platform.defs.definitions"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=300, check=False
    )
    assert proc.returncode == 0, proc.stderr


@pytest.mark.parametrize(
    "executor,name",
    [("in_process", "in_process"), ("multiprocess", "multiprocess"), ("k8s_job", "k8s"), ("ecs", "ecs")],
)
def test_the_executor_setting_picks_where_steps_run(
    executor: str, name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LAKE_DAGSTER_EXECUTOR", executor)
    monkeypatch.setenv("LAKE_DAGSTER_STEP_IO", "s3://bucket/steps")
    d = build()
    dg.Definitions.validate_loadable(d)
    job = d.resolve_implicit_global_asset_job_def()
    assert job.executor_def.name == name
    # Step outputs go to S3 whenever steps may run on other machines.
    assert type(d.resources["io_manager"]).__name__ == "S3PickleIOManager"


def test_steps_on_other_machines_need_step_io(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LAKE_DAGSTER_EXECUTOR", "k8s_job")
    monkeypatch.delenv("LAKE_DAGSTER_STEP_IO", raising=False)
    with pytest.raises(SettingsError, match="LAKE_DAGSTER_STEP_IO"):
        dagster_settings()
    monkeypatch.setenv("LAKE_DAGSTER_EXECUTOR", "threads")
    with pytest.raises(SettingsError, match="LAKE_DAGSTER_EXECUTOR"):
        dagster_settings()


#: What a step process must not import itself when its forkserver preloaded ``STEP_PRELOAD``.
STEP_IMPORTS = ("sqlalchemy", "alembic", "lance_namespace", "lake_platform.catalog", "pandas")
STEP = """
import importlib, sys
for name in sys.argv[1:]:
    importlib.import_module(name)
preloaded = set(sys.modules)
import dagster as dg
from lake_platform.catalog.catalog import Catalog
from lake_platform.settings import load_settings
with dg.DagsterInstance.get() as instance:  # what a step does before it starts: from_ref
    instance.get_run_records(limit=1)
with Catalog(load_settings()) as catalog:
    catalog.containers.create_project("p")
print("\\n".join(sorted(set(sys.modules) - preloaded)))
"""


def test_a_multiprocess_step_finds_its_instance_storage_and_catalog_preloaded(tmp_path: Path) -> None:
    """What the forkserver preloads covers what every step imports before its op runs: the
    instance's storage (SQLAlchemy, Alembic) and the catalog. A fresh interpreter stands in for
    a forked step, the preloaded modules imported first as the forkserver does."""
    env = {**os.environ, "DAGSTER_HOME": str(tmp_path), "LAKE_HOME": str(tmp_path / "lake")}
    env.pop("LAKE_DAGSTER_POSTGRES_URL", None)
    proc = subprocess.run(
        [sys.executable, "-c", STEP, *STEP_PRELOAD], env=env, capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr
    imported = proc.stdout.split()
    assert [m for m in imported if any(m == p or m.startswith(p + ".") for p in STEP_IMPORTS)] == []
