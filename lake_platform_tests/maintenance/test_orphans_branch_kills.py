"""The orphan scan and reclaim after a branch writer was SIGKILLed (``faults.kill_writer``) between
its registry write and publishing its manifest: the branch's version is registered, its data file
written, its manifest only at its staging path. The scan finishes it first, as it does main's
(``Manifests.finish_versions``), so nothing that version references is ever reclaimed, whether
the branch is live or in the trash (undrop reads it)."""

from __future__ import annotations

import signal
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from lake_platform.catalog.catalog import Catalog
from lake_platform.catalog.provenance import Provenance
from lake_platform.maintenance import orphans
from lake_platform.settings import LakeSettings, load_settings
from lake_platform_tests.catalog import faults
from lake_platform_tests.catalog.conftest import ids_of
from lake_platform_tests.maintenance.helpers import age_tree, files_under, make_lake, rows

T = "p.w.ns.t"
KILLED_AT = "branch-append:registered"  # the version committed, its manifest not published
TWO_DAYS = 2 * 86400
HOUR = timedelta(hours=1)


def op_branch_append(catalog: Catalog, commit_id: str) -> Any:
    """The write the kill interrupts: ids 10..12 appended to branch dev (the version above its first)."""
    return catalog.branch_writes.append(T, "dev", rows(10, 3).to_reader(), by=Provenance(commit_id=commit_id))


@dataclass
class Killed:
    settings: LakeSettings
    root: Path  # the table folder
    killed: int  # dev's version the writer registered and never published
    written: set[str]  # its data file, relative to root
    before: set[str]  # every file right after the kill


@pytest.fixture
def killed(tmp_path: Path) -> Killed:
    """``T`` at version 2 ([0..3]) with branch dev, then dev's append killed after its commit;
    every file then aged past the scan's gate."""
    settings = load_settings(home=tmp_path / "home")
    with make_lake(tmp_path / "home") as c:
        c.tables.create_table(T, rows(0, 2).to_reader())
        c.tables.append(T, rows(2, 2).to_reader())
        c.branches.create_branch(T, "dev")
        made = c.branches.describe_branch(T, "dev")
        root = Path(c.reads.open_table(T).record.folder_uri.removeprefix("file://"))
    code, _ = faults.kill_writer(settings, op_branch_append, KILLED_AT, 1, "branch-orphans-1")
    assert code == -signal.SIGKILL, f"the writer never reached {KILLED_AT}; exit code {code}"
    prefix = Path(str(made["location"])).relative_to(root).as_posix()
    written = {p for p in files_under(root) if p.startswith(f"{prefix}/data/")}
    assert len(written) == 1, written  # the killed version's data file: dev had none of its own
    age_tree(root, TWO_DAYS)
    return Killed(settings, root, int(made["version"]) + 1, written, files_under(root))


def scan_and_reclaim_keep_everything(c: Catalog, k: Killed) -> None:
    """Nothing reported, nothing reclaimed; the only file gone is the branch's staging manifest,
    published at its canonical path."""
    report = orphans.scan(c, T, min_age=HOUR)
    result = orphans.reclaim(c, T, HOUR)
    reclaimed = [d["path"] for d in result.deleted]
    assert [o.path for o in report.orphans] == [] and reclaimed == [], (report.orphans, reclaimed)
    assert report.files_live == report.files_scanned
    after = files_under(k.root)
    assert k.written <= after
    gone = k.before - after
    assert len(gone) == 1 and all("/_versions/" in p and "-" in p.rsplit("/", 1)[1] for p in gone), gone


def test_a_killed_branch_writers_version_keeps_its_files_through_scan_and_reclaim(killed: Killed) -> None:
    with Catalog(killed.settings) as c:
        assert c.branches.describe_branch(T, "dev")["version"] == killed.killed  # not finalized
        scan_and_reclaim_keep_everything(c, killed)
        assert ids_of(c.branches.open_branch(T, "dev", killed.killed)) == [0, 1, 2, 3, 10, 11, 12]
        assert c.branch_writes.append(T, "dev", rows(20, 1).to_reader()).to_version == killed.killed + 1
        assert ids_of(c.branches.open_branch(T, "dev")) == [0, 1, 2, 3, 10, 11, 12, 20]
        assert ids_of(c.reads.open_table(T)) == [0, 1, 2, 3]  # main never moved
        assert c.manifests.repair_table(T)["branches"] == {"dev": {"finalized": [], "quarantined": []}}


def test_a_trashed_branch_keeps_its_killed_writers_version_for_undrop(killed: Killed) -> None:
    with Catalog(killed.settings) as c:
        c.branch_trash.delete_branch(T, "dev")
        scan_and_reclaim_keep_everything(c, killed)
        c.branch_trash.undrop_branch(T, "dev")
        assert ids_of(c.branches.open_branch(T, "dev")) == [0, 1, 2, 3, 10, 11, 12]
        assert ids_of(c.reads.open_table(T)) == [0, 1, 2, 3]
