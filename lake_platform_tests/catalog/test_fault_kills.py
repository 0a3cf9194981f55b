"""Kill a writer process (SIGKILL) at every named fault point of the write path, maintenance,
drops and cascades, then check what must survive any crash:

1. the registry equals the engine at every registered version (each opens, at that version);
2. no committed row is lost (and nothing uncommitted shows);
3. a retry (same commit id where the API has one) lands exactly once;
4. the dead writer's lease can be taken within TTL + margin;
5. the orphan scan reports the debris, and reclaim removes it without touching live data;
6. no table folder is left that neither the registry nor the trash knows (no leak past the scan).

Every run starts from the same template lake (restored in place, so registered locations stay
valid) on SQLite and a local folder. ``KILLS`` lists every arrival at a fault point the
operations make; ``test_kill_list_covers_every_point`` keeps it complete.
"""

from __future__ import annotations

import shutil
import signal
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

import pytest

from lake_platform.catalog.catalog import Catalog
from lake_platform.engine import lance_engine as engine
from lake_platform.errors import InvalidTableState
from lake_platform.maintenance import orphan_folders, orphans
from lake_platform.registry import keys
from lake_platform.registry.records import LeaseRecord, TableRecord, VersionRecord, decode
from lake_platform.settings import LakeSettings, load_settings
from lake_platform_tests.catalog import faults
from lake_platform_tests.catalog.conftest import rows
from lake_platform_tests.catalog.fault_outcomes import COMMIT_ID, after_kill, retry_and_check
from lake_platform_tests.catalog.faults import (
    CASCADE,
    DROPPED,
    GONE,
    KEEP,
    T,
    check_registry_matches_engine,
    registered,
)
from lake_platform_tests.maintenance.helpers import age_tree

#: Short enough that "taken over within TTL + margin" is a small number; long enough that a
#: live writer on a busy machine keeps its lease (the heartbeat renews it every TTL/3).
LEASE_TTL = 3.0
#: What a contender may need beyond the TTL: clock granularity and one registry round trip.
RECLAIM_MARGIN = 0.5
TWO_DAYS = 2 * 86400.0


def _kills(op: str, *steps: str | tuple[str, int]) -> list[tuple[str, str, int]]:
    """(operation, point, n) for each step (``":step"`` or ``(":step", n)``) of ``op_<name>``."""
    prefix = op.removeprefix("op_").replace("_", "-")
    return [
        (op, prefix + step, 1) if isinstance(step, str) else (op, prefix + step[0], step[1]) for step in steps
    ]


#: A write's steps in order: staged (data and staging manifest written, nothing registered),
#: registered (one registry transaction landed the version at its canonical path; the file is
#: not there yet), the publish's copy (no registry write follows it: there is no re-point step
#: any more), then the catalog's tidy-up.
_WRITE = [
    ":before-write",
    ":staged",
    ":registered",
    ":finalize-copied",
    ":after-commit",
    ":after-write",
    ":before-finalize",
    ":after-finalize",
]
KILLS: list[tuple[str, str, int]] = [
    *_kills("op_append", *_WRITE),
    *_kills("op_create", *_WRITE),
    *_kills("op_delete", *[p for p in _WRITE if p != ":after-write"]),
    *_kills(
        "op_compact",
        ":before-write",
        ":staged",
        ":registered",
        ":finalize-copied",
        ":after-commit",
        (":staged", 2),
        (":registered", 2),
        (":finalize-copied", 2),
        (":after-commit", 2),
        ":before-finalize",
        ":after-finalize",
    ),
    *_kills("op_cleanup", ":chose-versions", ":after-registry", ":after-engine", ":after-manifests"),
    *_kills("op_drop", ":resolved", ":before-commit", ":after-commit"),
    # drop --purge purges through trash expiry, right after filing its due record
    *[("op_drop", f"expire:{step}", 1) for step in ("found", "claimed", "purged")],
    *_kills(
        "op_drop_namespace",
        ":checked",
        ":marked",
        ":filed",
        ":table",
        ":before-commit",
        (":table", 2),
        (":before-commit", 2),
        ":detached",
        ":namespace",
        (":namespace", 2),
    ),
    *_kills("op_undrop_namespace", ":namespace", (":namespace", 2), ":table", (":table", 2)),
    *_kills("op_expire", ":found", ":claimed", ":purged"),
]

