"""Version cleanup in main's older dataset roots (``catalog/root_cleanup.py``), on a local folder
and on S3: after a publish and an overwrite, the files only removed versions referenced, in the
table folder's own root, are reclaimed; a file a branch or a registered version reads stays."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta

import pytest

from lake_platform.catalog.catalog import Catalog
from lake_platform.engine import lance_engine as engine
from lake_platform_tests.catalog.conftest import Lake, ids_of, rows

T = "p.w.ns.t"


@pytest.fixture
def catalog(lake: Lake) -> Iterator[Catalog]:
    """The lake's catalog with no ticket window: superseded versions may go at once."""
    quick = Catalog(
        lake.settings.model_copy(update={"ticket_lifetime_seconds": 0.001, "reader_max_stale_seconds": 0.0})
    )
    try:
        yield quick
    finally:
        quick.close()


def data_files(catalog: Catalog) -> set[str]:
    folder = catalog.reads.open_table(T).record.folder_uri
    return {
        f.path
        for f in engine.list_files(folder, catalog.settings.storage_options(folder))
        if f.path.endswith(".lance") and "/data/" in f"/{f.path}"
    }


def test_cleanup_reclaims_the_table_folders_files_main_no_longer_reads(catalog: Catalog) -> None:
    catalog.tables.create_table(T, rows([1]))
    catalog.tables.append(T, rows([2]))
    catalog.branches.create_branch(T, "keep")  # made from v2: shares v1's and v2's files
    catalog.tables.overwrite(T, rows([3]))
    catalog.branches.create_branch(T, "fix")
    catalog.branch_writes.append(T, "fix", rows([30]))
    catalog.branch_publish.publish_branch(T, "fix")
    shared = data_files(catalog)
    catalog.tables.overwrite(T, rows([40]))
    new = data_files(catalog) - shared
    done = catalog.versions.cleanup(T, retention=timedelta(0)).detail
    assert done["versions_removed"] == [1, 3, 4]
    left = data_files(catalog)
    gone = shared - left
    assert len(gone) == 2  # [3] in the table folder's root, [30] in fix's (Lance's cleanup)
    assert any(not p.startswith("tree/") for p in gone), "the old root's file was reclaimed"
    assert done["other_roots_files_removed"] >= 1 and done["other_roots_bytes_removed"] > 0
    assert new <= left
    assert ids_of(catalog.reads.open_table(T)) == [40]
    assert ids_of(catalog.reads.open_table(T, 2)) == [1, 2]
    assert ids_of(catalog.branches.open_branch(T, "keep")) == [1, 2]
    catalog.tables.append(T, rows([41]))
    assert ids_of(catalog.reads.open_table(T)) == [40, 41]


def test_a_live_line_that_cannot_be_read_makes_cleanup_keep_every_old_file(catalog: Catalog) -> None:
    catalog.tables.create_table(T, rows([1]))
    catalog.branches.create_branch(T, "keep")
    catalog.tables.overwrite(T, rows([3]))
    catalog.branches.create_branch(T, "fix")
    catalog.branch_writes.append(T, "fix", rows([30]))
    catalog.branch_publish.publish_branch(T, "fix")
    catalog.tables.overwrite(T, rows([40]))
    in_folder = {p for p in data_files(catalog) if not p.startswith("tree/")}
    # The branch's only manifest goes: what it references can no longer be known.
    keep = catalog.branches.describe_branch(T, "keep")["location"]
    storage = catalog.settings.storage_options(str(keep))
    manifests = [f.path for f in engine.list_files(str(keep), storage, under="_versions")]
    fs, root = engine.filesystem(str(keep), storage)
    for path in manifests:
        if path.endswith(".manifest"):
            fs.delete_file(f"{root}/{path}")
    done = catalog.versions.cleanup(T, retention=timedelta(0)).detail
    assert done["versions_removed"] and done["other_roots_skipped"] == 1
    assert done["other_roots_files_removed"] == 0
    assert in_folder <= data_files(catalog)
    assert ids_of(catalog.reads.open_table(T)) == [40]
