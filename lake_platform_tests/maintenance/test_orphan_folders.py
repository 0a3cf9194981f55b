"""The warehouse-level orphan scan: whole table folders that neither the registry nor the trash
names (a writer killed between staging a new incarnation and committing it). Leaks here are
copies of a real table's folder at a fresh incarnation's location, which is exactly what a
dead create leaves; the SIGKILL suite (catalog/test_fault_kills.py) covers the real kill."""

from __future__ import annotations

import shutil
import uuid
from datetime import timedelta
from pathlib import Path

import pytest

from lake_platform.catalog.catalog import Catalog
from lake_platform.errors import InvalidInput, NamespaceNotFound
from lake_platform.maintenance import orphan_folders
from lake_platform.naming import WarehouseName
from lake_platform.registry import keys
from lake_platform.registry.records import WarehouseRecord
from lake_platform_tests.catalog.faults import ShiftedClock
from lake_platform_tests.catalog.registry_calls import RegistryCalls
from lake_platform_tests.dagster_storage import sqlite_instance
from lake_platform_tests.maintenance.helpers import age_tree, files_under, make_lake, rows

TWO_DAYS = 2 * 86400
HOUR = timedelta(hours=1)


def ghost(root: Path, source: str, rel_dir: str, table: str = "ghost") -> tuple[str, str]:
    """Copy the folder of the table at ``source`` to a new incarnation's location under
    ``rel_dir``: (path relative to the warehouse root, incarnation)."""
    incarnation = uuid.uuid4().hex
    rel = f"{rel_dir}/{table}-{incarnation}.lance"
    shutil.copytree(source, root / rel)
    return rel, incarnation


def snapshot(catalog: Catalog, names: list[str]) -> dict[str, list[int]]:
    return {n: sorted(catalog.reads.open_table(n).dataset.to_table().column("id").to_pylist()) for n in names}


@pytest.fixture
def lake(tmp_path: Path):
    catalog = make_lake(
        tmp_path / "home", ticket_lifetime_seconds=0.001, reader_max_stale_seconds=0.0, lease_wait_seconds=0.0
    )
    catalog.containers.create_namespace("p.w.ns.sub")
    catalog.tables.create_table("p.w.ns.t", rows(0, 5).to_reader())
    catalog.tables.create_table("p.w.ns.sub.u", rows(10, 3).to_reader())
    catalog.tables.create_table("p.w.ns.gone", rows(20, 2).to_reader())
    catalog.trash.drop_table("p.w.ns.gone")  # grace drop: the trash names its folder
    catalog.containers.create_namespace("p.w.old")
    catalog.tables.create_table("p.w.old.c", rows(30, 2).to_reader())
    catalog.cascade.drop_namespace("p.w.old", cascade=True)  # its folder is gone, its table's is in the trash
    root = Path(catalog.ctx.warehouse(WarehouseName.parse("p.w")).root)
    try:
        yield catalog, root
    finally:
        catalog.close()


