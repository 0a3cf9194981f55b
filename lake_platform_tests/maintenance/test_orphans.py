"""The orphan scan on real datasets: tags, branches (with an index), blob sidecars, deletion
files, a registered version whose manifest is only at its staging path, a half-written file.
Every real file is made old first, so the age gate cannot hide a false positive."""

from __future__ import annotations

import os
import re
import time
import uuid
from datetime import timedelta
from pathlib import Path

import lance
import pyarrow as pa
import pytest
from lance.blob import blob_array, blob_field

from lake_platform.errors import InvalidInput
from lake_platform.maintenance import orphans
from lake_platform.registry import keys
from lake_platform.registry.records import VersionRecord, decode
from lake_platform_tests.maintenance.helpers import age_tree, files_under, make_lake

TABLE = "p.w.ns.blobs"
SCHEMA = pa.schema([pa.field("id", pa.int64()), blob_field("b")])
TWO_DAYS = 2 * 86400


def blobs(start: int, count: int, size: int = 100_000) -> pa.Table:
    return pa.table(
        {
            "id": pa.array(range(start, start + count), pa.int64()),
            "b": blob_array([os.urandom(size) for _ in range(count)]),
        },
        schema=SCHEMA,
    )


def canonical(version: int) -> str:
    return f"_versions/{(1 << 64) - 1 - version:020d}.manifest"


def plant(root: Path, rel: str, data: bytes = b"x" * 100, age: float = TWO_DAYS) -> str:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    when = time.time() - age
    os.utime(path, (when, when))
    return rel


def dev_root(catalog) -> str:
    """Where the registered branch ``dev`` lives: ``<table folder>/tree/dev``."""
    return str(catalog.branches.describe_branch(TABLE, "dev")["location"])


@pytest.fixture
def lake_table(tmp_path: Path):
    catalog = make_lake(tmp_path / "home", ticket_lifetime_seconds=0.001, reader_max_stale_seconds=0.0)
    catalog.tables.create_table(TABLE, blobs(0, 3).to_reader())
    for i in range(1, 5):
        catalog.tables.append(TABLE, blobs(100 * i, 3).to_reader())
    catalog.tables.delete_rows(TABLE, "id = 101")  # deletion file
    catalog.tags.create_tag(TABLE, "gold", 2)
    # Old versions leave the registry (tag kept); the current one stays.
    cleaned = catalog.versions.cleanup(TABLE, retention=timedelta(0), retain_versions=1)
    assert cleaned.status == "committed" and 2 not in cleaned.detail["versions_removed"]
    record = catalog.reads.open_table(TABLE).record
    root = Path(record.location)
    # A branch with its own data (and blob sidecar), and an index written on it with plain Lance.
    catalog.branches.create_branch(TABLE, "dev")
    catalog.branch_writes.append(TABLE, "dev", blobs(900, 2).to_reader())
    lance.dataset(dev_root(catalog)).create_scalar_index("id", "BTREE")
    # One more append whose registered manifest is then left at a staging path only.
    catalog.tables.append(TABLE, blobs(500, 3).to_reader())
    current = catalog.reads.open_table(TABLE).record.current_version
    key = keys.version(record.incarnation, current)
    item = catalog.store.get(key)
    ver = decode(VersionRecord, item.value)
    staging = f"{canonical(current)}-{uuid.uuid4()}"
    os.replace(root / canonical(current), root / staging)
    catalog.store.compare_and_swap(
        key,
        item.revision,
        ver.model_copy(update={"manifest_path": f"{str(root).lstrip('/')}/{staging}"}).encode(),
    )
    age_tree(root, TWO_DAYS)
    try:
        yield catalog, root
    finally:
        catalog.close()


