"""Policy records: set, unset, delete, show."""

from __future__ import annotations

import json

from click.testing import CliRunner

from lake_platform.cli import cli
from lake_platform_tests.cli.conftest import run


def test_policy_unset_and_delete(lake: CliRunner) -> None:
    run(lake, "policy", "set", "p.w", "retain_versions=4")
    run(lake, "policy", "set", "p.w.ns", "retain_versions=3", "retention=1d")
    unset = run(lake, "policy", "unset", "p.w.ns", "retention")
    assert unset["policy"]["retention_seconds"] == 7 * 86400 and unset["policy"]["retain_versions"] == 3
    assert run(lake, "policy", "delete", "p.w.ns") == {"deleted": "p.w.ns"}
    assert run(lake, "policy", "show", "p.w.ns", "--effective")["source"] == "p.w"
    for args, code in (
        (["policy", "delete", "p.w.ns"], 1),
        (["policy", "unset", "p.w", "nope"], 13),
        (["policy", "unset", "p.w.ns", "retention"], 1),
    ):
        result = lake.invoke(cli, ["--json", *args])
        assert result.exit_code != 0 and json.loads(result.output)["error"]["code"] == code, result.output
    for sub in ("unset", "delete"):
        help_text = lake.invoke(cli, ["policy", sub, "--help"])
        assert help_text.exit_code == 0 and "SCOPE" in help_text.output


def test_policy_set_takes_the_maintenance_intervals(lake: CliRunner) -> None:
    record = run(lake, "policy", "set", "p.w.ns", "cleanup_interval=6h", "orphan_scan_interval=2d")
    assert (
        record["policy"]["cleanup_interval_seconds"],
        record["policy"]["orphan_scan_interval_seconds"],
    ) == (
        6 * 3600,
        2 * 86400,
    )
    result = lake.invoke(cli, ["--json", "policy", "set", "p.w.ns", "orphan_scan_interval=10m"])
    error = json.loads(result.output)["error"]
    assert result.exit_code != 0 and (error["code"], error["error"]) == (13, "InvalidPolicyValue"), (
        result.output
    )
    assert "orphan_scan_interval must be at least 1h" in error["message"]
    assert run(lake, "policy", "show", "p.w.ns")["orphan_scan_interval_seconds"] == 2 * 86400


def test_policy_set_refuses_durations_out_of_range_by_type(lake: CliRunner) -> None:
    """Before: OverflowError and ValueError tracebacks, not the typed error (code 13)."""
    run(lake, "policy", "set", "p.w.ns", "retention=2d")
    for pair in ("retention=99999999999d", "trash_grace=²d", "target_rows_per_fragment=99999999999999"):
        result = lake.invoke(cli, ["--json", "policy", "set", "p.w.ns", pair])
        error = json.loads(result.output)["error"]
        assert result.exit_code != 0 and error["code"] == 13, result.output
    assert run(lake, "policy", "show", "p.w.ns")["retention_seconds"] == 2 * 86400