def test_scan_reports_only_unknown_old_folders_and_reclaim_removes_exactly_them(lake) -> None:
    catalog, root = lake
    source = catalog.reads.open_table("p.w.ns.t").record.location
    old, old_inc = ghost(root, source, "ns")
    nested, _ = ghost(root, source, "ns/sub", "other")
    in_dropped_ns, _ = ghost(root, source, "old")  # a namespace no longer registered
    young, _ = ghost(root, source, "ns", "fresh")
    (root / "ns" / "notes").mkdir()
    (root / "ns" / "notes" / "readme.txt").write_text("not a table folder: never touched")
    (root / "ns" / "Odd-abc.lance").mkdir()  # not a name this platform gives: never touched
    age_tree(root, TWO_DAYS)
    age_tree(root / young, 0)
    # A dead writer's lease on the leaked incarnation (released by a contender): a leftover.
    catalog.gate.release(catalog.gate.acquire(old_inc))
    live = ["p.w.ns.t", "p.w.ns.sub.u"]
    before, files_before = snapshot(catalog, live), files_under(root)

    report = orphan_folders.scan_folders(catalog, "p.w", min_age=HOUR)
    assert sorted(o.path for o in report.orphans) == sorted([old, nested, in_dropped_ns])
    assert report.folders_young == 1 and report.folders_known == 4  # t, u, gone (trash), c (cascade)
    assert report.orphan_count == 3 and report.orphan_bytes > 0
    assert all(o.age_seconds >= TWO_DAYS - 60 and o.files > 0 for o in report.orphans)
    assert files_under(root) == files_before  # the scan deletes nothing
    key = orphan_folders.commit_folder_report(catalog, report, actor="scanner")
    assert orphan_folders.latest_folder_report(catalog, "p.w") == report and key.startswith(
        "rpt/orphan-folders/p.w/"
    )

    result = orphan_folders.reclaim_folders(catalog, "p.w", HOUR, actor="reclaimer")
    assert (
        sorted(d["path"] for d in result.deleted) == sorted([old, nested, in_dropped_ns]) and not result.kept
    )
    for rel in (old, nested, in_dropped_ns):
        assert not (root / rel).exists()
    assert (root / young).exists() and (root / "ns" / "notes" / "readme.txt").exists()
    assert (root / "ns" / "Odd-abc.lance").exists()
    assert catalog.store.get(keys.lease(old_inc)) is None  # the leaked incarnation's lease went too
    assert snapshot(catalog, live) == before
    # The trashed tables' folders were known: both come back whole.
    catalog.trash.undrop_table("p.w.ns.gone")
    catalog.trash.undrop_namespace("p.w.old")
    assert snapshot(catalog, ["p.w.ns.gone", "p.w.old.c"]) == {"p.w.ns.gone": [20, 21], "p.w.old.c": [30, 31]}
    entries = [e for e in catalog.reads.history("p.w") if e.operation.startswith("orphan-folder")]
    assert [(e.operation, e.actor) for e in entries] == [
        ("orphan-folder-scan", "scanner"),
        ("orphan-folder-reclaim", "reclaimer"),
    ]
    assert entries[-1].detail["deleted"] == sorted([old, nested, in_dropped_ns])
    assert entries[-1].bytes_removed == result.bytes_deleted == report.orphan_bytes


def test_another_warehouse_on_the_same_root_is_never_reclaimed(lake) -> None:
    catalog, root = lake
    # Sharing a root is refused now, but a registration made before the rule may still share one.
    twin = WarehouseRecord(name="p.twin", root=str(root), created_by="before-the-roots-rule")
    catalog.store.put_if_absent(keys.warehouse(WarehouseName.parse("p.twin")), twin.encode())
    catalog.containers.create_namespace("p.twin.ns")
    catalog.tables.create_table("p.twin.ns.x", rows(50, 2).to_reader())
    age_tree(root, TWO_DAYS)
    for warehouse in ("p.w", "p.twin"):
        assert orphan_folders.scan_folders(catalog, warehouse, min_age=HOUR).orphan_count == 0, warehouse
        assert orphan_folders.reclaim_folders(catalog, warehouse, HOUR).deleted == [], warehouse
    assert snapshot(catalog, ["p.twin.ns.x", "p.w.ns.t"]) == {
        "p.twin.ns.x": [50, 51],
        "p.w.ns.t": [0, 1, 2, 3, 4],
    }


def test_a_folder_being_written_is_never_reported_nor_reclaimed(lake, tmp_path: Path) -> None:
    catalog, root = lake
    rel, incarnation = ghost(root, catalog.reads.open_table("p.w.ns.t").record.location, "ns")
    age_tree(root, TWO_DAYS)
    writer = Catalog(catalog.settings)  # a create stalled for days, its lease still renewed
    lease = writer.gate.acquire(incarnation)
    try:
        report = orphan_folders.scan_folders(catalog, "p.w", min_age=HOUR)
        assert report.orphan_count == 0 and report.folders_young == 1
        assert orphan_folders.reclaim_folders(catalog, "p.w", HOUR).deleted == []
        assert (root / rel).exists()
    finally:
        writer.gate.release(lease)
        writer.close()
    assert [d["path"] for d in orphan_folders.reclaim_folders(catalog, "p.w", HOUR).deleted] == [rel]


