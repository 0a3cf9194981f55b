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