#: Points where the dead writer leaves files no registered version references (its data files
#: and staging manifest; or, for cleanup, the versions it already took out of the registry).
DEBRIS = {
    ("op_append", "append:staged"),
    ("op_delete", "delete:staged"),
    ("op_compact", "compact:staged"),
    ("op_cleanup", "cleanup:after-registry"),
}

#: Points where the dead writer leaves a whole table folder that neither registry nor trash
#: names (a create's new incarnation, staged but never committed): only the warehouse-level
#: folder scan sees it.
LEAKS = {("op_create", "create:staged")}


def _holds_lease(point: str) -> bool:
    """Whether a writer stopped at ``point`` holds its table's lease (trash expiry takes none, a
    namespace undrop its cascade's while it restores; a drop, and a cascade for each table it
    detaches, takes it after resolving the name and lets go after its commit; an append and a
    create release it in their commit's own transaction)."""
    if point.startswith("undrop-namespace:"):
        return True
    if point.startswith("drop-namespace:"):
        return point == "drop-namespace:before-commit"
    op, _, step = point.partition(":")
    if op in ("append", "create") and step not in ("before-write", "staged"):
        return False  # its one registry commit also released its lease
    return not point.startswith("expire:") and point not in (
        "drop:resolved",
        "drop:after-commit",
    )


#: Killed between the registry commit and publishing the manifest: the version is committed,
#: and reads refuse it (typed, writing nothing) until the next writer or the maintenance step
#: (``finish_versions``: the orphan scan, ``lake table repair``) publishes it.
UNPUBLISHED = {"registered"}


def recover_unpublished(c: Catalog, root: Path) -> None:
    """The dead writer's version is registered but unpublished: an open refuses it and writes
    nothing; the maintenance step publishes it, after which every invariant holds."""
    unpublished = [
        name for name, record in registered(c).items() if _unpublished(c, record, record.current_version)
    ]
    assert unpublished, "the kill left no unpublished version"
    before = sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())
    for name in unpublished:
        with pytest.raises(InvalidTableState, match="not finalized"):
            c.reads.open_table(name)
    assert sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file()) == before, (
        "a refused open wrote to storage"
    )
    for name in unpublished:
        assert c.manifests.finish_versions(name)


def _unpublished(c: Catalog, record: TableRecord, version: int) -> bool:
    """Registered at its staging path (the old form, or a squatter took the canonical one), or
    registered at its canonical path with the file not there yet (its writer stopped between
    the commit and the publish; the staging manifest it came from is still there)."""
    ver = _version(c, record, version)
    if engine.is_staging_manifest(ver.manifest_path):
        return True
    storage = c.settings.storage_options(record.location)
    if ver.staged_from is None or engine.manifest_exists(record.location, ver.manifest_path, storage):
        return False
    assert engine.manifest_exists(record.location, ver.staged_from, storage), "both copies are gone"
    return True


def _version(c: Catalog, record: TableRecord, version: int) -> VersionRecord:
    item = c.store.get(keys.version(record.incarnation, version))
    assert item is not None
    return decode(VersionRecord, item.value, item.key)


def _id(kill: tuple[str, str, int]) -> str:
    op, point, nth = kill
    name = op.removeprefix("op_").replace("_", "-")
    # A point another operation owns (drop --purge passes expiry's) is named with its operation.
    shown = point if point.startswith(name + ":") else f"{name}/{point}"
    return shown if nth == 1 else f"{shown}#{nth}"


@dataclass
class KillLake:
    settings: LakeSettings
    home: Path
    template: Path

    def reset(self) -> Catalog:
        shutil.rmtree(self.home, ignore_errors=True)
        shutil.copytree(self.template, self.home)
        return Catalog(self.settings)

    @property
    def root(self) -> Path:
        return Path(self.settings.warehouse_root) / "p" / "w"


def kill_settings(home: Path) -> LakeSettings:
    # Versions superseded a moment ago are already old enough for cleanup (no ticket window).
    return load_settings(
        home=home,
        lease_ttl_seconds=LEASE_TTL,
        lease_safety_margin_seconds=0.75,
        lease_io_timeout_seconds=0.3,
        lease_wait_seconds=30.0,
        ticket_lifetime_seconds=0.001,
        reader_max_stale_seconds=0.0,
    )


