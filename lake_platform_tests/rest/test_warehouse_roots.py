"""CreateWarehouse over REST (a real uvicorn server) obeys the allowed-roots rule: a project
admin cannot root a warehouse outside LAKE_WAREHOUSE_ROOTS, inside another tenant's warehouse,
LAKE_HOME, the inbox or the results area; each refusal is 400 InvalidInput and writes nothing."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from lake_platform_tests.rest.conftest import RestLake, start_rest_lake


@pytest.fixture
def lake(tmp_path: Path) -> Iterator[RestLake]:
    # Allowed: the home's default root and a second disk (so LAKE_HOME, the inbox and the results
    # area are reachable only through the rule, not because they are outside every allowed root).
    roots = f"{tmp_path / 'home' / 'warehouse'},{tmp_path}"
    yield from start_rest_lake(
        tmp_path, warehouse_roots=roots, inbox=str(tmp_path / "inbox"), results_root=str(tmp_path / "results")
    )


@pytest.mark.parametrize(
    ("root", "rule"),
    [
        ("/etc", "outside the allowed warehouse roots"),
        ("{tmp}/../etc", "'..' is not allowed"),
        ("{tmp}/link/w", "outside the allowed warehouse roots"),
        ("{tmp}/home/warehouse/q/w/mine", "is inside another warehouse's root"),
        ("{tmp}/home/warehouse/q", "contains another warehouse's root"),
        ("{tmp}/home/w", "is inside LAKE_HOME"),
        ("{tmp}/inbox/w", "is inside the inbox"),
        ("{tmp}/results/w", "is inside the results area"),
    ],
)
def test_a_refused_root_is_400_and_writes_nothing(
    lake: RestLake, tmp_path: Path, root: str, rule: str
) -> None:
    os.symlink("/etc", tmp_path / "link")  # out of every allowed root
    root = root.format(tmp=tmp_path)
    existed = os.path.lexists(root)
    resp = lake.post("/v1/warehouses/p$x/create", {"root": root}, who="admin")
    assert resp.status_code == 400, resp.text
    assert resp.json()["code"] == 13 and rule in resp.text
    assert lake.get("/v1/warehouses").json()["warehouses"] == ["p$w"]
    assert not os.path.lexists("/etc/w")
    assert os.path.lexists(root) == existed


def test_an_allowed_root_is_created_and_stored_canonical(lake: RestLake, tmp_path: Path) -> None:
    (tmp_path / "disk2").mkdir()
    os.symlink(tmp_path / "disk2", tmp_path / "alias")
    resp = lake.post("/v1/warehouses/p$x/create", {"root": str(tmp_path / "alias" / "w")}, who="admin")
    assert resp.status_code == 200, resp.text
    assert resp.json()["root"] == (tmp_path / "disk2" / "w").resolve().as_posix()