def test_reclaim_reverifies_each_folder_under_its_lease(lake) -> None:
    catalog, root = lake
    source = catalog.reads.open_table("p.w.ns.t").record.location
    touched, _ = ghost(root, source, "ns", "touched")
    taken, taken_inc = ghost(root, source, "ns", "taken")
    gone, _ = ghost(root, source, "ns", "gone_meanwhile")
    plain, _ = ghost(root, source, "ns", "plain")
    age_tree(root, TWO_DAYS)
    other = Catalog(catalog.settings)
    held = []

    def interfere(point: str) -> None:
        # Between the scan and the deletes: a file lands in one folder, a writer takes another's
        # lease, a third folder disappears.
        if point == "orphan-folder-reclaim:scanned":
            (root / touched / "data" / "late.lance").write_bytes(b"written after the scan")
            held.append(other.gate.acquire(taken_inc))
            shutil.rmtree(root / gone)

    try:
        with Catalog(catalog.settings, hook=interfere) as reclaiming:
            result = orphan_folders.reclaim_folders(reclaiming, "p.w", HOUR)
    finally:
        for lease in held:
            other.gate.release(lease)
        other.close()
    reasons = {k["path"]: k["reason"] for k in result.kept}
    assert reasons == {
        touched: "changed since the scan",
        taken: "being written (its write lease is held)",
        gone: "already gone",
    }
    assert [d["path"] for d in result.deleted] == [plain]
    assert (root / touched).exists() and (root / taken).exists() and not (root / plain).exists()


def test_reclaim_reads_the_lake_once_not_once_per_folder(lake) -> None:
    # Each folder about to be deleted re-read every table and trash record of the lake: 6
    # folders in a lake of 40 more tables scanned tbl/ and trs/ 7 times each.
    catalog, root = lake
    for i in range(40):
        catalog.tables.declare_table(f"p.w.ns.d{i}")
    source = catalog.reads.open_table("p.w.ns.t").record.location
    leaks = sorted(ghost(root, source, "ns", f"leak{i}")[0] for i in range(6))
    age_tree(root, TWO_DAYS)
    calls = RegistryCalls(catalog.store)
    with Catalog(catalog.settings, calls) as counting:
        result = orphan_folders.reclaim_folders(counting, "p.w", HOUR)
    assert sorted(d["path"] for d in result.deleted) == leaks and not result.kept
    scans = [prefix for method, prefix in calls.reads() if method == "scan_prefix"]
    assert [prefix for prefix in scans if prefix[0] in ("tbl/", "trs/")] == [["tbl/"], ["trs/"]]


def test_a_folder_registered_or_trashed_after_the_scan_is_kept(lake) -> None:
    # The re-check under each folder's lease sees what the registry names now, not at the scan:
    # a folder adopted by RegisterTable (and one adopted, then dropped into the trash) between
    # the scan and the deletes keeps every file.
    catalog, root = lake
    source = catalog.reads.open_table("p.w.ns.t").record.location
    adopted, _ = ghost(root, source, "ns", "adopted")
    trashed, _ = ghost(root, source, "ns/sub", "trashed")
    plain, _ = ghost(root, source, "ns", "plain")
    age_tree(root, TWO_DAYS)

    def interfere(point: str) -> None:
        if point == "orphan-folder-reclaim:scanned":
            catalog.registrations.register_table("p.w.ns.adopted", str(root / adopted))
            catalog.registrations.register_table("p.w.ns.sub.trashed", str(root / trashed))
            catalog.trash.drop_table("p.w.ns.sub.trashed")

    with Catalog(catalog.settings, hook=interfere) as reclaiming:
        result = orphan_folders.reclaim_folders(reclaiming, "p.w", HOUR)
    reasons = {k["path"]: k["reason"] for k in result.kept}
    assert reasons == dict.fromkeys([adopted, trashed], "registered or in the trash now")
    assert [d["path"] for d in result.deleted] == [plain]
    catalog.trash.undrop_table("p.w.ns.sub.trashed")
    assert snapshot(catalog, ["p.w.ns.adopted", "p.w.ns.sub.trashed"]) == dict.fromkeys(
        ["p.w.ns.adopted", "p.w.ns.sub.trashed"], [0, 1, 2, 3, 4]
    )


