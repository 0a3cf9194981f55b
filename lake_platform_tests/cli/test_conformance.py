"""``lake conformance URL``: the kit's table for people, ``--json`` for machines, the token from
the environment, the write prefix, and the exit status (1 when a check failed)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

from lake_platform.cli import cli
from lake_platform.conformance.run import ordered_checks
from lake_platform_tests.conformance.conftest import start_reference
from lake_platform_tests.rest.conftest import RestLake, start_rest_lake
from lake_platform_tests.servers import free_port


@pytest.fixture
def ours(tmp_path: Path) -> Iterator[RestLake]:
    yield from start_rest_lake(tmp_path)


@pytest.fixture
def reference(tmp_path: Path) -> Iterator[str]:
    yield from start_reference(tmp_path)


def test_json_against_ours_with_the_token_from_the_environment(ours: RestLake) -> None:
    result = CliRunner().invoke(
        cli,
        ["conformance", ours.url, "--namespace", "p$w", "--json"],
        env={"LAKE_CONFORMANCE_TOKEN": ours.tokens["admin"]},
    )
    data = json.loads(result.output)
    assert [f"{c['operation_id']}:{c['aspect']}" for c in data["checks"]] == [
        c.name for c in ordered_checks()
    ]
    assert data["namespace"][:2] == ["p", "w"] and data["namespace"][2].startswith("conformance_")
    outcomes = {f"{c['operation_id']}:{c['aspect']}": c["outcome"] for c in data["checks"]}
    # the token was sent (CreateNamespace needs it) and withheld for the one check that must not have it
    assert outcomes["CreateNamespace:success"] == outcomes["DescribeNamespace:Unauthenticated"] == "pass"
    assert data["cleaned_up"] is True
    assert result.exit_code == (1 if data["summary"]["fail"] else 0)


def test_the_table_for_people_against_the_reference(reference: str) -> None:
    result = CliRunner().invoke(cli, ["conformance", reference])
    lines = result.output.splitlines()
    assert lines[0].split() == ["operation", "check", "result", "detail"]
    assert lines[1].split()[:3] == ["CreateNamespace", "success", "pass"]
    assert any(line.split()[:4] == ["RenameTable", "success", "not", "supported"] for line in lines)
    assert lines[-1].startswith("operations: ") and lines[-1].endswith("; cleaned up")
    assert result.exit_code == 1  # the reference fails some checks (docs/rest.md, "Conformance")


def test_an_unreachable_server_is_an_error_not_a_table() -> None:
    result = CliRunner().invoke(cli, ["conformance", f"http://127.0.0.1:{free_port()}", "--timeout", "5"])
    assert result.exit_code == 1
    assert result.output.startswith("error [17 SERVICE_UNAVAILABLE]: cannot reach http://127.0.0.1:")
    assert "operation" not in result.output


@pytest.mark.parametrize(
    ("args", "message"),
    [
        # Once SERVICE_UNAVAILABLE 'cannot reach', after a urllib3 FutureWarning for the first.
        (["notaurl"], "URL notaurl: expected http://HOST[:PORT][/PATH] or https://..."),
        (["ftp://x"], "URL ftp://x: expected http://HOST[:PORT][/PATH] or https://..."),
        (["http://"], "URL http://: expected http://HOST[:PORT][/PATH] or https://..."),
        (["http://h:99999"], "URL http://h:99999: expected http://HOST[:PORT][/PATH] or https://..."),
        # Once INTERNAL (ValueError from the HTTP client).
        (
            ["http://127.0.0.1:1", "--timeout", "0"],
            "Invalid value for '--timeout': 0.0 is not in the range x>0.",
        ),
        (
            ["http://127.0.0.1:1", "--timeout", "-1"],
            "Invalid value for '--timeout': -1.0 is not in the range x>0.",
        ),
    ],
)
def test_a_bad_url_or_timeout_is_bad_input(args: list[str], message: str) -> None:
    result = CliRunner().invoke(cli, ["--json", "conformance", *args])
    assert result.exit_code == 2
    error = json.loads(result.stdout)["error"]
    assert error["code"] == 13 and error["message"].endswith(message)
    assert not result.stderr  # no warning from the HTTP client