@pytest.fixture(scope="module")
def kill_lake(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KillLake]:
    base = tmp_path_factory.mktemp("kills")
    settings = kill_settings(base / "home")
    with Catalog(settings) as c:
        c.containers.create_project("p")
        c.containers.create_warehouse("p.w")
        c.containers.create_namespace("p.w.ns")
        c.tables.create_table(T, rows([1, 2, 3]))
        c.tables.append(T, rows([4]))
        c.tables.append(T, rows([5]))
        c.tables.create_table(KEEP, rows([42]))
        c.tables.create_table(GONE, rows([7]))
        c.trash.drop_table(GONE)
        c.containers.create_namespace(CASCADE)
        c.containers.create_namespace(f"{CASCADE}.sub")
        c.tables.create_table(f"{CASCADE}.a", rows([10]))
        c.tables.create_table(f"{CASCADE}.sub.b", rows([20]))
        c.containers.create_namespace(DROPPED)
        c.containers.create_namespace(f"{DROPPED}.sub")
        c.tables.create_table(f"{DROPPED}.c", rows([30]))
        c.tables.create_table(f"{DROPPED}.sub.d", rows([40]))
        c.cascade.drop_namespace(DROPPED, cascade=True)
    shutil.copytree(base / "home", base / "template")
    yield KillLake(settings, base / "home", base / "template")


# == invariants ===================================================================================


def check_leases_reclaimable(c: Catalog, killed_at: float) -> int:
    """A contender arriving TTL + margin after the kill takes every lease the dead writer held.

    The contender's clock is moved ahead instead of sleeping: it is the gate's own expiry
    decision, made at that instant. Returns how many unreleased leases it took over."""
    clock = faults.ShiftedClock(killed_at + LEASE_TTL + RECLAIM_MARGIN - time.time())
    contender = Catalog(
        c.settings.model_copy(update={"lease_wait_seconds": 0.0}), clock=clock, heartbeat=False
    )
    held = 0
    try:
        for item in list(c.store.scan_prefix("lse/")):
            lease = decode(LeaseRecord, item.value, item.key)
            held += not lease.released
            taken = contender.gate.acquire(lease.incarnation)  # LeaseUnavailable would fail the test
            assert taken.token > lease.token
            contender.gate.release(taken)
    finally:
        contender.close()
    return held


def check_orphans(c: Catalog, expect_debris: bool) -> int:
    """Scan and reclaim every registered table; live data reads the same before and after."""
    before = check_registry_matches_engine(c)
    age_tree(c.settings.warehouse_root, TWO_DAYS)
    found = 0
    for name in registered(c):
        report = orphans.scan(c, name, min_age=timedelta(hours=1))
        result = orphans.reclaim(c, name, timedelta(hours=1))
        assert {d["path"] for d in result.deleted} == {o.path for o in report.orphans}, name
        assert orphans.scan(c, name, min_age=timedelta(hours=1)).orphan_count == 0, name
        found += report.orphan_count
    if expect_debris:
        assert found > 0, "the dead writer's files were not reported"
    assert check_registry_matches_engine(c) == before  # reclaim touched no live data
    return found


def leaked_folders(c: Catalog, root: Path) -> list[str]:
    """Table folders that belong to no registered table and no trash record (found by walking
    the whole tree, independently of the scan under test)."""
    known = {r.incarnation for r in registered_all(c)}
    known |= {t.table.incarnation for t in c.trash.list_trash() if t.table is not None}
    folders = {p for p in root.rglob("*.lance") if p.is_dir()}
    return sorted(
        p.relative_to(root).as_posix()
        for p in folders
        if p.name.removesuffix(".lance").rsplit("-", 1)[-1] not in known
    )