def test_a_registration_the_change_feed_no_longer_holds_is_still_seen(lake) -> None:
    # 300 changes on one feed shard after the registration: more than its ring keeps, so the
    # re-check reads the lake whole again rather than trust what the feed still holds.
    catalog, root = lake
    adopted, _ = ghost(root, catalog.reads.open_table("p.w.ns.t").record.location, "ns", "adopted")
    age_tree(root, TWO_DAYS)

    def interfere(point: str) -> None:
        if point == "orphan-folder-reclaim:scanned":
            catalog.registrations.register_table("p.w.ns.adopted", str(root / adopted))
            for i in range(300):  # one key each time: one shard
                catalog.policies.set_policy("p.w.ns", {"retain_versions": 3 + i % 2})

    with Catalog(catalog.settings, hook=interfere) as reclaiming:
        result = orphan_folders.reclaim_folders(reclaiming, "p.w", HOUR)
    assert result.deleted == [] and [k["path"] for k in result.kept] == [adopted]
    assert catalog.reads.open_table("p.w.ns.adopted").dataset.count_rows() == 5


def test_bad_input_is_refused_and_changes_nothing(lake) -> None:
    catalog, root = lake
    rel, _ = ghost(root, catalog.reads.open_table("p.w.ns.t").record.location, "ns")
    age_tree(root, TWO_DAYS)
    before = files_under(root)
    log_before = len(catalog.reads.history("p.w"))
    with pytest.raises(InvalidInput, match="at least"):
        orphan_folders.reclaim_folders(catalog, "p.w", timedelta(minutes=59))
    with pytest.raises(InvalidInput, match="at least"):
        orphan_folders.scan_folders(catalog, "p.w", min_age=timedelta(seconds=1))
    with pytest.raises(InvalidInput):
        orphan_folders.reclaim_folders(catalog, "p.w/../x", HOUR)
    with pytest.raises(InvalidInput, match="limit"):
        orphan_folders.reclaim_folders(catalog, "p.w", HOUR, limit=0)
    with pytest.raises(NamespaceNotFound):
        orphan_folders.reclaim_folders(catalog, "p.nope", HOUR)
    assert files_under(root) == before and len(catalog.reads.history("p.w")) == log_before


def test_policy_age_gate_is_the_default(lake) -> None:
    catalog, root = lake
    rel, _ = ghost(root, catalog.reads.open_table("p.w.ns.t").record.location, "ns")
    age_tree(root, TWO_DAYS)
    report = orphan_folders.scan_folders(catalog, "p.w")  # the default gate: 7 days
    assert report.min_age_seconds == 7 * 86400 and report.orphan_count == 0 and report.folders_young == 1


