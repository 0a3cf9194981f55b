"""``lake warehouse create``: a root the allowed-roots rule refuses is a typed error (code 13)
naming the root and the rule, and nothing is registered or created."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from click.testing import CliRunner

from lake_platform.catalog.catalog import Catalog
from lake_platform.cli import cli
from lake_platform.settings import load_settings
from lake_platform_tests.cli.conftest import run


@pytest.mark.parametrize(
    ("root", "rule"),
    [
        ("{tmp}/elsewhere/w", "outside the allowed warehouse roots"),
        ("{tmp}/home/warehouse/p/../../../elsewhere", "'..' is not allowed"),
        ("{tmp}/home/warehouse/link/w", "outside the allowed warehouse roots"),
        ("{tmp}/home/warehouse/p/w/inner", "is inside another warehouse's root"),
        ("{tmp}/home/warehouse/p", "contains another warehouse's root"),
    ],
)
def test_a_refused_root_is_an_error_and_writes_nothing(
    lake: CliRunner, tmp_path: Path, root: str, rule: str
) -> None:
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "home" / "warehouse").mkdir(exist_ok=True)  # p.w's root made it
    os.symlink(tmp_path / "elsewhere", tmp_path / "home" / "warehouse" / "link")
    root = root.format(tmp=tmp_path)
    existed = os.path.lexists(root)
    result = lake.invoke(cli, ["--json", "warehouse", "create", "p.x", "--root", root])
    assert result.exit_code != 0
    error = json.loads(result.output)["error"]
    assert error["code"] == 13 and rule in error["message"] and "warehouse root" in error["message"]
    assert list((tmp_path / "elsewhere").iterdir()) == []
    assert os.path.lexists(root) == existed
    with Catalog(load_settings()) as catalog:
        assert catalog.inventory.warehouses("p") == ["p.w"]


def test_lake_home_and_the_inbox_are_refused(
    lake: CliRunner, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LAKE_WAREHOUSE_ROOTS", str(tmp_path))
    monkeypatch.setenv("LAKE_INBOX", str(tmp_path / "inbox"))
    monkeypatch.setenv("LAKE_RESULTS_ROOT", str(tmp_path / "results"))  # by default under LAKE_HOME
    for root, rule in (
        (tmp_path / "home" / "w", "is inside LAKE_HOME"),
        (tmp_path / "inbox" / "w", "is inside the inbox"),
        (tmp_path / "results" / "w", "is inside the results area"),
    ):
        result = lake.invoke(cli, ["--json", "warehouse", "create", "p.x", "--root", str(root)])
        assert json.loads(result.output)["error"]["code"] == 13 and rule in result.output
        assert not root.exists()
    created = run(lake, "warehouse", "create", "p.x", "--root", str(tmp_path / "disk2" / "w"))
    assert created["root"] == (tmp_path / "disk2" / "w").resolve().as_posix()  # type: ignore[index]


# -- listings (issue 49) ---------------------------------------------------------------------------


def test_projects_warehouses_and_namespaces_are_listed(lake: CliRunner) -> None:
    for args in (
        ["namespace", "create", "p.w.ns.sub"],
        ["warehouse", "create", "p.w2"],
        ["project", "create", "q"],
        ["warehouse", "create", "q.w"],
        ["namespace", "create", "q.w.ns"],
    ):
        run(lake, *args)
    assert [p["name"] for p in run(lake, "project", "list")] == ["p", "q"]  # type: ignore[index]
    warehouses = run(lake, "warehouse", "list", "p")
    assert [w["name"] for w in warehouses] == ["p.w", "p.w2"]  # type: ignore[index]
    assert all(w["root"] and w["created_at_ms"] > 0 and w["state"] == "active" for w in warehouses)  # type: ignore[index]
    assert [w["name"] for w in run(lake, "warehouse", "list")] == ["p.w", "p.w2", "q.w"]  # type: ignore[index]
    assert [n["name"] for n in run(lake, "namespace", "list")] == ["p.w.ns", "p.w.ns.sub", "q.w.ns"]  # type: ignore[index]
    assert [n["name"] for n in run(lake, "namespace", "list", "p.w.ns")] == ["p.w.ns.sub"]  # type: ignore[index]
    # --json anywhere on the line, and the text form
    result = lake.invoke(cli, ["namespace", "list", "q", "--json"])
    assert [n["name"] for n in json.loads(result.output)] == ["q.w.ns"]
    text = lake.invoke(cli, ["warehouse", "list", "q"]).output
    assert text.splitlines()[0].split() == ["name", "root", "protected", "state", "created"]
    assert "q.w" in text
    assert lake.invoke(cli, ["namespace", "list", "p.w2"]).output.strip() == "no namespaces"


@pytest.mark.parametrize(
    ("args", "code"),
    [
        (["warehouse", "list", "nope"], 1),
        (["warehouse", "list", "Nope"], 13),
        (["namespace", "list", "p.nope"], 1),
        (["namespace", "list", "p..w"], 13),
    ],
)
def test_a_listing_of_an_unknown_or_bad_name_is_a_typed_error(
    lake: CliRunner, args: list[str], code: int
) -> None:
    result = lake.invoke(cli, ["--json", *args])
    assert result.exit_code != 0 and json.loads(result.output)["error"]["code"] == code
