"""How Dagster runs the platform's work (``LAKE_DAGSTER_*``)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, ValidationError, model_validator
from pydantic_settings import SettingsConfigDict

from lake_platform.settings.keywords import KeywordStrictSettings
from lake_platform.settings.lake import settings_error

DAGSTER_ENV_PREFIX = "LAKE_DAGSTER_"


class DagsterSettings(KeywordStrictSettings):
    """How Dagster runs the platform's work: where its steps execute, where their (small)
    outputs travel between steps, and where the instance keeps its state. Read when the code
    location loads and when the instance configuration is generated."""

    model_config = SettingsConfigDict(
        env_prefix=DAGSTER_ENV_PREFIX, env_file=".env", extra="ignore", validate_default=True, frozen=True
    )

    executor: Literal["in_process", "multiprocess", "k8s_job", "ecs"] = Field(
        "in_process",
        description="Where a run's steps (e.g. one per compaction task) execute: the run's process, "
        "one subprocess each, one Kubernetes pod each (k8s_job) or one ECS task each (ecs).",
    )
    max_concurrent_steps: int = Field(
        0, ge=0, le=256, description="Steps of one run at once (multiprocess/k8s_job/ecs); 0 = CPU count."
    )
    step_io: str = Field(
        "",
        description="s3://bucket/prefix where step outputs go when steps run on other machines "
        "(k8s_job, ecs); empty = files under DAGSTER_HOME.",
    )
    postgres_url: str = Field(
        "",
        description="postgresql://user:password@host:port/db for Dagster's run, event-log and "
        "schedule storage; empty = SQLite under DAGSTER_HOME.",
    )

    @model_validator(mode="after")
    def _check(self) -> DagsterSettings:
        if self.step_io and not self.step_io.startswith("s3://"):
            raise ValueError(f"step_io: expected s3://bucket/prefix, got {self.step_io!r}")
        if self.executor in ("k8s_job", "ecs") and not self.step_io:
            raise ValueError(f"step_io: executor {self.executor} runs steps on other machines; set it")
        if self.postgres_url and not self.postgres_url.startswith(("postgresql://", "postgres://")):
            raise ValueError("postgres_url: expected postgresql://user:password@host:port/db")
        return self


def dagster_settings(**overrides: Any) -> DagsterSettings:
    try:
        return DagsterSettings(**overrides)
    except ValidationError as exc:
        raise settings_error(exc, DAGSTER_ENV_PREFIX) from None