def test_scan_reports_exactly_the_planted_orphans(lake_table) -> None:
    catalog, root = lake_table
    real = files_under(root)
    dev = Path(dev_root(catalog)).name
    assert any(p.endswith(".blob") for p in real) and any(p.startswith("_deletions/") for p in real)
    assert any(p.startswith((f"tree/{dev}/_indices/", "_indices/")) for p in real)
    assert any(p.startswith(f"tree/{dev}/data/") and p.endswith(".blob") for p in real)

    dead_stem = "1" * 24 + "deadbeef" * 3 + "ab"
    planted = {
        plant(root, f"data/{dead_stem}.lance"),
        plant(root, f"data/{dead_stem}/10000000000000000000000000000000.blob"),
        plant(root, "data/0101/00000000000000000000000000000001.blob"),  # sidecar of no data file
        plant(root, f"{canonical(77)}-{uuid.uuid4()}"),  # a staging manifest that lost its commit
        plant(root, "_transactions/3-" + str(uuid.uuid4()) + ".txn"),
        plant(root, "_deletions/0-9-123456789.arrow"),
        plant(root, f"_indices/{uuid.uuid4()}/page_data.lance"),
        plant(root, "tree/gone/data/abc.lance"),  # leftovers of a deleted branch
    }
    # A copy of the current manifest under an unregistered version number: its manifest is an
    # orphan although every file it names is live.
    planted.add(
        plant(root, canonical(60), (root / next(p for p in real if p.endswith(".manifest"))).read_bytes())
    )
    young = plant(root, "data/halfwritten0000000000000000000000000000000000.lance", b"partial", age=0)
    plant(root, "NOTES.txt")  # not Lance's: never reported

    report = orphans.scan(catalog, TABLE, min_age=timedelta(hours=1))
    found = {o.path for o in report.orphans}
    assert found == planted, {"false positives": found - planted, "missed": planted - found}
    assert report.orphan_count == len(planted) and not report.truncated
    assert report.files_young == 1 and report.files_unknown == 1
    assert report.branches == [dev] and report.tagged_versions == [2]
    assert report.unknown_branches == []
    # Opening the staging-only version lets Lance write its canonical manifest: live as well.
    live_now = files_under(root) - planted - {young, "NOTES.txt"}
    assert live_now - real <= {canonical(catalog.reads.open_table(TABLE).version)}
    assert report.files_live == len(live_now)
    assert young not in found

    key = orphans.commit_report(catalog, report)
    assert key.startswith("rpt/orphans/p.w.ns.blobs/")
    latest = orphans.latest_report(catalog, TABLE)
    assert latest is not None and latest.orphan_count == len(planted)
    assert any(e.operation == "orphan-scan" for e in catalog.reads.history(TABLE))

    # Reclaim deletes exactly the orphans, and every live snapshot still reads.
    with pytest.raises(InvalidInput):
        orphans.reclaim(catalog, TABLE, timedelta(minutes=5))
    result = orphans.reclaim(catalog, TABLE, timedelta(hours=1))
    deleted = {d["path"] for d in result.deleted}
    # Each open of the staging-only version makes Lance retry its canonical copy, leaving a
    # "<manifest>#k" temp name behind (hard-linked, so it looks old): unreferenced, so orphans too.
    assert planted <= deleted and all(
        re.fullmatch(r"_versions/\d{20}\.manifest#\d+", p) for p in deleted - planted
    )
    live_now -= deleted
    assert (root / young).exists() and (root / "NOTES.txt").exists()
    assert files_under(root) == live_now | {young, "NOTES.txt"}
    assert catalog.reads.open_table(TABLE).count_rows() == 17
    assert catalog.reads.open_table(TABLE, 2).count_rows() == 6
    assert lance.dataset(dev_root(catalog)).to_table().num_rows == 16
    assert lance.dataset(dev_root(catalog)).take_blobs("b", indices=[0])
    assert catalog.branches.open_branch(TABLE, "dev").count_rows() == 16
    again = orphans.scan(catalog, TABLE, min_age=timedelta(hours=1))
    assert all(re.fullmatch(r"_versions/\d{20}\.manifest#\d+", o.path) for o in again.orphans)
    assert any(e.operation == "orphan-reclaim" for e in catalog.reads.history(TABLE))


