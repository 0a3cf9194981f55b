"""A table's files stay inside the table (issue 44, row 1): a commit whose manifest references
files outside the table's location (a shallow clone of another tenant's table, extra base
paths) is refused as InvalidInput with nothing registered, over REST and in process, and the
table's readers keep reading the version they read before."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import lance  # the tests play Lance clients and an attacker with storage access
import lance_namespace.errors as ns_errors
import pytest
from lance import DatasetBasePath
from lance_namespace_urllib3_client.models import CreateTableVersionRequest

from lake_platform.catalog.pylance_namespace import LakeNamespace
from lake_platform.catalog.table_files import require_inside
from lake_platform.engine.manifest_paths import ManifestPaths
from lake_platform.engine.manifests import final_manifest_name
from lake_platform.errors import InvalidInput
from lake_platform.naming import TableName
from lake_platform_tests.catalog.conftest import ids_of
from lake_platform_tests.rest.clients import rest_namespace, rows
from lake_platform_tests.rest.conftest import RestLake, start_rest_lake
from lake_platform_tests.rest.handlers.test_batch import stage, tid
from lake_platform_tests.rest.handlers.test_batch_branches import stage_on


@pytest.fixture
def rest_lake(tmp_path: Path) -> Iterator[RestLake]:
    yield from start_rest_lake(tmp_path)


def _shallow_clone_manifest(source: str, clone_dir: Path) -> bytes:
    """What the attacker made: a shallow clone of ``source`` (its manifest's base path points
    into ``source``), and the clone's manifest bytes."""
    lance.dataset(source).shallow_clone(str(clone_dir), 1)
    (name,) = [n for n in os.listdir(clone_dir / "_versions") if n.endswith(".manifest")]
    return (clone_dir / "_versions" / name).read_bytes()


def _plant(location: str, version: int, manifest: bytes) -> str:
    """Copy ``manifest`` into the table's ``_versions/`` as a staging manifest for ``version``;
    return its path as a Lance client names it (an object-store path)."""
    name = f"{final_manifest_name(version)}-{uuid.uuid4()}"
    with open(os.path.join(location, "_versions", name), "wb") as f:
        f.write(manifest)
    return f"{location.lstrip('/')}/_versions/{name}"


def test_rest_commit_of_another_tenants_shallow_clone_is_refused(rest_lake: RestLake, tmp_path: Path) -> None:
    theirs = rest_namespace(rest_lake.url, rest_lake.tokens["other"])
    ours = rest_namespace(rest_lake.url, rest_lake.tokens["writer"])
    lance.write_dataset(rows([100, 101], "secret"), namespace_client=theirs, table_id=["q", "w", "ns", "b"])
    lance.write_dataset(rows([1, 2]), namespace_client=ours, table_id=["p", "w", "ns", "a"])
    b_location = rest_lake.catalog.reads.open_table("q.w.ns.b").record.location
    a_location = rest_lake.catalog.reads.open_table("p.w.ns.a").record.location

    staged = _plant(a_location, 2, _shallow_clone_manifest(b_location, tmp_path / "clone"))
    resp = rest_lake.post("/v1/table/p$w$ns$a/version/create", {"version": 2, "manifest_path": staged})

    assert resp.status_code == 400, resp.text
    problem = resp.json()
    assert problem["code"] == 13 and "base path" in problem["detail"]
    assert b_location not in problem["detail"]  # no path to another tenant's folder leaks
    snap = rest_lake.catalog.reads.open_table("p.w.ns.a")
    assert snap.version == 1 and ids_of(snap) == [1, 2]
    assert [e.to_version for e in rest_lake.catalog.reads.history("p.w.ns.a")] == [None, 1]
    listed = rest_lake.post("/v1/table/p$w$ns$a/version/list", {}).json()["versions"]
    assert [v["version"] for v in listed] == [1]
    read = lance.dataset(namespace_client=ours, table_id=["p", "w", "ns", "a"])
    assert sorted(read.to_table().column("id").to_pylist()) == [1, 2]
    # The staged manifest stays for the orphan scan: a refusal deletes nothing.
    assert os.path.exists("/" + staged)