def test_scan_and_reclaim_on_s3(s3, tmp_path: Path) -> None:
    prefix = s3.new_prefix()
    home = tmp_path / "home"
    catalog = make_lake(home, warehouse_roots=s3.warehouse_roots(home), **s3.lake_settings())
    try:
        catalog.containers.create_warehouse("p.s3", root=f"s3://{s3.bucket}/{prefix}")
        catalog.containers.create_namespace("p.s3.ns")
        catalog.containers.create_namespace("p.s3.ns.sub")
        catalog.tables.create_table("p.s3.ns.t", rows(0, 4).to_reader())
        catalog.tables.create_table("p.s3.ns.sub.u", rows(10, 2).to_reader())
        catalog.tables.create_table("p.s3.ns.gone", rows(20, 2).to_reader())
        catalog.trash.drop_table("p.s3.ns.gone")
        client = s3.client()
        source = catalog.reads.open_table("p.s3.ns.t").record.location.removeprefix(f"s3://{s3.bucket}/")
        leaks = [f"ns/ghost-{uuid.uuid4().hex}.lance", f"ns/sub/other-{uuid.uuid4().hex}.lance"]
        for leak in leaks:  # a real table's objects at a location nobody registered
            for key in s3.keys_under(source):
                body = client.get_object(Bucket=s3.bucket, Key=key)["Body"].read()
                client.put_object(
                    Bucket=s3.bucket, Key=f"{prefix}/{leak}/{key.removeprefix(source + '/')}", Body=body
                )
        # S3 dates objects itself: a scanner two days later sees them as old (and the tables too).
        later = Catalog(catalog.settings, clock=ShiftedClock(TWO_DAYS))
        try:
            report = orphan_folders.scan_folders(later, "p.s3", min_age=HOUR)
            assert sorted(o.path for o in report.orphans) == sorted(leaks)
            assert report.folders_known == 3 and report.folders_listed == 3  # root, ns, ns/sub
            now = orphan_folders.scan_folders(catalog, "p.s3", min_age=HOUR)
            assert now.orphan_count == 0 and now.folders_young == 2
            result = orphan_folders.reclaim_folders(later, "p.s3", HOUR)
            assert sorted(d["path"] for d in result.deleted) == sorted(leaks) and not result.kept
            for leak in leaks:
                assert s3.keys_under(f"{prefix}/{leak}") == []
            # Some stores (SeaweedFS) keep listing a prefix whose objects are gone: it holds no data.
            after = orphan_folders.scan_folders(later, "p.s3", min_age=HOUR)
            assert after.orphan_count == 0 and after.table_folders - after.folders_empty == 3
        finally:
            later.close()
        assert sorted(catalog.reads.open_table("p.s3.ns.t").dataset.to_table().column("id").to_pylist()) == [
            0,
            1,
            2,
            3,
        ]
        catalog.trash.undrop_table("p.s3.ns.gone")
        assert catalog.reads.open_table("p.s3.ns.gone").dataset.count_rows() == 2
    finally:
        catalog.close()
        if s3.external:
            s3.delete_prefix(prefix)


@pytest.mark.slow
def test_dagster_asset_reports_every_warehouse(lake) -> None:
    import dagster as dg

    from lake_platform.defs.maintenance import orphan_folder_report
    from lake_platform.defs.resources import LakeResource

    catalog, root = lake
    catalog.containers.create_warehouse("p.w2")
    catalog.containers.create_namespace("p.w2.ns")
    rel, _ = ghost(root, catalog.reads.open_table("p.w.ns.t").record.location, "ns")
    age_tree(root, 8 * 86400)  # past the default 7-day gate
    before = files_under(root)
    with sqlite_instance() as instance:
        result = dg.materialize(
            [orphan_folder_report],
            instance=instance,
            resources={"lake": LakeResource(home=str(catalog.settings.home))},
        )
    meta = {
        k: v.value
        for k, v in result.asset_materializations_for_node("orphan_folder_report")[0].metadata.items()
    }
    assert meta["warehouses"] == 2 and meta["orphan_folders"] == 1
    assert [r["warehouse"] for r in meta["reports"]] == ["p.w", "p.w2"]
    assert [p["path"] for p in meta["reports"][0]["paths"]] == [rel]
    assert files_under(root) == before  # report only
    assert orphan_folders.latest_folder_report(catalog, "p.w").orphan_count == 1
    assert orphan_folders.latest_folder_report(catalog, "p.w2").orphan_count == 0
    assert [e.actor for e in catalog.reads.history("p.w") if e.operation == "orphan-folder-scan"] == [
        "dagster"
    ]
