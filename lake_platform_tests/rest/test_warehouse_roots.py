"""CreateWarehouse over REST (a real uvicorn server) obeys the allowed-roots rule: a project
admin cannot root a warehouse outside LAKE_WAREHOUSE_ROOTS, inside another warehouse, the inbox
or the results area (400 InvalidInput), outside its own project's folder of an allowed root, or
at a folder holding files (403 PermissionDenied); each refusal writes nothing."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests

from lake_platform.naming import WarehouseName
from lake_platform.registry import keys
from lake_platform_tests.rest.conftest import RestLake, start_rest_lake


@pytest.fixture
def lake(tmp_path: Path) -> Iterator[RestLake]:
    # Allowed: the home's default root and a second disk, on which the inbox and the results area
    # sit in p's folder (so p's admin reaches them only through the rule, not because they are
    # outside every allowed root or p's folder).
    roots = f"{tmp_path / 'home' / 'warehouse'},{tmp_path}"
    yield from start_rest_lake(
        tmp_path,
        warehouse_roots=roots,
        inbox=str(tmp_path / "p" / "inbox"),
        results_root=str(tmp_path / "p" / "results"),
    )


@pytest.mark.parametrize(
    ("root", "rule"),
    [
        ("/etc", "outside the allowed warehouse roots"),
        ("{tmp}/../etc", "'..' is not allowed"),
        ("{tmp}/link/w", "outside the allowed warehouse roots"),
        ("{tmp}/home/warehouse/p/w/mine", "is inside another warehouse's root"),
        ("{tmp}/home/warehouse/p", "contains another warehouse's root"),
        ("{tmp}/p/inbox/w", "is inside the inbox"),
        ("{tmp}/p/results/w", "is inside the results area"),
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
    (tmp_path / "p" / "disk2").mkdir(parents=True)
    os.symlink(tmp_path / "p" / "disk2", tmp_path / "p" / "alias")
    resp = lake.post("/v1/warehouses/p$x/create", {"root": str(tmp_path / "p" / "alias" / "w")}, who="admin")
    assert resp.status_code == 200, resp.text
    assert resp.json()["root"] == (tmp_path / "p" / "disk2" / "w").resolve().as_posix()


@pytest.mark.parametrize(
    "root",
    [
        "{tmp}/home/warehouse/q/later",  # where q's next default warehouse goes
        "{tmp}/home/warehouse/r/w",  # a project that does not exist yet
        "{tmp}/q/w",  # q's folder of the second allowed root
        "{tmp}/shared",  # no project's folder at all: would squat the whole disk's layout
        "{tmp}/home/warehouse/p2/w",  # a name p is only the start of
        "{tmp}/p/sneak/w",  # a link in p's folder to q's, followed
    ],
)
def test_a_project_admin_may_root_only_in_its_projects_folder(
    lake: RestLake, tmp_path: Path, root: str
) -> None:
    """Project p's admin squatting where another project's warehouses are put (a default
    <LAKE_WAREHOUSE_ROOT>/q/NAME would then be refused as inside p's root) is 403, nothing made."""
    (tmp_path / "p").mkdir()
    os.symlink(tmp_path / "q", tmp_path / "p" / "sneak")
    root = root.format(tmp=tmp_path)
    resp = lake.post("/v1/warehouses/p$x/create", {"root": root}, who="admin")
    assert resp.status_code == 403, resp.text
    assert resp.json()["code"] == 15 and "only inside its project's folder" in resp.text
    assert lake.get("/v1/warehouses", who="admin").json()["warehouses"] == ["p$w"]
    assert not os.path.lexists(root)
    for mine in (f"{tmp_path}/home/warehouse/p/x", f"{tmp_path}/p/y"):
        name = "x" if mine.endswith("x") else "y"
        assert lake.post(f"/v1/warehouses/p${name}/create", {"root": mine}, who="admin").status_code == 200


def test_a_project_admin_may_not_root_at_a_folder_holding_files(lake: RestLake, tmp_path: Path) -> None:
    """Another tenant's leftovers (here: a Lance dataset of p's, under a warehouse p dropped)
    cannot be rooted again by q's admin and adopted with RegisterTable: 403, nothing made."""
    import lance
    import pyarrow as pa

    old = tmp_path / "q" / "old"  # placed there by the operator, or by any admin before this rule
    lake.catalog.containers.create_warehouse("p.old", root=str(old))
    lance.write_dataset(pa.table({"secret": ["p's data"]}), str(old / "ns" / "t.lance"))
    lake.catalog.containers.drop_warehouse("p.old")
    admin_q = lake.catalog.access.create_token("qboss", project="q", role="admin")[1]
    headers = {"Authorization": f"Bearer {admin_q}"}
    before = sorted(str(p) for p in old.rglob("*"))
    resp = requests.post(
        f"{lake.url}/v1/warehouses/q$x/create", json={"root": str(old)}, headers=headers, timeout=60
    )
    assert resp.status_code == 403, resp.text
    assert resp.json()["code"] == 15 and "holds files" in resp.text
    assert lake.catalog.store.get(keys.warehouse(WarehouseName.parse("q.x"))) is None
    assert sorted(str(p) for p in old.rglob("*")) == before
    # An empty folder is fine, and so is the operator's own adoption of a folder with data.
    (tmp_path / "q" / "empty" / "sub").mkdir(parents=True)
    resp = requests.post(
        f"{lake.url}/v1/warehouses/q$y/create",
        json={"root": str(tmp_path / "q" / "empty")},
        headers=headers,
        timeout=60,
    )
    assert resp.status_code == 200, resp.text
    assert lake.catalog.containers.create_warehouse("q.x", root=str(old)).root == str(old)
