"""infra/ecs/: the CloudFormation stack (and the DynamoDB template it nests) passes cfn-lint
offline; the ECS instance configuration loads into a real Dagster instance (Postgres storage,
EcsRunLauncher); every task's command is one the image's entry point (`lake`) accepts."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import dagster as dg
import pytest
import yaml
from dagster._config import process_config
from dagster_aws.ecs import EcsRunLauncher

from lake_platform.cli import cli
from lake_platform_tests.postgres import Postgres

REPO = Path(__file__).resolve().parents[2]
ECS = REPO / "infra" / "ecs"
STACK = ECS / "lake-platform.yaml"
REGISTRY = REPO / "infra" / "dynamodb-registry.yaml"


class CfnLoader(yaml.SafeLoader):
    """Reads CloudFormation's short-form tags (!Ref, !Sub, ...) as plain values."""


CfnLoader.add_multi_constructor("!", lambda loader, suffix, node: None)


def template(path: Path) -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.load(path.read_text(), Loader=CfnLoader)  # noqa: S506 - safe loader subclass
    return loaded


def cfn_lint(*paths: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(Path(sys.executable).parent / "cfn-lint"), *map(str, paths)],
        capture_output=True,
        text=True,
        timeout=600,
    )


def test_the_stacks_pass_cfn_lint() -> None:
    result = cfn_lint(STACK, REGISTRY)
    assert result.returncode == 0, result.stdout + result.stderr


def test_cfn_lint_catches_a_broken_stack(tmp_path: Path) -> None:
    broken = tmp_path / "broken.yaml"
    broken.write_text(
        STACK.read_text().replace("      DesiredCount: 1\n", "      DesiredCount: 1\n      Replicas: 3\n", 1)
    )
    result = cfn_lint(broken)
    assert result.returncode != 0 and "Replicas" in result.stdout


def test_the_nested_registry_stack_provides_what_the_stack_uses() -> None:
    stack, registry = template(STACK), template(REGISTRY)
    nested = stack["Resources"]["Registry"]
    assert nested["Type"] == "AWS::CloudFormation::Stack"
    assert set(nested["Properties"]["Parameters"]) <= set(registry["Parameters"])
    text = STACK.read_text()
    for output in ("TableArn", "TableName"):
        assert f"Registry.Outputs.{output}" in text and output in registry["Outputs"]


def test_every_task_runs_a_command_lake_accepts() -> None:
    resources = template(STACK)["Resources"]
    commands = [
        container.get("Command")
        for r in resources.values()
        if r["Type"] == "AWS::ECS::TaskDefinition"
        for container in r["Properties"]["ContainerDefinitions"]
    ]
    assert [c for c in commands if c] and None in commands  # the run task takes the launcher's command
    for command in filter(None, commands):
        assert command[0] in cli.commands, command


def test_the_ecs_instance_config_loads_with_postgres_and_the_ecs_run_launcher(
    tmp_path: Path, postgres: Postgres, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LAKE_DAGSTER_POSTGRES_URL", postgres.new_database())
    monkeypatch.setenv(
        "LAKE_ECS_RUN_TASK_DEFINITION", "arn:aws:ecs:eu-west-1:123456789012:task-definition/x-run:1"
    )
    config = yaml.safe_load((ECS / "dagster.yaml").read_text())
    # The launcher asks ECS for account settings when it is built: check its config offline
    # against the launcher's own schema, and load everything else into a real instance.
    launcher = config.pop("run_launcher")
    assert (launcher["module"], launcher["class"]) == ("dagster_aws.ecs", "EcsRunLauncher")
    checked = process_config(EcsRunLauncher.config_type(), launcher["config"])
    assert checked.success, checked.errors
    assert checked.value["container_name"] == "run"
    assert not process_config(EcsRunLauncher.config_type(), {**launcher["config"], "cpu": 1}).success
    (tmp_path / "dagster.yaml").write_text(yaml.safe_dump(config))
    with dg.DagsterInstance.from_config(str(tmp_path)) as instance:
        assert type(instance.run_storage).__name__ == "PostgresRunStorage"
        limits = instance.get_concurrency_config().run_queue_config.tag_concurrency_limits
        ours = yaml.safe_load((REPO / "dagster.yaml").read_text())["concurrency"]["runs"]
        assert limits == ours["tag_concurrency_limits"]
