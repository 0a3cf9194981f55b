"""infra/ecs/: the CloudFormation stack (and the DynamoDB template it nests) passes cfn-lint
offline; the ECS instance configuration loads into a real Dagster instance (Postgres storage,
an EcsRunLauncher built against ECS's API on a local moto server, over the stack's run task
definition); every task's command is one the image's entry point (`lake`) accepts."""

from __future__ import annotations

import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import dagster as dg
import pytest
import yaml
from dagster_aws.ecs import EcsRunLauncher

from lake_platform.cli import cli
from lake_platform_tests.postgres import Postgres
from lake_platform_tests.servers import start_moto_server

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


@pytest.fixture
def ecs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """ECS's API on a moto server of this test's own; Dagster's boto3 clients find it through
    the environment (AWS_ENDPOINT_URL_ECS), as they would find AWS."""
    endpoint, stop = start_moto_server(tmp_path / "moto")
    for name, value in (
        ("AWS_ENDPOINT_URL_ECS", endpoint),
        ("AWS_ACCESS_KEY_ID", "test"),
        ("AWS_SECRET_ACCESS_KEY", "test"),
        ("AWS_DEFAULT_REGION", "eu-west-1"),
    ):
        monkeypatch.setenv(name, value)
    try:
        yield endpoint
    finally:
        stop()


def register_the_run_task_definition(endpoint: str) -> str:
    """The stack's run task definition (its sizes and its containers by name) registered on
    ``endpoint``."""
    run_task = template(STACK)["Resources"]["RunTaskDefinition"]["Properties"]
    client = boto3.client("ecs", endpoint_url=endpoint)
    registered = client.register_task_definition(
        family="lake-run",
        requiresCompatibilities=run_task["RequiresCompatibilities"],
        networkMode=run_task["NetworkMode"],
        cpu=run_task["Cpu"],
        memory=run_task["Memory"],
        containerDefinitions=[{"name": c["Name"], "image": "lake"} for c in run_task["ContainerDefinitions"]],
    )
    arn: str = registered["taskDefinition"]["taskDefinitionArn"]
    return arn


def test_the_ecs_instance_config_loads_with_postgres_and_the_ecs_run_launcher(
    tmp_path: Path, postgres: Postgres, ecs: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LAKE_DAGSTER_POSTGRES_URL", postgres.new_database())
    monkeypatch.setenv("LAKE_ECS_RUN_TASK_DEFINITION", register_the_run_task_definition(ecs))
    shutil.copy(ECS / "dagster.yaml", tmp_path / "dagster.yaml")
    with dg.DagsterInstance.from_config(str(tmp_path)) as instance:
        # Built from the file's config: the launcher checked that the task definition it was
        # given (by the environment, as the stack does) has the container it will override.
        launcher = instance.run_launcher
        assert isinstance(launcher, EcsRunLauncher)
        assert launcher.task_definition.endswith("task-definition/lake-run:1")
        assert launcher.container_name == "run"
        assert type(instance.run_storage).__name__ == "PostgresRunStorage"
        limits = instance.get_concurrency_config().run_queue_config.tag_concurrency_limits
        ours = yaml.safe_load((REPO / "dagster.yaml").read_text())["concurrency"]["runs"]
        assert limits == ours["tag_concurrency_limits"]
        # Queued runs launch side by side, as under lake up (the coordinator accepts the keys).
        assert (
            instance.run_coordinator.inst_data.config_dict
            == yaml.safe_load((REPO / "dagster.yaml").read_text())["run_coordinator"]["config"]
        )


def test_a_run_launcher_setting_the_launcher_does_not_take_is_refused(
    tmp_path: Path, postgres: Postgres, ecs: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LAKE_DAGSTER_POSTGRES_URL", postgres.new_database())
    monkeypatch.setenv("LAKE_ECS_RUN_TASK_DEFINITION", register_the_run_task_definition(ecs))
    config = yaml.safe_load((ECS / "dagster.yaml").read_text())
    config["run_launcher"]["config"]["cpu"] = 1  # run_resources.cpu is the setting
    (tmp_path / "dagster.yaml").write_text(yaml.safe_dump(config))
    with (
        dg.DagsterInstance.from_config(str(tmp_path)) as instance,
        pytest.raises(dg.DagsterInvalidConfigError, match="cpu"),
    ):
        instance.run_launcher  # noqa: B018 - building it is what is tested


def test_the_serving_tasks_send_the_query_audit_to_their_log_stream() -> None:
    """Unset, LAKE_AUDIT_LOG is a file in the container's writable layer: Fargate drops it with
    the task (and it grows there unbounded); docs/deploy.md says ``-``, the awslogs stream."""
    resources = template(STACK)["Resources"]
    serving = [
        container
        for r in resources.values()
        if r["Type"] == "AWS::ECS::TaskDefinition"
        for container in r["Properties"]["ContainerDefinitions"]
        if (container.get("Command") or [""])[0] in ("serve-flight", "serve-rest")
    ]
    assert serving
    for container in serving:
        env = {e["Name"]: e["Value"] for e in container["Environment"]}
        assert env.get("LAKE_AUDIT_LOG") == "-", container["Name"]