def check_no_leaked_folders(
    c: Catalog, root: Path, expect_leak: bool, before: dict[tuple[str, int], list[int]]
) -> None:
    """The warehouse scan reports exactly the table folders nobody knows, and reclaim removes
    exactly those, touching no live data (``before``: what ``check_registry_matches_engine``
    found just before, each registered version's rows); afterwards every folder is registered
    or in the trash."""
    leaked = leaked_folders(c, root)
    assert bool(leaked) == expect_leak, f"table folders nobody knows: {leaked}"
    for rel in leaked:
        age_tree(root / rel, TWO_DAYS)  # the debris has waited out the age gate
    report = orphan_folders.scan_folders(c, "p.w", min_age=timedelta(hours=1))
    assert sorted(o.path for o in report.orphans) == leaked, "the scan missed or invented a leak"
    result = orphan_folders.reclaim_folders(c, "p.w", timedelta(hours=1))
    assert sorted(d["path"] for d in result.deleted) == leaked and not result.kept
    assert leaked_folders(c, root) == [], "reclaim left a leaked folder"
    assert orphan_folders.scan_folders(c, "p.w", min_age=timedelta(hours=1)).orphan_count == 0
    assert check_registry_matches_engine(c) == before  # reclaim touched no live data


def registered_all(c: Catalog) -> list[TableRecord]:
    """Registered tables, declared ones (no version yet) included."""
    return [decode(TableRecord, i.value, i.key) for i in c.store.scan_prefix("tbl/")]


# == the tests ====================================================================================


@pytest.mark.slow
@pytest.mark.parametrize("kill", [pytest.param(k, id=_id(k)) for k in KILLS])
def test_kill_writer_at_fault_point(kill_lake: KillLake, kill: tuple[str, str, int]) -> None:
    op, point, nth = kill
    kill_lake.reset().close()
    code, killed_at = faults.kill_writer(kill_lake.settings, getattr(faults, op), point, nth, COMMIT_ID)
    assert code == -signal.SIGKILL, f"the writer never reached {point} (#{nth}); exit code {code}"
    with Catalog(kill_lake.settings) as c:
        held = check_leases_reclaimable(c, killed_at)
        assert held == (1 if _holds_lease(point) else 0), f"{held} leases left held by the dead writer"
        if point.split(":")[1] in UNPUBLISHED:
            recover_unpublished(c, kill_lake.root)
        check_registry_matches_engine(c)
        after_kill(op, c)
        check_orphans(c, expect_debris=(op, point) in DEBRIS and nth == 1)
        retry_and_check(op, c)
        # Every registered version opens at its version; the folder check compares against it.
        live = check_registry_matches_engine(c)
        check_no_leaked_folders(c, kill_lake.root, expect_leak=(op, point) in LEAKS and nth == 1, before=live)


def test_kill_list_covers_every_point(kill_lake: KillLake) -> None:
    """Every arrival at a fault point that the operations make is a kill in ``KILLS``."""
    reached = set()
    for op in sorted({k[0] for k in KILLS}):
        recorder = faults.Recorder()
        kill_lake.reset().close()
        with Catalog(kill_lake.settings, hook=recorder) as c:
            getattr(faults, op)(c, COMMIT_ID)
        reached |= {(op, point, nth) for point, nth in recorder.occurrences()}
    assert reached <= set(KILLS), f"fault points no kill covers: {sorted(reached - set(KILLS))}"


@pytest.mark.slow
def test_lease_of_a_killed_writer_is_taken_in_real_time(kill_lake: KillLake) -> None:
    """The same takeover with the real clock: a writer waiting for the lease gets it within
    TTL + margin of the kill (not only a contender whose clock is moved ahead)."""
    kill_lake.reset().close()
    # Killed with its data staged, before its commit (which would also release the lease).
    code, killed_at = faults.kill_writer(kill_lake.settings, faults.op_append, "append:staged", 1, COMMIT_ID)
    assert code == -signal.SIGKILL
    with Catalog(kill_lake.settings) as c:
        incarnation = c.reads.open_table(T).record.incarnation
        held = decode(LeaseRecord, c.store.get(keys.lease(incarnation)).value)  # type: ignore[union-attr]
        assert not held.released  # the dead writer never let go
        lease = c.gate.acquire(incarnation)
        waited = time.time() - killed_at
        c.gate.release(lease)
        assert waited <= LEASE_TTL + RECLAIM_MARGIN, f"took {waited:.2f}s"
        retry_and_check("op_append", c)
