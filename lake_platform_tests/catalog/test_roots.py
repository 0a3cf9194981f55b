"""The allowed-roots rule for warehouse roots, through the catalog: every refusal is InvalidInput
naming the root and the rule, and writes nothing (no registry record, no commit-log entry, no
folder); the default configuration keeps working; registrations made under wider settings are
reported."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from lake_platform.catalog import roots
from lake_platform.catalog.catalog import Catalog
from lake_platform.catalog.provenance import Provenance
from lake_platform.errors import InvalidInput, PermissionDenied, SettingsError
from lake_platform.naming import WarehouseName
from lake_platform.registry import keys
from lake_platform.registry.records import WarehouseRecord
from lake_platform.settings import load_settings
from lake_platform.settings.lake import inbox_location_problem
from lake_platform.up.demo import seed_demo


def open_lake(tmp_path: Path, **overrides: Any) -> Catalog:
    """A catalog whose warehouses live under ``<tmp>/lakes`` (the inbox too)."""
    lakes = tmp_path / "lakes"
    return Catalog(
        load_settings(
            home=tmp_path / "home", warehouse_root=str(lakes), inbox=str(lakes / "inbox"), **overrides
        )
    )


def open_catalog(tmp_path: Path, **overrides: Any) -> Catalog:
    """``open_lake`` with project ``p`` and warehouse ``p.w`` at ``<tmp>/lakes/p/w``."""
    catalog = open_lake(tmp_path, **overrides)
    catalog.containers.create_project("p")
    catalog.containers.create_warehouse("p.w")
    return catalog


@pytest.fixture
def catalog(tmp_path: Path) -> Any:
    with open_catalog(tmp_path) as c:
        yield c


def log_keys(catalog: Catalog) -> list[str]:
    return [i.key for i in catalog.store.scan_prefix("log/")]


def refused(catalog: Catalog, root: str, rule: str) -> None:
    """Creating ``p.x`` at ``root`` is refused for ``rule`` and leaves no trace."""
    before = log_keys(catalog)
    existed = "://" not in root and os.path.lexists(root)
    with pytest.raises(InvalidInput) as exc:
        catalog.containers.create_warehouse("p.x", root=root)
    assert rule in str(exc.value)
    assert catalog.store.get(keys.warehouse(WarehouseName.parse("p.x"))) is None
    assert log_keys(catalog) == before
    assert existed or "://" in root or not os.path.lexists(root)


def test_a_root_outside_the_allowed_roots_is_refused(catalog: Catalog, tmp_path: Path) -> None:
    refused(catalog, str(tmp_path / "elsewhere" / "w"), "outside the allowed warehouse roots")
    with pytest.raises(InvalidInput, match="warehouse root /etc refused: it is outside"):
        catalog.containers.create_warehouse("p.x", root="/etc")
    refused(catalog, "s3://bucket/w", "outside the allowed warehouse roots")


def test_dot_dot_is_refused_even_when_it_would_land_inside(catalog: Catalog, tmp_path: Path) -> None:
    refused(catalog, f"{tmp_path}/lakes/p/../../elsewhere", "'..' is not allowed")
    refused(catalog, f"{tmp_path}/lakes/q/../x", "'..' is not allowed")


def test_a_symlink_out_of_the_allowed_roots_is_followed_and_refused(catalog: Catalog, tmp_path: Path) -> None:
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "lakes").mkdir(exist_ok=True)
    os.symlink(tmp_path / "elsewhere", tmp_path / "lakes" / "link")
    refused(catalog, str(tmp_path / "lakes" / "link" / "w"), "outside the allowed warehouse roots")


def test_a_symlink_that_stays_inside_is_stored_resolved(catalog: Catalog, tmp_path: Path) -> None:
    (tmp_path / "lakes" / "real").mkdir(parents=True)
    os.symlink(tmp_path / "lakes" / "real", tmp_path / "lakes" / "alias")
    record = catalog.containers.create_warehouse("p.x", root=str(tmp_path / "lakes" / "alias" / "w"))
    assert record.root == (tmp_path / "lakes" / "real" / "w").resolve().as_posix()


def test_a_root_inside_containing_or_equal_to_another_warehouse_is_refused(
    catalog: Catalog, tmp_path: Path
) -> None:
    w = tmp_path / "lakes" / "p" / "w"
    refused(catalog, str(w / "inner"), "is inside another warehouse's root")
    refused(catalog, str(tmp_path / "lakes" / "p"), "contains another warehouse's root")
    refused(catalog, str(w), "is another warehouse's root")
    # another project's warehouse is protected the same way (a tenant cannot nest in another's)
    catalog.containers.create_project("q")
    refused(catalog, str(w / "ns"), "is inside another warehouse's root")


def test_the_results_area_and_the_inbox_are_refused(tmp_path: Path) -> None:
    # a results area set inside the allowed root (the default, <home>/results, is outside it)
    with open_catalog(tmp_path, results_root=str(tmp_path / "lakes" / "results")) as catalog:
        refused(catalog, str(tmp_path / "lakes" / "results" / "w"), "is inside the results area")
        refused(catalog, str(tmp_path / "lakes" / "inbox" / "w"), "is inside the inbox")
        # the allowed root itself holds the results area and the inbox
        refused(catalog, str(tmp_path / "lakes"), "contains the results area")


def test_the_default_results_area_is_outside_every_warehouse(tmp_path: Path) -> None:
    with open_catalog(tmp_path, warehouse_roots=f"{tmp_path / 'lakes'},{tmp_path}") as catalog:
        results = roots.canonical(catalog.settings.results_root)
        assert results == roots.canonical(str(tmp_path / "home" / "results"))
        assert not results.overlaps(roots.canonical(str(tmp_path / "lakes")))
        # under an allowed root that spans the home, the home's rule keeps warehouses out of it
        refused(catalog, str(tmp_path / "home" / "results" / "w"), "is inside LAKE_HOME")


def test_lake_home_is_refused_even_under_a_wider_allowed_root(tmp_path: Path) -> None:
    with open_catalog(tmp_path, warehouse_roots=str(tmp_path)) as catalog:
        refused(catalog, str(tmp_path / "home" / "w"), "is inside LAKE_HOME")
        refused(catalog, str(tmp_path / "home" / "audit"), "is inside LAKE_HOME")
        refused(catalog, str(tmp_path), "contains LAKE_HOME")
        # and the rest of the wider root is open
        assert catalog.containers.create_warehouse("p.x", root=str(tmp_path / "other")).name == "p.x"


def test_s3_roots_compare_scheme_and_bucket_exactly(tmp_path: Path) -> None:
    with open_catalog(tmp_path, warehouse_roots=f"{tmp_path / 'lakes'},s3://lake/tenants") as catalog:
        refused(catalog, "s3://lake-other/tenants/w", "outside the allowed warehouse roots")
        refused(catalog, "s3://lake/tenantsx/w", "outside the allowed warehouse roots")
        refused(catalog, "s3://lake/tenants/../w", "invalid storage root")
        refused(catalog, "s3://lake//tenants/w", "invalid storage root")
        record = catalog.containers.create_warehouse("p.a", root="s3://lake/tenants/a/")
        assert record.root == "s3://lake/tenants/a"
        refused(catalog, "s3://lake/tenants/a/b", "is inside another warehouse's root")
        refused(catalog, "s3://lake/tenants", "contains another warehouse's root")


@pytest.mark.parametrize(
    "tail",
    [
        "x/%2E%2E/a",  # object stores percent-decode a URL's path: this is s3://lake/tenants/a
        "a%2Fsteal",
        "x\\..\\a",  # a backslash reads as a slash
        "a?x=1",  # a query, cut off the path
        "a#frag",  # a fragment, cut off the path: s3://lake/tenants/a
        "a b",
        "c\n",
    ],
)
def test_s3_segments_an_object_store_would_read_otherwise_are_refused(tmp_path: Path, tail: str) -> None:
    """Compared as written, each of these lay beside warehouse ``p.a``; Lance wrote a table of
    the one with ``%2E%2E`` (or a backslash, or ``#``) inside ``p.a``'s root."""
    with open_catalog(tmp_path, warehouse_roots=f"{tmp_path / 'lakes'},s3://lake/tenants") as catalog:
        catalog.containers.create_warehouse("p.a", root="s3://lake/tenants/a")
        refused(catalog, f"s3://lake/tenants/{tail}", "invalid storage root")
        refused(catalog, "s3://Lake%2Fx/tenants/b", "invalid storage root")


def test_local_roots_with_control_characters_or_a_host_are_refused(catalog: Catalog, tmp_path: Path) -> None:
    # Before: accepted into the registry, then every table create failed INTERNAL ("Failed to
    # parse path") naming the folder.
    refused(catalog, str(tmp_path / "lakes" / "p" / "e\n"), "invalid storage root")
    refused(catalog, str(tmp_path / "lakes" / "p" / "e\x7f"), "invalid storage root")
    # Before: file://host/path was read as the relative path host/path, under the working folder.
    refused(catalog, f"file://localhost{tmp_path / 'lakes' / 'p' / 'x'}", "invalid storage root")
    assert catalog.containers.create_warehouse("p.x", root=f"file://{tmp_path / 'lakes' / 'x'}").root == str(
        tmp_path / "lakes" / "x"
    )


def test_the_default_configuration_creates_the_default_warehouses(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)  # the default home is the relative .lake
    settings = load_settings()
    assert settings.warehouse_roots == settings.warehouse_root
    with Catalog(settings) as catalog:
        summary = seed_demo(catalog)
        warehouses = catalog.inventory.warehouses()
        assert warehouses and summary
        for name in warehouses:
            root = catalog.ctx.warehouse(WarehouseName.parse(name)).root
            assert root.startswith((tmp_path / ".lake" / "warehouse").resolve().as_posix() + "/")
        assert catalog.containers.root_violations() == {}


def test_registrations_made_under_wider_settings_are_reported(tmp_path: Path) -> None:
    wide = f"{tmp_path / 'lakes'},{tmp_path / 'old'}"
    with open_catalog(tmp_path, warehouse_roots=wide) as catalog:
        catalog.containers.create_warehouse("p.legacy", root=str(tmp_path / "old" / "w"))
        assert catalog.containers.root_violations() == {}
    with open_lake(tmp_path) as narrowed:
        found = narrowed.containers.root_violations()
    assert list(found) == ["p.legacy"]
    assert f"root {tmp_path / 'old' / 'w'}" in found["p.legacy"]
    assert "outside the allowed warehouse roots" in found["p.legacy"]


@pytest.mark.parametrize("value", ["relative/folder", "s3://", "s3:///prefix", "/a/../b", "ftp://x/y"])
def test_a_bad_warehouse_roots_setting_fails_at_start(tmp_path: Path, value: str) -> None:
    with pytest.raises(SettingsError, match="LAKE_WAREHOUSE_ROOTS"):
        load_settings(home=tmp_path / "home", warehouse_roots=value)


def test_canonical_roots() -> None:
    assert str(roots.canonical("s3://bk1/a/c/")) == "s3://bk1/a/c"
    assert roots.canonical("s3://bk1/a/c").within(roots.canonical("s3://bk1/a"))
    assert not roots.canonical("s3://bk1/ab").within(roots.canonical("s3://bk1/a"))
    assert not roots.canonical("s3://bk1/a").within(roots.canonical("/b/a"))
    with pytest.raises(InvalidInput, match="unsupported storage root"):
        roots.canonical("gs://b/a")


@pytest.mark.parametrize("bucket", ["ab", "lake-", "-lake", "a" * 64, "Lake", "la_ke"])
def test_a_warehouse_root_and_the_inbox_refuse_the_same_bucket_names(bucket: str) -> None:
    """One bucket rule for every s3:// location (before: a root took ``ab`` or ``lake-``, which
    S3 refuses and LAKE_INBOX refused)."""
    assert inbox_location_problem(f"s3://{bucket}/in") is not None
    with pytest.raises(InvalidInput, match="a bucket is 3-63"):
        roots.canonical(f"s3://{bucket}/tenants")
    assert inbox_location_problem("s3://abc/in") is None
    assert str(roots.canonical("s3://abc/tenants")) == "s3://abc/tenants"


def test_a_root_registered_before_the_segment_rule_is_reported_and_blocks_no_one(tmp_path: Path) -> None:
    """A warehouse registered (by an older release) at a root the rule now refuses: creating
    other warehouses still works (before: every create failed, quoting that root), and
    ``root_violations`` names it."""
    with open_catalog(tmp_path, warehouse_roots=f"{tmp_path / 'lakes'},s3://lake/tenants") as catalog:
        old = WarehouseRecord(name="p.old", root="s3://lake/tenants/x%2Fy")
        catalog.store.put_if_absent(keys.warehouse(WarehouseName.parse("p.old")), old.encode())
        assert catalog.containers.create_warehouse("p.a", root="s3://lake/tenants/a").name == "p.a"
        refused(catalog, "s3://lake/tenants/x%2Fy/z", "invalid storage root")
        assert list(catalog.containers.root_violations()) == ["p.old"]


def as_admin_of(catalog: Catalog, project: str) -> Provenance:
    token = catalog.access.create_token(f"{project}_admin", project=project, role="admin")[1]
    return Provenance(principal=catalog.access.authenticate_token(token))


def test_a_project_admin_roots_only_in_its_projects_folder_and_never_at_files(tmp_path: Path) -> None:
    """Only the operator (the local admin) places a warehouse outside the project's folder of an
    allowed root, or at a folder holding files; a project admin is PermissionDenied, nothing made."""
    with open_catalog(tmp_path) as catalog:
        catalog.containers.create_project("q")
        by = as_admin_of(catalog, "q")
        lakes = tmp_path / "lakes"
        for root in (lakes / "p" / "later", lakes / "r" / "w", lakes / "shared", lakes / "q2" / "w"):
            before = log_keys(catalog)
            with pytest.raises(PermissionDenied, match="only inside its project's folder"):
                catalog.containers.create_warehouse("q.x", root=str(root), by=by)
            assert log_keys(catalog) == before and not root.exists()
        (lakes / "q" / "old" / "t.lance").mkdir(parents=True)
        (lakes / "q" / "old" / "t.lance" / "data.lance").write_bytes(b"someone's rows")
        with pytest.raises(PermissionDenied, match="it holds files"):
            catalog.containers.create_warehouse("q.x", root=str(lakes / "q" / "old"), by=by)
        assert catalog.store.get(keys.warehouse(WarehouseName.parse("q.x"))) is None
        (lakes / "q" / "x").mkdir(parents=True)
        (lakes / "q" / "x" / "link").symlink_to(tmp_path / "elsewhere")  # a dangling link is not nothing
        with pytest.raises(PermissionDenied, match="it holds files"):
            catalog.containers.create_warehouse("q.x", by=by)
        (lakes / "q" / "x" / "link").unlink()
        (lakes / "q" / "x" / "empty" / "folders").mkdir(parents=True)
        assert catalog.containers.create_warehouse("q.x", by=by).root == str(lakes / "q" / "x")
        assert catalog.containers.create_warehouse("q.y", root=str(lakes / "q" / "deep" / "y"), by=by)
        assert catalog.containers.create_warehouse("q.old", root=str(lakes / "q" / "old")).name == "q.old"


def test_a_project_admin_s3_root_is_its_projects_and_empty(tmp_path: Path, s3: Any, s3_prefix: str) -> None:
    settings = {**s3.lake_settings(), "warehouse_roots": f"{tmp_path / 'lakes'},s3://{s3.bucket}/{s3_prefix}"}
    with open_catalog(tmp_path, **settings) as catalog:
        catalog.containers.create_project("q")
        by = as_admin_of(catalog, "q")
        base = f"s3://{s3.bucket}/{s3_prefix}"
        with pytest.raises(PermissionDenied, match="only inside its project's folder"):
            catalog.containers.create_warehouse("q.x", root=f"{base}/p/w", by=by)
        s3.client().put_object(Bucket=s3.bucket, Key=f"{s3_prefix}/q/old/t.lance/data/a.lance", Body=b"rows")
        with pytest.raises(PermissionDenied, match="it holds files"):
            catalog.containers.create_warehouse("q.x", root=f"{base}/q/old", by=by)
        with pytest.raises(PermissionDenied, match="it holds files"):
            catalog.containers.create_warehouse("q.x", root=f"{base}/q", by=by)
        assert catalog.store.get(keys.warehouse(WarehouseName.parse("q.x"))) is None
        # A sibling whose name the leftover folder's starts with is empty: prefixes are folders.
        assert catalog.containers.create_warehouse("q.x", root=f"{base}/q/ol", by=by).name == "q.x"
