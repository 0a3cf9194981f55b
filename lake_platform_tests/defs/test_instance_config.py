"""dagster.yaml loads into a real instance with the settings the platform relies on, and the
code location validates in a subprocess the way CI's gate would run it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import dagster as dg
import pytest
import yaml

from lake_platform.defs.definitions import build, defs
from lake_platform.defs.instance import instance_config
from lake_platform.errors import SettingsError
from lake_platform.settings import DagsterSettings, LakeSettings, dagster_settings
from lake_platform.up.launcher import prepare_dagster_home
from lake_platform_tests.postgres import Postgres

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


def test_postgres_url_gives_postgres_storage_and_stays_out_of_the_file(
    tmp_path: Path, postgres: Postgres, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Trust authentication ignores the password; it is there to show it never reaches the file.
    url = postgres.new_database().replace("postgres@", "postgres:s3cret-pw@")
    monkeypatch.setenv("LAKE_DAGSTER_POSTGRES_URL", url)
    home = prepare_dagster_home(LakeSettings(home=tmp_path / "lake", _env_file=None))  # type: ignore[call-arg]
    text = (home / "dagster.yaml").read_text()
    assert "s3cret-pw" not in text and "LAKE_DAGSTER_POSTGRES_URL" in text
    with dg.DagsterInstance.from_config(str(home)) as instance:
        assert type(instance.run_storage).__name__ == "PostgresRunStorage"
        assert type(instance.event_log_storage).__name__ == "PostgresEventLogStorage"
        assert type(instance.schedule_storage).__name__ == "PostgresScheduleStorage"
        limits = instance.get_concurrency_config().run_queue_config.tag_concurrency_limits
        assert {"key": "dagster/partition", "value": {"applyLimitPerUniqueValue": True}, "limit": 1} in limits
    assert not list(home.glob("**/*.db"))  # nothing went to SQLite


def test_without_the_url_the_instance_stays_on_sqlite(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("LAKE_DAGSTER_POSTGRES_URL", raising=False)
    assert instance_config(DagsterSettings(_env_file=None)) == yaml.safe_load(  # type: ignore[call-arg]
        (REPO / "dagster.yaml").read_text()
    )


def test_a_bad_postgres_url_is_a_settings_error_naming_the_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LAKE_DAGSTER_POSTGRES_URL", "mysql://u:secret@h/db")
    with pytest.raises(SettingsError, match="LAKE_DAGSTER_POSTGRES_URL") as err:
        dagster_settings()
    assert "secret" not in str(err.value)


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