def test_in_process_commit_of_a_shallow_clone_is_refused(rest_lake: RestLake, tmp_path: Path) -> None:
    ns = LakeNamespace(rest_lake.catalog)
    lance.write_dataset(rows([1, 2]), namespace_client=ns, table_id=["p", "w", "ns", "a"])
    lance.write_dataset(rows([100]), namespace_client=ns, table_id=["p", "w", "ns", "b"])
    a_location = rest_lake.catalog.reads.open_table("p.w.ns.a").record.location
    b_location = rest_lake.catalog.reads.open_table("p.w.ns.b").record.location
    staged = _plant(a_location, 2, _shallow_clone_manifest(b_location, tmp_path / "clone"))

    request = CreateTableVersionRequest(id=["p", "w", "ns", "a"], version=2, manifest_path=staged)
    with pytest.raises(ns_errors.InvalidInputError, match="base path"):
        ns.create_table_version(request)
    snap = rest_lake.catalog.reads.open_table("p.w.ns.a")
    assert snap.version == 1 and ids_of(snap) == [1, 2]
    assert [e.to_version for e in rest_lake.catalog.reads.history("p.w.ns.a")] == [None, 1]


def test_a_create_with_extra_base_paths_is_refused(rest_lake: RestLake, tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    ns = LakeNamespace(rest_lake.catalog)
    # Lance reports a refused create as an unknown outcome; what it staged shows why.
    with pytest.raises(OSError, match="version 1"):
        lance.write_dataset(
            rows([1]),
            namespace_client=ns,
            table_id=["p", "w", "ns", "a"],
            initial_bases=[DatasetBasePath(str(outside), name="elsewhere", id=1)],
            target_bases=["elsewhere"],
        )
    record, _ = rest_lake.catalog.ctx.table(TableName.parse("p.w.ns.a"), declared=True)
    assert record.current_version == 0  # declared by Lance's create, no version registered
    assert [e.to_version for e in rest_lake.catalog.reads.history("p.w.ns.a")] == [None]
    (name,) = os.listdir(os.path.join(record.location, "_versions"))
    staged = f"{record.location.lstrip('/')}/_versions/{name}"
    with pytest.raises(ns_errors.InvalidInputError, match="adds base path 1"):
        ns.create_table_version(
            CreateTableVersionRequest(id=["p", "w", "ns", "a"], version=1, manifest_path=staged)
        )


@pytest.mark.parametrize(
    ("paths", "says"),
    [
        (ManifestPaths(data_files=["../../other.lance/data/x.lance"]), "outside this table's data/"),
        (ManifestPaths(data_files=["/etc/passwd"]), "outside this table's data/"),
        (ManifestPaths(data_files=["s3://bucket/t.lance/data/x.lance"]), "outside this table's data/"),
        (ManifestPaths(data_files=["%2e%2e/x.lance"]), "outside this table's data/"),
        (ManifestPaths(external_files=["../t2/_rowids/x"]), "outside this table's location"),
        (ManifestPaths(own_files=["_indices/u/../../../t2/data/x.lance"]), "outside this table's location"),
        (ManifestPaths(base_paths=[(0, "/elsewhere")]), "base path"),
        (ManifestPaths(based=[("index 'i'", 3)]), "base path 3"),
    ],
)
def test_references_leaving_the_table_are_refused(paths: ManifestPaths, says: str) -> None:
    with pytest.raises(InvalidInput, match=says):
        require_inside(paths, "t.lance/_versions/x.manifest-1")


def test_a_tables_own_references_pass() -> None:
    require_inside(ManifestPaths(data_files=["abc.lance"], external_files=["_rowids/x.bin"]), "m")


def _new_data_files(location: str, before: set[str]) -> list[str]:
    return sorted(set(os.listdir(os.path.join(location, "data"))) - before)


def _data_files(location: str) -> set[str]:
    folder = os.path.join(location, "data")
    return set(os.listdir(folder)) if os.path.isdir(folder) else set()  # a new branch has none


@pytest.fixture
def two_tables(rest_lake: RestLake) -> RestLake:
    """Tables orders and lines at version 1 (ids 1, 2), each with branch dev made there."""
    ns = rest_namespace(rest_lake.url, rest_lake.tokens["writer"])
    for table in ("orders", "lines"):
        lance.write_dataset(rows([1, 2]), namespace_client=ns, table_id=tid(table), mode="create")
        rest_lake.catalog.branches.create_branch(f"p.w.ns.{table}", "dev")
    return rest_lake


def _stage_without_its_file(lake: RestLake, table: str, branch: str | None = None) -> dict[str, Any]:
    """A CreateTableVersion body pylance staged (an append of ids 3, 4), whose new data file was
    then removed, as an orphan reclaim with a short age gate takes it: nothing registered names it."""
    name = TableName.parse(f"p.w.ns.{table}")
    if branch is None:
        location = lake.catalog.reads.open_table(str(name)).record.location
        before = _data_files(location)
        body = stage(lake, table, rows([3, 4]))
    else:
        location = lake.catalog.branches.branch(name, branch)[0].location
        before = _data_files(location)
        body = stage_on(lake, table, branch, rows([3, 4]))
    (added,) = _new_data_files(location, before)
    os.remove(os.path.join(location, "data", added))
    return body


def _unchanged(lake: RestLake, table: str) -> None:
    name = TableName.parse(f"p.w.ns.{table}")
    snap = lake.catalog.reads.open_table(str(name))
    assert snap.version == 1 and ids_of(snap) == [1, 2]
    assert lake.catalog.branches.branch(name, "dev")[0].current_version == 1
    assert [e.to_version for e in lake.catalog.reads.log(str(name))][-1] == 1


def test_a_commit_whose_added_data_file_is_gone_is_refused(two_tables: RestLake) -> None:
    """Before, the version was registered and the table's current version no longer read
    (Lance: Not found); now nothing is registered and the table reads as before."""
    body = _stage_without_its_file(two_tables, "orders")
    resp = two_tables.post("/v1/table/p$w$ns$orders/version/create", body)
    assert resp.status_code == 400, resp.text
    assert resp.json()["code"] == 13 and "is gone" in resp.json()["detail"], resp.json()
    _unchanged(two_tables, "orders")


def test_a_batch_entry_whose_added_data_file_is_gone_commits_nothing(two_tables: RestLake) -> None:
    entries = [stage(two_tables, "lines", rows([30])), _stage_without_its_file(two_tables, "orders")]
    resp = two_tables.post("/v1/table/version/batch-create", {"entries": entries})
    assert resp.status_code == 400, resp.text
    assert "is gone" in resp.json()["detail"], resp.json()
    _unchanged(two_tables, "orders")
    _unchanged(two_tables, "lines")


def test_a_branch_commit_whose_added_data_file_is_gone_is_refused(two_tables: RestLake) -> None:
    body = _stage_without_its_file(two_tables, "orders", "dev")
    resp = two_tables.post("/v1/table/p$w$ns$orders/version/create", body)
    assert resp.status_code == 400, resp.text
    assert "is gone" in resp.json()["detail"], resp.json()
    _unchanged(two_tables, "orders")


def test_a_manifest_committed_under_another_version_number_is_refused(two_tables: RestLake) -> None:
    """A careless retry after a 409: the manifest Lance staged as version 2 (on version 1),
    sent again as version 3 once someone else committed 2. Before, it was registered as version
    3 (200) and the table's current version no longer read; now 400, nothing registered."""
    body = stage(two_tables, "orders", rows([3]))  # Lance's version 2, built on version 1
    ns = rest_namespace(two_tables.url, two_tables.tokens["writer"])
    lance.write_dataset(rows([10]), namespace_client=ns, table_id=tid("orders"), mode="append")
    resp = two_tables.post("/v1/table/p$w$ns$orders/version/create", {**body, "version": 3})
    assert (resp.status_code, resp.json()["code"]) == (400, 13), resp.text
    assert "version 2" in resp.json()["detail"], resp.json()
    snap = two_tables.catalog.reads.open_table("p.w.ns.orders")
    assert snap.version == 2 and ids_of(snap) == [1, 2, 10]
