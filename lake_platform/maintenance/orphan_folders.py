"""Whole table folders nobody knows: the warehouse-level orphan scan and its reclaim (invariant 6).

The per-table scan (``orphans``) looks inside registered locations only. A writer that dies
between writing a new incarnation's folder and its registry commit (a create killed after
staging) leaves ``<root>/<ns path>/<table>-<incarnation>.lance`` that no registration and no
trash record names, so no per-table scan ever sees it. This scan lists each namespace folder of
a warehouse (one non-recursive listing per folder; it never descends into a table folder nor
walks the whole bucket) and compares every table folder with what the registry names:

- the location or incarnation of a registered table in any warehouse (declared, version-0 ones
  included; roots may overlap);
- the location or incarnation of a table trash record (grace drops, due purges, cascades);
- an incarnation whose write lease is held and not expired (a create in flight).

A folder none of them names is *unknown*. Its age is the newest mtime of any file inside; younger
than the age gate it is only counted (it may be a create about to commit). The scan reports and
deletes nothing. ``reclaim_folders`` deletes an unknown folder older than the gate only after
taking that incarnation's write lease (a live creator keeps it, and once taken over a zombie
creator's commit is fenced out) and re-checking under it that registry and trash still do not
name it and that nothing inside became younger. The registry is read whole once, by the scan;
each re-check reads only what its change feed announces since (``inventory.StorageWatch``).
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass, field
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, Field

from lake_platform.catalog.context import Log
from lake_platform.catalog.policies import MIN_ORPHAN_AGE
from lake_platform.errors import InvalidInput, LeaseUnavailable
from lake_platform.maintenance.reclaim_result import ReclaimOutcome
from lake_platform.naming import WarehouseName, check_segment
from lake_platform.registry.records import Record

if TYPE_CHECKING:
    from lake_platform.catalog.catalog import Catalog
    from lake_platform.catalog.inventory import StorageWatch
    from lake_platform.catalog.principals import Principal

#: ``<table>-<incarnation>.lance``: the only folder name a table location ever gets.
TABLE_FOLDER = re.compile(r"^(?P<table>[a-z_][a-z0-9_]{0,62})-(?P<incarnation>[0-9A-Za-z]+)\.lance$")
#: Folders listed per report record at most (totals always cover all of them).
MAX_LISTED = 500
REPORT_KIND = "orphan-folders"


class OrphanFolder(BaseModel):
    path: str  # relative to the warehouse root: <ns path>/<table>-<incarnation>.lance
    location: str
    incarnation: str
    files: int
    bytes: int
    age_seconds: float


class FolderReport(Record):
    """One scan of one warehouse, committed as ``rpt/orphan-folders/<warehouse>/<at_ms>``."""

    kind: str = REPORT_KIND
    warehouse: str
    root: str
    at_ms: int
    min_age_seconds: float
    folders_listed: int = 0
    table_folders: int = 0
    folders_known: int = 0
    folders_young: int = 0
    #: Object-store prefixes that hold no object any more (some stores keep listing them): no data.
    folders_empty: int = 0
    orphan_count: int = 0
    orphan_bytes: int = 0
    orphans: list[OrphanFolder] = Field(default_factory=list)
    truncated: bool = False
    scan_seconds: float = 0.0

    @property
    def empty(self) -> bool:
        return self.orphan_count == 0


@dataclass
class _FolderScan:
    report: FolderReport
    #: What the registry named at the scan, brought up to date before each delete (a reclaim's).
    known: StorageWatch | None
    #: Every unknown folder older than the gate (not capped): location → its entry.
    candidates: dict[str, OrphanFolder] = field(default_factory=dict)


def _table_folders(root: str, storage: dict[str, str]) -> tuple[list[tuple[str, str, float | None]], int]:
    """(path relative to root, incarnation, folder mtime) of every table folder under a namespace
    folder, and how many folders were listed. Walks namespace folders only (valid segment names)."""
    from lake_platform.engine import lance_engine as engine

    found: list[tuple[str, str, float | None]] = []
    pending = [""]
    listed = 0
    while pending:
        rel = pending.pop()
        listed += 1
        for name, mtime in engine.list_folders(f"{root}/{rel}".rstrip("/"), storage):
            match = TABLE_FOLDER.match(name)
            if match and rel:  # tables live in namespaces, never at the warehouse root
                found.append((f"{rel}/{name}", match["incarnation"], mtime))
            elif _is_segment(name):
                pending.append(f"{rel}/{name}".lstrip("/"))
    return sorted(found), listed


def _is_segment(name: str) -> bool:
    try:
        check_segment(name, "namespace")
    except InvalidInput:
        return False
    return True


def _folder_mtime(root: str, rel: str, storage: dict[str, str]) -> tuple[bool, float | None]:
    """Whether the folder ``rel`` still exists, and its own mtime (listed from its parent)."""
    from lake_platform.engine import lance_engine as engine

    parent, name = rel.rsplit("/", 1)
    for seen, mtime in engine.list_folders(f"{root}/{parent}", storage):
        if seen == name:
            return True, mtime
    return False, None


def _contents(location: str, storage: dict[str, str]) -> tuple[int, int, float | None]:
    """(files, bytes, newest mtime) of everything under a folder."""
    from lake_platform.engine import lance_engine as engine

    files = size = 0
    newest: float | None = None
    for entry in engine.list_files(location, storage):
        files += 1
        size += entry.size
        if entry.mtime is not None:
            newest = max(newest or 0.0, entry.mtime.timestamp())
    return files, size, newest


def _warehouse(catalog: Catalog, warehouse: str, who: Principal, verb: str) -> tuple[WarehouseName, str]:
    if not isinstance(warehouse, str):
        raise InvalidInput(f"invalid warehouse name {warehouse!r}")
    wname = WarehouseName.parse(warehouse)
    who.require(wname.project, "admin", f"{verb} orphan table folders in {wname}")
    return wname, catalog.ctx.warehouse(wname).root.rstrip("/")


def _gate(catalog: Catalog, warehouse: str, min_age: timedelta | None) -> timedelta:
    if min_age is None:
        min_age = catalog.policies.effective_policy(warehouse).policy.orphan_min_age
    if not isinstance(min_age, timedelta) or min_age < MIN_ORPHAN_AGE:
        raise InvalidInput(f"orphan age gate must be at least {MIN_ORPHAN_AGE} (got {min_age})")
    return min_age


def _scan(
    catalog: Catalog,
    wname: WarehouseName,
    root: str,
    min_age: timedelta,
    now: float | None,
    *,
    watching: bool = False,
) -> _FolderScan:
    started = time.monotonic()
    now = catalog.clock.wall_ms() / 1000 if now is None else now
    # Read before storage is listed, so a table that commits in between can only be younger
    # than the gate (and is re-checked before any delete). Every warehouse's: roots may overlap
    # (nothing forbids two warehouses one root), so another warehouse's table is not ours to judge.
    watch = catalog.inventory.watch_storage() if watching else None
    known = watch.known if watch is not None else catalog.inventory.known_storage()
    storage = catalog.settings.storage_options(root)
    folders, listed = _table_folders(root, storage)
    gate = min_age.total_seconds()
    candidates: dict[str, OrphanFolder] = {}
    known_count = young = empty = 0
    for rel, incarnation, folder_mtime in folders:
        location = f"{root}/{rel}"
        if known.names(location, incarnation):
            known_count += 1
            continue
        files, size, newest = _contents(location, storage)
        if files == 0 and location.startswith("s3://"):
            empty += 1
            continue
        # An empty folder (a local create that failed early) is as old as the folder itself.
        newest = newest if newest is not None else folder_mtime
        age = now - newest if newest is not None else 0.0
        if age < gate or catalog.inventory.lease_held(incarnation):
            young += 1
            continue
        candidates[location] = OrphanFolder(
            path=rel,
            location=location,
            incarnation=incarnation,
            files=files,
            bytes=size,
            age_seconds=round(age, 1),
        )
    orphans = [candidates[k] for k in sorted(candidates)]
    report = FolderReport(
        warehouse=str(wname),
        root=root,
        at_ms=int(now * 1000),
        min_age_seconds=gate,
        folders_listed=listed,
        table_folders=len(folders),
        folders_known=known_count,
        folders_young=young,
        folders_empty=empty,
        orphan_count=len(orphans),
        orphan_bytes=sum(o.bytes for o in orphans),
        orphans=orphans[:MAX_LISTED],
        truncated=len(orphans) > MAX_LISTED,
        scan_seconds=round(time.monotonic() - started, 3),
    )
    return _FolderScan(report, watch, candidates)


def scan_folders(
    catalog: Catalog,
    warehouse: str,
    *,
    min_age: timedelta | None = None,
    now: float | None = None,
    principal: Principal | None = None,
) -> FolderReport:
    """Report the table folders of ``warehouse`` that neither registry nor trash names (deletes
    nothing). ``min_age`` defaults to the warehouse's effective ``orphan_min_age``, at least 1h."""
    who = catalog.ctx.who(principal)
    wname, root = _warehouse(catalog, warehouse, who, "scan for")
    return _scan(catalog, wname, root, _gate(catalog, str(wname), min_age), now).report


