"""The ``lake`` command line, run in process through click's runner with a temp LAKE_HOME.

``lake`` is a runner on a fresh home with project ``p``, warehouse ``p.w`` and namespace ``p.w.ns``;
``run`` invokes a command with --json and returns what it printed, parsed.
"""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

from lake_platform.cli import cli

T = "p.w.ns.t"


@pytest.fixture
def lake(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> CliRunner:
    monkeypatch.setenv("LAKE_HOME", str(tmp_path / "home"))
    monkeypatch.chdir(tmp_path)
    runner = CliRunner()
    for args in (
        ["project", "create", "p"],
        ["warehouse", "create", "p.w"],
        ["namespace", "create", "p.w.ns"],
    ):
        result = runner.invoke(cli, args)
        assert result.exit_code == 0, result.output
    return runner


def run(runner: CliRunner, *args: str) -> dict | list:  # type: ignore[type-arg]
    result = runner.invoke(cli, ["--json", *args])
    assert result.exit_code == 0, result.output
    return json.loads(result.output)


def write_parquet(path: Path, ids: list[int]) -> Path:
    pq.write_table(pa.table({"id": pa.array(ids, pa.int64()), "name": [f"n{i}" for i in ids]}), path)
    return path
