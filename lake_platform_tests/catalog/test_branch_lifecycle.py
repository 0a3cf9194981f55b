"""Branches through the table's lifecycle (issue 46): version cleanup, compaction, the orphan
scan and reclaim, trash expiry and a table's purge never take a file a live branch (or tag)
references, and a branch's own files go when the branch is purged. Files are aged past every
gate before each reclaim, so "nothing live reclaimed" is shown, not given by youth."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest

from lake_platform.catalog.catalog import Catalog
from lake_platform.maintenance import orphans
from lake_platform.registry import keys
from lake_platform.settings import load_settings
from lake_platform_tests.catalog.conftest import ids_of, rows

T = "p.w.ns.t"
TWO_DAYS = 2 * 86400


@pytest.fixture
def lake(tmp_path: Path) -> Iterator[tuple[Catalog, Path]]:
    """A catalog whose superseded versions are old enough to clean up at once, and ``T`` at v3:
    ids 1 (v1), + 2 (v2), then overwritten with 3 (v3); branch ``old`` from v2 (sharing v1's and
    v2's files, which no main version keeps after cleanup) with 20 appended."""
    settings = load_settings(
        home=tmp_path / "home", ticket_lifetime_seconds=0.001, reader_max_stale_seconds=0.0
    )
    catalog = Catalog(settings)
    catalog.containers.create_project("p")
    warehouse = catalog.containers.create_warehouse("p.w")
    catalog.containers.create_namespace("p.w.ns")
    catalog.tables.create_table(T, rows([1]))
    catalog.tables.append(T, rows([2]))
    catalog.branches.create_branch(T, "old")
    catalog.branch_writes.append(T, "old", rows([20]))
    catalog.tables.overwrite(T, rows([3]))
    try:
        yield catalog, Path(warehouse.root)
    finally:
        catalog.close()


def all_files(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*") if p.is_file()}


def age_everything(root: Path) -> None:
    when = time.time() - TWO_DAYS
    for p in root.rglob("*"):
        if p.is_file():
            os.utime(p, (when, when))


def branch_data_files(catalog: Catalog, name: str, branch: str) -> set[str]:
    """The data files the branch's head reads, by file name."""
    ds = catalog.branches.open_branch(name, branch).dataset
    return {f.path for frag in ds.get_fragments() for f in frag.metadata.files}


def data_files_on_disk(root: Path) -> set[str]:
    return {p.name for p in root.rglob("*.lance") if p.is_file() and p.parent.name == "data"}


def test_cleanup_and_reclaim_keep_every_file_a_live_branch_shares(lake: tuple[Catalog, Path]) -> None:
    catalog, root = lake
    shared = branch_data_files(catalog, T, "old")
    assert len(shared) == 3  # v1's, v2's (main's, shared) and its own
    done = catalog.versions.cleanup(T, retention=timedelta(0)).detail
    assert done["versions_removed"] == [1]  # v2 stays: the branch was made from it, as if tagged
    assert done["tagged_kept"] == [2]
    assert shared <= data_files_on_disk(root), "0 live files reclaimed by cleanup"
    junk = next(root.rglob("data")) / "junk.lance"  # a real orphan: reclaim is not idle
    junk.write_bytes(b"x" * 100)
    age_everything(root)
    result = orphans.reclaim(catalog, T, timedelta(hours=1))
    deleted = {d["path"].rsplit("/", 1)[-1] for d in result.deleted}
    assert "junk.lance" in deleted
    assert not deleted & shared, "0 live files reclaimed by the orphan reclaim"
    assert ids_of(catalog.branches.open_branch(T, "old")) == [1, 2, 20]
    assert ids_of(catalog.reads.open_table(T)) == [3]


def test_compaction_of_main_then_cleanup_keeps_the_branchs_files(lake: tuple[Catalog, Path]) -> None:
    catalog, root = lake
    catalog.tables.append(T, rows([4]))
    catalog.tables.append(T, rows([5]))
    shared = branch_data_files(catalog, T, "old")
    catalog.versions.compact(T)
    catalog.versions.cleanup(T, retention=timedelta(0))
    age_everything(root)
    orphans.reclaim(catalog, T, timedelta(hours=1))
    assert shared <= data_files_on_disk(root)
    assert ids_of(catalog.branches.open_branch(T, "old")) == [1, 2, 20]
    assert ids_of(catalog.reads.open_table(T)) == [3, 4, 5]


def test_after_a_publish_cleanup_and_reclaim_keep_main_whole(lake: tuple[Catalog, Path]) -> None:
    catalog, root = lake
    catalog.branches.create_branch(T, "fix")
    catalog.branch_writes.append(T, "fix", rows([30]))
    catalog.branch_publish.publish_branch(T, "fix")
    catalog.tables.append(T, rows([31]))
    assert ids_of(catalog.reads.open_table(T)) == [3, 30, 31]
    live = branch_data_files(catalog, T, "old") | {
        f.path for frag in catalog.reads.open_table(T).dataset.get_fragments() for f in frag.metadata.files
    }
    catalog.versions.cleanup(T, retention=timedelta(0))
    age_everything(root)
    report = orphans.scan(catalog, T, min_age=timedelta(hours=1))
    assert not {o.path.rsplit("/", 1)[-1] for o in report.orphans} & live
    orphans.reclaim(catalog, T, timedelta(hours=1))
    assert live <= data_files_on_disk(root)
    assert ids_of(catalog.reads.open_table(T)) == [3, 30, 31]
    assert ids_of(catalog.branches.open_branch(T, "old")) == [1, 2, 20]
    catalog.tables.append(T, rows([32]))
    assert ids_of(catalog.reads.open_table(T)) == [3, 30, 31, 32]


def test_trash_expiry_purges_deleted_branches_and_only_their_own_files(lake: tuple[Catalog, Path]) -> None:
    catalog, root = lake
    own = branch_data_files(catalog, T, "old") - {
        f.path for frag in catalog.reads.open_table(T, 2).dataset.get_fragments() for f in frag.metadata.files
    }
    assert len(own) == 1
    catalog.branch_trash.delete_branch(T, "old")
    assert catalog.trash.expire_trash(now_ms=catalog.clock.wall_ms()) == []
    purged = catalog.trash.expire_trash(now_ms=catalog.clock.wall_ms() + 8 * 86400 * 1000)
    assert [r.operation for r in purged] == ["branch-purge"]
    assert not own & data_files_on_disk(root)  # the branch's own file went
    assert ids_of(catalog.reads.open_table(T, 2)) == [1, 2]  # main's versions kept theirs
    assert ids_of(catalog.reads.open_table(T)) == [3]
    assert list(catalog.store.scan_prefix("brn/")) == []


def test_purging_a_table_removes_its_folder_and_its_branches_records(lake: tuple[Catalog, Path]) -> None:
    catalog, root = lake
    catalog.branches.create_branch(T, "fix")
    catalog.branch_writes.append(T, "fix", rows([30]))
    catalog.branch_publish.publish_branch(T, "fix")  # main's line now lives under tree/
    chains = [i.key for i in catalog.store.scan_prefix("brn/")]
    assert chains
    catalog.trash.drop_table(T, purge=True)
    assert all_files(root) == set()
    assert list(catalog.store.scan_prefix("brn/")) == []
    assert [i.key for i in catalog.store.scan_prefix(keys.all_versions())] == []


def registered_files(catalog: Catalog) -> set[str]:
    """The data files every registered version of main and every live branch version reads."""
    found: set[str] = set()
    for version in catalog.reads.readable_versions(T)[1]:
        ds = catalog.reads.open_table(T, version).dataset
        found |= {f.path for frag in ds.get_fragments() for f in frag.metadata.files}
    for info in catalog.branches.list_branches(T):
        for version in range(info.parent_version, info.version + 1):
            ds = catalog.branches.open_branch(T, info.branch, version).dataset
            found |= {f.path for frag in ds.get_fragments() for f in frag.metadata.files}
    return found


def test_cleanup_after_a_publish_reclaims_the_old_roots_unreferenced_files(
    lake: tuple[Catalog, Path],
) -> None:
    catalog, root = lake
    overwritten = data_files_on_disk(root) - branch_data_files(catalog, T, "old")  # v3's file: [3]
    assert len(overwritten) == 1
    catalog.branches.create_branch(T, "fix")
    catalog.branch_writes.append(T, "fix", rows([30]))
    catalog.branch_publish.publish_branch(T, "fix")  # main v4 at tree/fix, still reading [3]
    catalog.tables.overwrite(T, rows([40]))  # v5: nothing of the old root any more
    shared = branch_data_files(catalog, T, "old")
    done = catalog.versions.cleanup(T, retention=timedelta(0)).detail
    assert done["versions_removed"] == [1, 3, 4]
    after = data_files_on_disk(root)
    assert not overwritten & after, "the old root's unreferenced file was reclaimed"
    assert done["other_roots_files_removed"] >= 1
    assert registered_files(catalog) <= after, "0 live files reclaimed"
    assert shared <= after
    assert ids_of(catalog.reads.open_table(T)) == [40]
    assert ids_of(catalog.reads.open_table(T, 2)) == [1, 2]
    assert ids_of(catalog.branches.open_branch(T, "old")) == [1, 2, 20]
    # The table folder is still a dataset: branches hang from it (purging one opens it).
    age_everything(root)
    assert orphans.scan(catalog, T, min_age=timedelta(hours=1)).orphan_count >= 0
    catalog.branch_trash.delete_branch(T, "old", purge=True)
    assert list(catalog.store.scan_prefix("brn/")) == []
    catalog.tables.append(T, rows([41]))
    assert ids_of(catalog.reads.open_table(T)) == [40, 41]


def test_cleanup_reclaims_an_earlier_published_roots_files_too(lake: tuple[Catalog, Path]) -> None:
    catalog, root = lake
    catalog.branches.create_branch(T, "one")
    catalog.branch_writes.append(T, "one", rows([30]))
    catalog.branch_publish.publish_branch(T, "one")  # main at tree/one
    catalog.tables.append(T, rows([31]))  # a file of main's under tree/one/data
    catalog.branches.create_branch(T, "two")
    catalog.branch_writes.append(T, "two", rows([32]))
    catalog.branch_publish.publish_branch(T, "two")  # main at tree/two, made from tree/one
    first = {p.name for p in root.rglob("tree/one/data/*.lance")}
    assert len(first) == 2
    catalog.tables.overwrite(T, rows([40]))
    catalog.versions.cleanup(T, retention=timedelta(0))
    after = data_files_on_disk(root)
    assert not first & after, "the earlier published root's unreferenced files were reclaimed"
    assert registered_files(catalog) <= after, "0 live files reclaimed"
    assert ids_of(catalog.reads.open_table(T)) == [40]
    assert ids_of(catalog.branches.open_branch(T, "old")) == [1, 2, 20]
    age_everything(root)
    assert orphans.scan(catalog, T, min_age=timedelta(hours=1)).branches  # every root still opens