def commit_folder_report(
    catalog: Catalog, report: FolderReport, *, actor: str | None = None, run_id: str | None = None
) -> str:
    """Store the report plus a commit-log entry on the warehouse, in one transaction."""
    entry = Log(
        report.warehouse,
        "orphan-folder-scan",
        actor,
        run_id=run_id,
        at_ms=report.at_ms,
        marker=False,
        detail={
            "orphans": report.orphan_count,
            "orphan_bytes": report.orphan_bytes,
            "table_folders": report.table_folders,
            "folders_listed": report.folders_listed,
        },
    )
    return catalog.reports.commit_report(REPORT_KIND, report.warehouse, report.at_ms, report, entry)


@dataclass
class FolderReclaimResult(ReclaimOutcome):
    warehouse: str = field(kw_only=True)


def reclaim_folders(
    catalog: Catalog,
    warehouse: str,
    older_than: timedelta,
    *,
    actor: str | None = None,
    run_id: str | None = None,
    limit: int | None = None,
    principal: Principal | None = None,
) -> FolderReclaimResult:
    """Delete the unknown table folders of ``warehouse`` older than ``older_than`` (at least 1h),
    each re-verified under its incarnation's write lease; ends in one commit-log entry."""
    from lake_platform.engine import lance_engine as engine

    who = catalog.ctx.who(principal)
    wname, root = _warehouse(catalog, warehouse, who, "reclaim")
    if not isinstance(older_than, timedelta) or older_than < MIN_ORPHAN_AGE:
        raise InvalidInput(f"--older-than must be at least {MIN_ORPHAN_AGE} (got {older_than})")
    if limit is not None and (not isinstance(limit, int) or limit < 1):
        raise InvalidInput(f"invalid limit {limit!r}")
    gate = older_than.total_seconds()
    found = _scan(catalog, wname, root, older_than, None, watching=True)
    assert found.known is not None
    catalog.ctx.at("orphan-folder-reclaim:scanned")  # others may write, take leases, delete now
    storage = catalog.settings.storage_options(root)
    result = FolderReclaimResult(gate, warehouse=str(wname))
    for location in sorted(found.candidates)[:limit]:
        folder = found.candidates[location]
        try:
            with catalog.gate.hold(folder.incarnation) as lease:
                # What changed since the scan (the change feed), not the whole lake again.
                if found.known.current().names(location, folder.incarnation):
                    result.kept.append({"path": folder.path, "reason": "registered or in the trash now"})
                    continue
                files, size, newest = _contents(location, storage)
                exists, folder_mtime = _folder_mtime(root, folder.path, storage)
                if files == 0 and not exists:
                    result.kept.append({"path": folder.path, "reason": "already gone"})
                    continue
                newest = newest if newest is not None else folder_mtime
                if newest is None or catalog.clock.wall_ms() / 1000 - newest < gate:
                    result.kept.append({"path": folder.path, "reason": "changed since the scan"})
                    continue
                lease.check()
                engine.remove_table(location, storage)
                result.deleted.append(
                    {"path": folder.path, "incarnation": folder.incarnation, "files": files, "bytes": size}
                )
                result.bytes_deleted += size
        except LeaseUnavailable:
            result.kept.append({"path": folder.path, "reason": "being written (its write lease is held)"})
            continue
        catalog.gate.forget(folder.incarnation)  # the released lease record is a leftover now
    entry = Log(
        str(wname),
        "orphan-folder-reclaim",
        catalog.ctx.actor(actor, who),
        run_id=run_id,
        marker=False,
        files_removed=sum(d["files"] for d in result.deleted),
        bytes_removed=result.bytes_deleted,
        detail={
            "older_than_seconds": gate,
            "deleted": [d["path"] for d in result.deleted[:MAX_LISTED]],
            "truncated": len(result.deleted) > MAX_LISTED,
            "kept": result.kept[:50],
        },
    )
    result.commit_id = catalog.reports.record_event(entry)
    return result


def warehouses(catalog: Catalog) -> list[str]:
    """Every registered warehouse (``project.warehouse``), in key order."""
    return catalog.inventory.warehouses()


def latest_folder_report(catalog: Catalog, warehouse: str) -> FolderReport | None:
    return catalog.reports.latest_report(REPORT_KIND, str(WarehouseName.parse(warehouse)), FolderReport)


def as_metadata(report: FolderReport, listed: int = 50) -> dict[str, Any]:
    """A compact, JSON-friendly view for Dagster metadata."""
    return {
        "orphan_folders": report.orphan_count,
        "orphan_bytes": report.orphan_bytes,
        "table_folders": report.table_folders,
        "folders_known": report.folders_known,
        "folders_young": report.folders_young,
        "folders_empty": report.folders_empty,
        "folders_listed": report.folders_listed,
        "min_age_seconds": report.min_age_seconds,
        "scan_seconds": report.scan_seconds,
        "paths": [o.model_dump() for o in report.orphans[:listed]],
    }