def test_scan_ignores_files_younger_than_the_policy(lake_table) -> None:
    catalog, root = lake_table
    recent = plant(root, "data/young00000000000000000000000000000000000000000.lance", age=1800)
    older = plant(root, "data/older00000000000000000000000000000000000000000.lance", age=3 * 86400)
    report = orphans.scan(catalog, TABLE)  # the policy default: 7 days
    assert report.min_age_seconds == 7 * 86400
    assert [o.path for o in report.orphans if "#" not in o.path] == [] and report.files_young >= 2
    report = orphans.scan(catalog, TABLE, min_age=timedelta(hours=1))
    assert [o.path for o in report.orphans if "#" not in o.path] == [older]
    assert recent not in {o.path for o in report.orphans}


def test_scan_on_s3_classifies_every_real_file_as_live(s3, tmp_path: Path) -> None:
    prefix = s3.new_prefix()
    home = tmp_path / "home"
    catalog = make_lake(home, warehouse_roots=s3.warehouse_roots(home), **s3.lake_settings())
    try:
        catalog.containers.create_warehouse("p.s3", root=f"s3://{s3.bucket}/{prefix}")
        catalog.containers.create_namespace("p.s3.ns")
        name = "p.s3.ns.blobs"
        catalog.tables.create_table(name, blobs(0, 3).to_reader())
        catalog.tables.append(name, blobs(10, 3).to_reader())
        catalog.tables.delete_rows(name, "id = 1")
        catalog.tags.create_tag(name, "gold", 1)
        report = orphans.scan(catalog, name, min_age=timedelta(hours=1))
        # S3 sets LastModified itself, so nothing here can be old: every real file must be live
        # (a misclassified one would show up as "young").
        assert report.files_scanned > 5 and report.files_live == report.files_scanned
        assert report.orphan_count == 0 and report.files_young == 0
        location = catalog.reads.open_table(name).record.location
        key = location.removeprefix(f"s3://{s3.bucket}/") + "/data/stray.lance"
        s3.client().put_object(Bucket=s3.bucket, Key=key, Body=b"x")
        again = orphans.scan(catalog, name, min_age=timedelta(hours=1))
        assert again.files_young == 1 and again.orphan_count == 0
        # Chunked (as the Dagster steps do it): one listing per top-level folder, same figures.
        live = orphans.live_set(catalog, name)
        parts = orphans.chunks(catalog, live)
        assert {"data", "_versions", "_transactions"} <= set(parts)
        now = time.time()
        chunked = orphans.merge(
            live,
            [orphans.classify_chunk(catalog, live, c, timedelta(hours=1), now) for c in parts],
            timedelta(hours=1),
            now,
        ).report
        assert (chunked.files_scanned, chunked.files_live, chunked.files_young) == (
            again.files_scanned,
            again.files_live,
            again.files_young,
        )
    finally:
        catalog.close()
        if s3.external:
            s3.delete_prefix(prefix)


def test_reclaim_reverifies_each_file_right_before_deleting_it(lake_table) -> None:
    from lake_platform.catalog.catalog import Catalog

    catalog, root = lake_table
    touched = plant(root, "data/touched000000000000000000000000000000000000000.lance")
    gone = plant(root, "data/vanished00000000000000000000000000000000000000.lance")
    kept = plant(root, "data/plainorphan000000000000000000000000000000000000.lance")

    def interfere(point: str) -> None:
        # Between the scan and the deletes: one file is rewritten by someone, another removed.
        if point == "orphan-reclaim:scanned":
            (root / touched).write_bytes(b"rewritten, now live data for somebody")
            (root / gone).unlink()

    with Catalog(catalog.settings, hook=interfere) as reclaiming:
        result = orphans.reclaim(reclaiming, TABLE, timedelta(hours=1))
    reasons = {k["path"]: k["reason"] for k in result.kept}
    assert reasons[touched] == "changed since the scan" and (root / touched).exists()
    assert reasons[gone] == "already gone"
    assert kept in {d["path"] for d in result.deleted} and not (root / kept).exists()


