"""Kills leave nothing repair cannot clear (issue 44, row 10): the staging manifest of a writer
killed mid-commit is removed by ``repair_table`` (``lake table repair``) and by the next
writer, once it is known never to be registered; one a live commit may still register stays."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pytest

from lake_platform.catalog.catalog import Catalog
from lake_platform.engine.manifests import final_manifest_name
from lake_platform.settings import load_settings
from lake_platform_tests.catalog.conftest import ids_of

T = "p.w.ns.t"

_KILLED_WRITER = """
import os, signal, sys
import pyarrow as pa
from lake_platform.catalog.catalog import Catalog
from lake_platform.settings import load_settings

def die(point):
    if point == sys.argv[2]:
        os.kill(os.getpid(), signal.SIGKILL)

Catalog(load_settings(), hook=die).tables.append(sys.argv[1], pa.table({"id": [2]}).to_reader())
"""


@pytest.fixture
def home(tmp_path: Path) -> Iterator[Path]:
    home = tmp_path / "home"
    catalog = Catalog(load_settings(home=home))
    catalog.containers.create_project("p")
    catalog.containers.create_warehouse("p.w")
    catalog.containers.create_namespace("p.w.ns")
    catalog.tables.create_table(T, pa.table({"id": [1]}).to_reader())
    catalog.close()
    yield home


def _kill_writer_at(home: Path, point: str) -> None:
    killed = subprocess.run(
        [sys.executable, "-c", _KILLED_WRITER, T, point],
        env={**os.environ, "LAKE_HOME": str(home)},
        capture_output=True,
    )
    assert killed.returncode == -signal.SIGKILL, killed.stderr.decode()[-2000:]


def _staging(catalog: Catalog) -> list[str]:
    location = catalog.reads.open_table(T).record.location
    return sorted(n for n in os.listdir(os.path.join(location, "_versions")) if ".manifest-" in n)


@pytest.mark.parametrize("point", ["append:after-commit", "append:before-finalize"])
def test_repair_removes_the_staging_manifest_of_a_writer_killed_after_its_commit(
    home: Path, point: str
) -> None:
    _kill_writer_at(home, point)
    with Catalog(load_settings(home=home)) as catalog:
        assert len(_staging(catalog)) == 1  # published at its canonical path, the copy left behind
        assert catalog.manifests.repair_table(T) == {"finalized": [], "quarantined": [], "branches": {}}
        assert _staging(catalog) == []
        snap = catalog.reads.open_table(T)
        assert snap.version == 2 and ids_of(snap) == [1, 2]


def test_the_next_writer_removes_the_staging_manifest_a_killed_writer_left(home: Path) -> None:
    _kill_writer_at(home, "append:after-commit")
    with Catalog(load_settings(home=home)) as catalog:
        assert len(_staging(catalog)) == 1
        catalog.tables.append(T, pa.table({"id": [3]}).to_reader())
        assert _staging(catalog) == []
        assert ids_of(catalog.reads.open_table(T)) == [1, 2, 3]


def test_a_staging_manifest_no_commit_registered_is_removed_once_no_live_commit_can_register_it(
    home: Path,
) -> None:
    _kill_writer_at(home, "append:staged")  # staged, never registered: version 2 is still free
    with Catalog(load_settings(home=home)) as catalog:
        (name,) = _staging(catalog)
        assert name.startswith(final_manifest_name(2))
        # A Lance client stages before its CreateTableVersion takes the lease: while that may
        # still be on its way, the manifest stays.
        assert catalog.manifests.repair_table(T) == {"finalized": [], "quarantined": [], "branches": {}}
        assert _staging(catalog) == [name]
        location = catalog.reads.open_table(T).record.location
        path = os.path.join(location, "_versions", name)
        window = catalog.settings.lease_ttl_seconds + catalog.settings.lease_safety_margin_seconds
        old = time.time() - 2 * window  # written before any live commit could still register it
        os.utime(path, (old, old))
        catalog.manifests.repair_table(T)
        assert _staging(catalog) == []
        snap = catalog.reads.open_table(T)
        assert snap.version == 1 and ids_of(snap) == [1]
        catalog.tables.append(T, pa.table({"id": [3]}).to_reader())
        assert ids_of(catalog.reads.open_table(T)) == [1, 3]


def test_a_staging_manifest_a_version_record_names_is_kept(home: Path) -> None:
    """Killed between the registry commit and publishing: the staging manifest is the version's
    only copy; repair publishes it rather than removing it."""
    _kill_writer_at(home, "append:registered")
    with Catalog(load_settings(home=home)) as catalog:
        assert catalog.manifests.repair_table(T) == {"finalized": [2], "quarantined": [], "branches": {}}
        assert _staging(catalog) == []
        assert ids_of(catalog.reads.open_table(T)) == [1, 2]
