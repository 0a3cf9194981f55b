"""The Dagster instance configuration (``$DAGSTER_HOME/dagster.yaml``): the repository's
``dagster.yaml`` (telemetry off, queued runs, one run per table at a time), plus Postgres run,
event-log and schedule storage when ``LAKE_DAGSTER_POSTGRES_URL`` is set.

The URL itself never lands in the file: the storage block names the variable, and Dagster reads
it in every process that loads the instance (webserver, daemon, run and step workers)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from lake_platform.settings import DAGSTER_ENV_PREFIX, DagsterSettings

REPO_DAGSTER_YAML = Path(__file__).resolve().parents[2] / "dagster.yaml"
#: The same settings as the repository's dagster.yaml, for an installed package (no checkout).
FALLBACK_DAGSTER_YAML = """\
telemetry:
  enabled: false
run_coordinator:
  module: dagster
  class: QueuedRunCoordinator
  config:
    dequeue_use_threads: true
    dequeue_num_workers: 4
concurrency:
  runs:
    max_concurrent_runs: 4
    tag_concurrency_limits:
      - key: "dagster/partition"
        value:
          applyLimitPerUniqueValue: true
        limit: 1
sensors:
  use_threads: true
  num_workers: 4
"""
POSTGRES_URL_VAR = f"{DAGSTER_ENV_PREFIX}POSTGRES_URL"


def storage_config(settings: DagsterSettings) -> dict[str, Any]:
    """The ``storage`` block: Postgres (URL read from the environment) or nothing (SQLite)."""
    if not settings.postgres_url:
        return {}
    return {"storage": {"postgres": {"postgres_url": {"env": POSTGRES_URL_VAR}}}}


def base_yaml() -> str:
    return REPO_DAGSTER_YAML.read_text() if REPO_DAGSTER_YAML.is_file() else FALLBACK_DAGSTER_YAML


def instance_yaml(settings: DagsterSettings) -> str:
    """The dagster.yaml text for these settings (the base file's comments kept)."""
    import yaml

    text = base_yaml()
    extra = storage_config(settings)
    if extra:
        text += "\n# Postgres storage (LAKE_DAGSTER_POSTGRES_URL is set).\n" + yaml.safe_dump(extra)
    return text


def instance_config(settings: DagsterSettings) -> dict[str, Any]:
    import yaml

    config: dict[str, Any] = yaml.safe_load(instance_yaml(settings))
    return config
