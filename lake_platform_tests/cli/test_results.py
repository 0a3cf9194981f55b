"""``lake results expire``: deletes the expired spooled results of the lake's results area (the
same reclaim the servers and the Dagster asset run), keeps live ones, says what it removed."""

from __future__ import annotations

import time
from pathlib import Path

import pyarrow as pa
from click.testing import CliRunner

from lake_platform.cli import cli
from lake_platform.engine.results import ResultsArea
from lake_platform.maintenance.results import GRACE_SECONDS
from lake_platform.settings import load_settings
from lake_platform_tests.cli.conftest import run

SCHEMA = pa.schema([pa.field("id", pa.int64())])


def test_expire_removes_expired_results_and_keeps_live_ones(lake: CliRunner, tmp_path: Path) -> None:
    area = ResultsArea.of(load_settings())  # the CLI's own settings (LAKE_HOME of the fixture)
    assert Path(area.root) == tmp_path / "home" / "results"
    now = time.time()
    area.create_job("p", "a" * 32, now - GRACE_SECONDS - 1, SCHEMA)
    area.create_job("p", "b" * 32, now + 3600, SCHEMA)
    out = run(lake, "results", "expire")
    assert out["root"] == area.root and out["kept"] == 1
    assert [(d["project"], d["job"]) for d in out["deleted"]] == [("p", "a" * 32)]
    assert [e.job for e in area.jobs()] == ["b" * 32]
    area.create_job("p", "c" * 32, now - GRACE_SECONDS - 1, SCHEMA)
    said = lake.invoke(cli, ["results", "expire"])
    assert said.exit_code == 0
    assert said.output.startswith(f"deleted 1 expired results under {area.root}, kept 1")
    assert "c" * 32 in said.output
    assert run(lake, "results", "expire")["deleted"] == []