@pytest.mark.parametrize("identity", ["LAKE_ACTOR", "signed-in user"])
def test_scan_and_reclaim_commits_name_the_acting_identity(tmp_path: Path, identity: str) -> None:
    from lake_platform.catalog.catalog import Catalog
    from lake_platform.catalog.principals import Principal
    from lake_platform_tests.maintenance.helpers import make_settings, rows

    admin = make_lake(tmp_path / "home")
    admin.tables.create_table("p.w.ns.t", rows(0, 3).to_reader())
    if identity == "LAKE_ACTOR":
        acting, expected = Catalog(make_settings(tmp_path / "home", actor="alice")), "alice"
    else:
        acting = Catalog(make_settings(tmp_path / "home"), principal=Principal("olga", "user", "p", "admin"))
        expected = "olga"
    with acting:
        orphans.commit_report(acting, orphans.scan(acting, "p.w.ns.t"))
        orphans.reclaim(acting, "p.w.ns.t", timedelta(hours=1))
    entries = [e for e in admin.reads.history("p.w.ns.t") if e.operation.startswith("orphan-")]
    assert {(e.operation, e.actor) for e in entries} == {
        ("orphan-scan", expected),
        ("orphan-reclaim", expected),
    }
    admin.close()


def test_a_lance_branch_no_registry_record_names_is_reported_and_reclaimed(lake_table) -> None:
    """A branch create killed after Lance made the branch, before the registry commit, leaves a
    Lance branch (manifest, ref, no data) that nothing registered names."""
    from lake_platform.engine import branches as engine_branches

    catalog, root = lake_table
    catalog.manifests.finish_versions(TABLE)  # the fixture's staging-only head (the scan does it too)
    record = catalog.reads.open_table(TABLE).record
    made = engine_branches.create_branch(str(root), "crash-0123456789ab", record.current_version)
    assert Path(made.location) == root / "tree" / "crash-0123456789ab"
    young = orphans.scan(catalog, TABLE, min_age=timedelta(hours=1))
    assert young.unknown_branches == []  # as young as a create in flight: only its age shows it
    assert orphans.reclaim(catalog, TABLE, timedelta(hours=1)).deleted == []
    assert (root / "_refs/branches/crash-0123456789ab.json").exists()

    age_tree(root, TWO_DAYS)
    report = orphans.scan(catalog, TABLE, min_age=timedelta(hours=1))
    dev = Path(dev_root(catalog)).name
    assert report.unknown_branches == ["crash-0123456789ab"]
    assert sorted(report.branches) == sorted([dev, "crash-0123456789ab"])
    result = orphans.reclaim(catalog, TABLE, timedelta(hours=1))
    assert [d["path"] for d in result.deleted if "branch" in d] == ["tree/crash-0123456789ab"]
    assert not (root / "tree" / "crash-0123456789ab").exists()
    assert not (root / "_refs/branches/crash-0123456789ab.json").exists()
    assert any(f.startswith(f"tree/{dev}/") for f in files_under(root))  # the registered branch stays
    assert catalog.branches.open_branch(TABLE, "dev").count_rows() == 16
    assert catalog.reads.open_table(TABLE).count_rows() == 17
    assert orphans.scan(catalog, TABLE, min_age=timedelta(hours=1)).unknown_branches == []


def test_a_trashed_branch_and_main_s_published_line_are_not_unknown(lake_table) -> None:
    catalog, root = lake_table
    catalog.manifests.finish_versions(TABLE)
    catalog.branches.create_branch(TABLE, "fix")
    catalog.branch_writes.append(TABLE, "fix", blobs(700, 1).to_reader())
    catalog.branch_publish.publish_branch(TABLE, "fix")  # its record goes; main reads from its root
    catalog.branch_trash.delete_branch(TABLE, "dev")  # in the trash: undrop needs its files
    age_tree(root, TWO_DAYS)
    report = orphans.scan(catalog, TABLE, min_age=timedelta(hours=1))
    assert report.unknown_branches == [] and len(report.branches) == 2
    orphans.reclaim(catalog, TABLE, timedelta(hours=1))
    catalog.branch_trash.undrop_branch(TABLE, "dev")
    assert catalog.branches.open_branch(TABLE, "dev").count_rows() == 16
    assert catalog.reads.open_table(TABLE).count_rows() == 18
