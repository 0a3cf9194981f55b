"""The Dagster instance configuration: dagster.yaml loads into a real instance with the settings the
platform relies on, an installed package (no checkout) writes the same, and Postgres storage
comes from LAKE_DAGSTER_POSTGRES_URL without the URL landing in the file."""

from __future__ import annotations

from pathlib import Path

import dagster as dg
import pytest
import yaml

from lake_platform.defs.instance import FALLBACK_DAGSTER_YAML, instance_config
from lake_platform.errors import SettingsError
from lake_platform.settings import DagsterSettings, LakeSettings, dagster_settings
from lake_platform.up.launcher import prepare_dagster_home
from lake_platform_tests.postgres import Postgres

REPO = Path(__file__).resolve().parents[2]


def test_dagster_yaml_limits_one_run_per_table() -> None:
    config = yaml.safe_load((REPO / "dagster.yaml").read_text())
    assert config["telemetry"] == {"enabled": False}
    with dg.instance_for_test(overrides=config) as instance:
        assert isinstance(instance.run_coordinator, dg.QueuedRunCoordinator)
        limits = instance.get_concurrency_config().run_queue_config.tag_concurrency_limits
        assert {"key": "dagster/partition", "value": {"applyLimitPerUniqueValue": True}, "limit": 1} in limits


def test_an_installed_package_writes_the_repository_s_instance_settings() -> None:
    assert yaml.safe_load(FALLBACK_DAGSTER_YAML) == yaml.safe_load((REPO / "dagster.yaml").read_text())
    with dg.instance_for_test(overrides=yaml.safe_load(FALLBACK_DAGSTER_YAML)) as instance:
        assert isinstance(instance.run_coordinator, dg.QueuedRunCoordinator)


def test_postgres_url_gives_postgres_storage_and_stays_out_of_the_file(
    tmp_path: Path, postgres: Postgres, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Trust authentication ignores the password; it is there to show it never reaches the file.
    url = postgres.new_database().replace("postgres@", "postgres:s3cret-pw@")
    monkeypatch.setenv("LAKE_DAGSTER_POSTGRES_URL", url)
    home = prepare_dagster_home(
        LakeSettings(home=tmp_path / "lake", _env_file=None),  # type: ignore[call-arg]
        ("127.0.0.1", 4000),
    )
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
