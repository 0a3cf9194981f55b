"""A branch writer killed (SIGKILL, ``faults.kill_writer``) between its registry write and
publishing its manifest, on SQLite and on DynamoDB (moto): the branch's head is committed but
not finalized, so a reader of it is refused (typed, nothing written), as on main, until the
branch's next writer settles it under the branch's lease (``Branches.held``, main's
``Manifests.settle``) or ``repair_table`` of the table, which repairs every live branch too.

A branch create killed between Lance's ``create_branch`` and its registry commit leaves a Lance
branch of the branch's name that no record names: its retry (under main's lease, as every create
of the table's branches) removes it and takes the name, which stock clients open the branch by,
and touches no Lance branch a live or trashed record names."""

from __future__ import annotations

import signal
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import lance
import pytest

from lake_platform.catalog.catalog import Catalog
from lake_platform.catalog.provenance import Provenance
from lake_platform.engine import branches as engine_branches
from lake_platform.errors import InvalidTableState
from lake_platform.maintenance import orphans
from lake_platform.settings import LakeSettings
from lake_platform_tests.catalog import faults
from lake_platform_tests.catalog.conftest import ids_of, rows

T = "p.w.ns.t"
KILLED_AT = "branch-append:registered"  # the version committed, its manifest not published


def op_branch_append(catalog: Catalog, commit_id: str) -> Any:
    """The write the kill interrupts: [3] appended to branch dev (its version 2)."""
    return catalog.branch_writes.append(T, "dev", rows([3]), by=Provenance(commit_id=commit_id))


@pytest.fixture
def settings(backend_settings: LakeSettings) -> LakeSettings:
    """``T`` at version 1 ([1, 2]) with branch dev, then dev's append killed after its commit."""
    with Catalog(backend_settings) as c:
        c.tables.create_table(T, rows([1, 2]))
        c.branches.create_branch(T, "dev")
    code, _ = faults.kill_writer(backend_settings, op_branch_append, KILLED_AT, 1, "branch-kill-1")
    assert code == -signal.SIGKILL, f"the writer never reached {KILLED_AT}; exit code {code}"
    return backend_settings


def files(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())


def refused_as_on_main(c: Catalog) -> None:
    """dev's head is committed, and a read of it is refused as main's reader refuses one, typed
    and writing nothing; main never moved."""
    assert c.branches.describe_branch(T, "dev")["version"] == 2
    root = Path(c.settings.home)
    before = files(root)
    for version in (None, 2):
        with pytest.raises(InvalidTableState, match="committed but not finalized"):
            c.branches.open_branch(T, "dev", version)
    assert files(root) == before, "a refused open wrote to storage"
    assert ids_of(c.reads.open_table(T)) == [1, 2]


def test_the_next_writer_of_the_branch_finalizes_the_killed_writers_version(settings: LakeSettings) -> None:
    with Catalog(settings) as c:
        refused_as_on_main(c)
        result = c.branch_writes.append(T, "dev", rows([4]))
        assert (result.from_version, result.to_version) == (2, 3)
        assert ids_of(c.branches.open_branch(T, "dev", 2)) == [1, 2, 3]
        assert ids_of(c.branches.open_branch(T, "dev")) == [1, 2, 3, 4]
        _, versions = c.branches.readable_versions(T, "dev")
        assert sorted(versions) == [1, 2, 3]
        assert ids_of(c.reads.open_table(T)) == [1, 2]  # main never moved


def test_repairing_the_table_finalizes_its_branches_versions(settings: LakeSettings) -> None:
    with Catalog(settings) as c:
        refused_as_on_main(c)
        repaired = c.manifests.repair_table(T)
        assert repaired["finalized"] == [] and repaired["branches"] == {
            "dev": {"finalized": [2], "quarantined": []}
        }
        assert ids_of(c.branches.open_branch(T, "dev")) == [1, 2, 3]
        again = c.manifests.repair_table(T)
        assert again["branches"] == {"dev": {"finalized": [], "quarantined": []}}
        assert c.branch_writes.append(T, "dev", rows([4])).to_version == 3
        assert ids_of(c.reads.open_table(T)) == [1, 2]


def op_branch_create(catalog: Catalog, commit_id: str) -> Any:
    """The create the kill interrupts: branch fix of main's head."""
    return catalog.branches.create_branch(T, "fix", by=Provenance(commit_id=commit_id))


def test_a_create_killed_after_lance_made_its_branch_leaves_the_name_to_its_retry(
    backend_settings: LakeSettings,
) -> None:
    with Catalog(backend_settings) as c:
        c.tables.create_table(T, rows([1, 2]))
        c.branches.create_branch(T, "dev")
        c.branch_writes.append(T, "dev", rows([3]))
        c.branches.create_branch(T, "old")
        c.branch_writes.append(T, "old", rows([4]))
        c.branch_trash.delete_branch(T, "old")  # in the trash: its Lance branch stays
        c.tables.append(T, rows([5]))
        folder = c.reads.open_table(T).record.folder_uri.rstrip("/")
    code, _ = faults.kill_writer(backend_settings, op_branch_create, "branch:engine-made", 1, "create-fix-1")
    assert code == -signal.SIGKILL, f"the create never reached Lance's branch; exit code {code}"
    assert engine_branches.branch_names(folder) == ["dev", "fix", "old"]  # fix: no record names it
    # the retry, once the dead create's lease (main's) has expired
    later = backend_settings.lease_ttl_seconds + backend_settings.lease_safety_margin_seconds + 1
    with Catalog(backend_settings, clock=faults.ShiftedClock(later)) as c:
        c.branches.create_branch(T, "fix", by=Provenance(commit_id="create-fix-1"))
        assert c.branches.describe_branch(T, "fix")["location"] == f"{folder}/tree/fix"
        c.branch_writes.append(T, "fix", rows([6]))
        assert ids_of(c.branches.open_branch(T, "fix")) == [1, 2, 5, 6]
        # pylance, as it is, opens the branch by its name
        opened = lance.dataset(folder).checkout_version(("fix", None))
        assert sorted(opened.to_table(columns=["id"]).column("id").to_pylist()) == [1, 2, 5, 6]
        # nothing a live or trashed branch reads was touched
        assert ids_of(c.branches.open_branch(T, "dev")) == [1, 2, 3]
        c.branch_trash.undrop_branch(T, "old")
        assert ids_of(c.branches.open_branch(T, "old")) == [1, 2, 4]
        assert ids_of(c.reads.open_table(T)) == [1, 2, 5]
        assert engine_branches.branch_names(folder) == ["dev", "fix", "old"]
        report = orphans.scan(c, T, min_age=timedelta(hours=1), now=time.time() + 7200)
        assert report.unknown_branches == [] and report.orphans == []
