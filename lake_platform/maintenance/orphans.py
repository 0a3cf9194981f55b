"""Orphan scan (report only) and the explicit, age-gated, re-verified reclaim (invariant 6).

A file under a table's location is *live* when any of these references it:

- a live version: one the registry lists (``ver/<incarnation>/<N>``), through its manifest (the
  registry's manifest path, staging or canonical, and the canonical name) and everything that
  manifest names: data files, deletion files, index files, its transaction file;
- a tagged version (main or branch), through the same;
- any version of any branch (``_refs/branches/*.json`` → ``tree/<branch>/``), including main's
  files the branch shares; a branch's registered version whose writer stopped before publishing
  its manifest is finished first, as main's is (``Manifests.finish_versions``);
- a live data file, for its blob sidecars ``data/<stem>/*.blob`` (named in no manifest);
- Lance's own bookkeeping: ``_refs/**``, ``_versions/latest_version_hint.json``.

A Lance branch that no registry branch record (of any incarnation, in any state) names, and
that main's line is not read from, was left by a branch create killed between Lance's
``create_branch`` and the registry commit. The report lists it once it is older than the age gate
(``unknown_branches``); the reclaim deletes it whole through Lance (its ref and ``tree/<branch>/``;
Lance refuses while another branch builds on it), re-checked under the lease.

Everything else inside Lance's folders (``data/``, ``_versions/``, ``_transactions/``,
``_deletions/``, ``_indices/``, and the same under ``tree/<x>/``) that is older than the
policy's ``orphan_min_age`` is an orphan. Younger files are in-flight writes and are only
counted; files outside Lance's folders, and every file inside another registered or trashed table's
folder lying in this one (``folder_claims``), are counted as unknown and never reported.

The scan reads the registry first, then the manifests, then lists storage: a commit that lands
in between can only add files younger than the age gate. Reclaim repeats the scan while holding
the table's write lease (no catalog writer can commit meanwhile) and re-checks each file's
existence, size and age right before deleting it.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, Field

from lake_platform.catalog.context import Log
from lake_platform.catalog.folder_claims import folders_inside
from lake_platform.catalog.policies import MIN_ORPHAN_AGE
from lake_platform.errors import Internal, InvalidInput, LakeError
from lake_platform.maintenance.orphan_files import (
    Chunk,
    Live,
    canonical,
    classify_listing,
    in_folders,
    manifest_rel,
)
from lake_platform.maintenance.reclaim_result import ReclaimOutcome
from lake_platform.naming import TableName
from lake_platform.registry.records import Record

if TYPE_CHECKING:
    from lake_platform.catalog.catalog import Catalog

log = logging.getLogger(__name__)

#: At most this many orphans are listed in one report record (totals always cover all of them);
#: keeps a record far below DynamoDB's 400 KB item limit.
MAX_LISTED = 500
#: Reports kept per table; older ones are deleted when a new one lands.
KEEP_REPORTS = 20
REPORT_KIND = "orphans"


class OrphanFile(BaseModel):
    path: str
    bytes: int
    age_seconds: float


class OrphanReport(Record):
    """One scan of one table incarnation, committed as ``rpt/orphans/<table>/<at_ms>``."""

    kind: str = REPORT_KIND
    table: str
    incarnation: str
    location: str
    at_ms: int
    current_version: int
    min_age_seconds: float
    files_scanned: int = 0
    files_live: int = 0
    files_young: int = 0
    files_unknown: int = 0
    orphan_count: int = 0
    orphan_bytes: int = 0
    orphans: list[OrphanFile] = Field(default_factory=list)
    truncated: bool = False
    live_versions: int = 0
    tagged_versions: list[int] = Field(default_factory=list)
    branches: list[str] = Field(default_factory=list)
    #: Lance branches no registry record names, older than the gate (a killed create's leftovers).
    unknown_branches: list[str] = Field(default_factory=list)
    scan_seconds: float = 0.0

    @property
    def empty(self) -> bool:
        return self.orphan_count == 0


@dataclass
class _Scan:
    report: OrphanReport
    #: Every orphan (not capped): path → (bytes, mtime seconds).
    candidates: dict[str, tuple[int, float]] = field(default_factory=dict)


#: The chunk that lists the files directly at the table location (not in a folder).
ROOT_CHUNK = "."


def live_set(catalog: Catalog, name: str) -> Live:
    """Step 1 of a scan: the registry first, then the manifests, then the branches."""
    from lake_platform.engine import lance_engine as engine
    from lake_platform.engine import references as refs_mod

    started = time.monotonic()
    # A version still at its staging manifest (main's or a branch's) cannot be read without
    # writing, and Lance's listing of a branch sees none of what it names: finish it first.
    catalog.manifests.finish_versions(name)
    snap = catalog.reads.open_table(name)
    record = snap.record
    # The table's folder: main's line may live in a published branch's root under it.
    location = record.folder_uri
    storage = catalog.settings.storage_options(location)

    # 1. The registry: live versions and their manifests (staging paths included).
    versions = catalog.inventory.versions(record.incarnation)
    live = {v.version for v in versions}
    live_manifests = {rel for v in versions if (rel := manifest_rel(location, v.manifest_path))}
    live_manifests |= {canonical(v) for v in live}
    if record.location.rstrip("/") != location.rstrip("/"):
        # Main reads from a published branch's root: the table folder's newest manifest keeps
        # it a dataset, which the Lance branches hang from (version cleanup keeps it too).
        try:
            live_manifests.add(canonical(refs_mod.latest_version(location, storage)))
        except Exception:  # noqa: BLE001 - no manifest left there: nothing to keep
            log.warning("the table folder of %s holds no readable manifest", name)

    # 2. Tags pin versions (main or branch); branches keep all their versions.
    tag_map = refs_mod.tags(snap.dataset)
    tagged_main = {v for branch, v in tag_map.values() if branch in (None, "main")}
    live_main = live | tagged_main
    refs = refs_mod.tracked(snap.dataset, location, live_main, manifests=False)
    refs.files |= {canonical(v) for v in tagged_main}
    for version in sorted(live - refs.versions_seen):
        # Registered, but its manifest is only at its staging path: read it through the registry.
        try:
            snapshot = catalog.reads.open_table(name, version)
        except LakeError:
            if not catalog.inventory.version_registered(record.incarnation, version):
                continue  # cleaned up since step 1: its files are on their way out
            raise
        refs.update(refs_mod.snapshot_files(snapshot.dataset))

    named = catalog.inventory.named_lance_branches(TableName.parse(name), record)
    foreign = tuple(folders_inside(catalog.store, record))
    ref_files = {
        f.path.removeprefix("_refs/branches/").removesuffix(".json"): f
        for f in engine.list_files(location, storage, under="_refs/branches")
        if f.path.endswith(".json") and not in_folders(f.path, foreign)
    }
    branches = sorted(ref_files)
    unknown = {b: _newest(ref_files[b], location, b, storage) for b in branches if b not in named}
    for branch in branches:
        try:
            refs.update(refs_mod.branch_files(location, branch, storage))
        except Exception as exc:
            # A branch we cannot read might reference anything: report nothing rather than guess.
            raise Internal(
                f"cannot read branch {branch!r} of {name}: {str(exc).splitlines()[0][:300]}"
            ) from exc
    return Live(
        str(record.name),
        record.incarnation,
        location,
        record.current_version,
        len(live),
        sorted(tagged_main),
        branches,
        refs,
        live_manifests,
        started,
        unknown,
        foreign,
    )


def _newest(ref: Any, location: str, branch: str, storage: dict[str, str]) -> float:
    """The newest mtime (seconds) of a Lance branch's ref and of every file under its tree."""
    from lake_platform.engine import lance_engine as engine

    entries = [ref, *engine.list_files(location, storage, under=f"tree/{branch}")]
    return max((e.mtime.timestamp() for e in entries if e.mtime is not None), default=time.time())


def chunks(catalog: Catalog, live: Live) -> list[str]:
    """How to split the listing: one chunk per top-level folder of the table (``data``,
    ``_versions``, ``tree``, ...), plus the files at its root."""
    from lake_platform.engine import lance_engine as engine

    storage = catalog.settings.storage_options(live.location)
    return [ROOT_CHUNK, *sorted(n for n, _ in engine.list_folders(live.location, storage))]


def classify_chunk(catalog: Catalog, live: Live, chunk: str, min_age: timedelta, now: float) -> Chunk:
    """Step 2 (any process, any chunk): list one folder of the table and classify its files."""
    from lake_platform.engine import lance_engine as engine

    storage = catalog.settings.storage_options(live.location)
    if chunk == ROOT_CHUNK:
        listing = list(engine.list_files(live.location, storage, recursive=False))
    else:
        listing = list(engine.list_files(live.location, storage, under=chunk))
    return classify_listing(listing, live, min_age, now)


def merge(live: Live, parts: list[Chunk], min_age: timedelta, now: float) -> _Scan:
    """Step 3: one report from every chunk."""
    candidates: dict[str, tuple[int, float]] = {}
    counts = {"live": 0, "young": 0, "unknown": 0}
    files = 0
    for part in parts:
        files += part.files
        candidates.update(part.candidates)
        for kind, n in part.counts.items():
            counts[kind] += n
    orphans = sorted(candidates.items())
    report = OrphanReport(
        table=live.table,
        incarnation=live.incarnation,
        location=live.location,
        at_ms=int(now * 1000),
        current_version=live.current_version,
        min_age_seconds=min_age.total_seconds(),
        live_versions=live.live_versions,
        tagged_versions=live.tagged_versions,
        branches=live.branches,
        unknown_branches=sorted(
            b for b, m in live.unknown_branches.items() if now - m >= min_age.total_seconds()
        ),
        files_scanned=files,
        files_live=counts["live"],
        files_young=counts["young"],
        files_unknown=counts["unknown"],
        orphan_count=len(orphans),
        orphan_bytes=sum(size for size, _ in candidates.values()),
        orphans=[
            OrphanFile(path=p, bytes=s, age_seconds=round(now - m, 1)) for p, (s, m) in orphans[:MAX_LISTED]
        ],
        truncated=len(orphans) > MAX_LISTED,
        scan_seconds=round(time.monotonic() - live.started, 3) if live.started else 0.0,
    )
    return _Scan(report, candidates)


def _scan(catalog: Catalog, name: str, min_age: timedelta, now: float | None = None) -> _Scan:
    """The whole scan in this process: the live set, then the listing (read last, so a commit
    that lands meanwhile can only add files younger than the age gate), then the report."""
    from lake_platform.engine import lance_engine as engine

    live = live_set(catalog, name)
    listing = list(engine.list_files(live.location, catalog.settings.storage_options(live.location)))
    now = time.time() if now is None else now
    return merge(live, [classify_listing(listing, live, min_age, now)], min_age, now)


def age_gate(catalog: Catalog, name: str, min_age: timedelta | None = None) -> timedelta:
    """The age gate a scan of ``name`` uses: ``min_age``, else the policy's; at least 1h."""
    if min_age is None:
        min_age = catalog.policies.effective_policy(name).policy.orphan_min_age
    if min_age < MIN_ORPHAN_AGE:
        raise InvalidInput(f"orphan age gate must be at least {MIN_ORPHAN_AGE}")
    return min_age


def scan(
    catalog: Catalog, name: str, *, min_age: timedelta | None = None, now: float | None = None
) -> OrphanReport:
    """Find orphans under one table's location (reports only; deletes nothing).

    ``min_age`` defaults to the table's effective policy ``orphan_min_age`` and never goes below 1h.
    """
    return _scan(catalog, name, age_gate(catalog, name, min_age), now).report


def commit_report(
    catalog: Catalog, report: OrphanReport, *, actor: str | None = None, run_id: str | None = None
) -> str:
    """Store the report as a versioned record plus a commit-log entry, in one transaction;
    prune reports beyond the newest ``KEEP_REPORTS``. Returns the report key."""
    entry = Log(
        report.table,
        "orphan-scan",
        actor,
        run_id=run_id,
        at_ms=report.at_ms,
        incarnation=report.incarnation,
        from_version=report.current_version,
        to_version=report.current_version,
        marker=False,
        detail={
            "orphans": report.orphan_count,
            "orphan_bytes": report.orphan_bytes,
            "files_scanned": report.files_scanned,
        },
    )
    return catalog.reports.commit_report(
        REPORT_KIND, report.table, report.at_ms, report, entry, keep=KEEP_REPORTS
    )


def latest_report(catalog: Catalog, name: str) -> OrphanReport | None:
    return catalog.reports.latest_report(REPORT_KIND, name, OrphanReport)


@dataclass
class ReclaimResult(ReclaimOutcome):
    table: str = field(kw_only=True)


def reclaim(
    catalog: Catalog,
    name: str,
    older_than: timedelta,
    *,
    actor: str | None = None,
    run_id: str | None = None,
    limit: int | None = None,
) -> ReclaimResult:
    """Delete orphans older than ``older_than`` (at least 1h), re-verified one by one.

    Holds the table's write lease throughout, so no catalog commit can add a reference
    meanwhile; scans afresh under it; right before each delete re-checks that the table is
    still the same incarnation and the file still exists with the size and age the scan saw.
    Ends in one commit-log entry listing what was deleted.
    """
    from lake_platform.engine import references as refs_mod

    if not isinstance(older_than, timedelta) or older_than < MIN_ORPHAN_AGE:
        raise InvalidInput(f"--older-than must be at least {MIN_ORPHAN_AGE} (got {older_than})")
    tname = TableName.parse(name)
    catalog.manifests.finish_versions(str(tname))
    record = catalog.reads.open_table(str(tname)).record
    result = ReclaimResult(older_than.total_seconds(), table=str(tname))
    with catalog.gate.hold(record.incarnation) as lease:
        found = _scan(catalog, str(tname), older_than)
        catalog.ctx.at("orphan-reclaim:scanned")  # the lease stops commits, not other writers
        location = found.report.location
        storage = catalog.settings.storage_options(location)
        for rel, (size, mtime) in sorted(found.candidates.items())[:limit]:
            lease.check()
            if catalog.inventory.incarnation(tname) != record.incarnation:
                result.kept.append({"path": rel, "reason": "table was dropped or replaced"})
                break
            now = time.time()
            seen = refs_mod.stat(location, rel, storage)
            if seen is None:
                result.kept.append({"path": rel, "reason": "already gone"})
                continue
            if seen[0] != size or abs(seen[1] - mtime) > 1e-3 or now - seen[1] < older_than.total_seconds():
                result.kept.append({"path": rel, "reason": "changed since the scan"})
                continue
            if refs_mod.delete(location, rel, storage):
                result.deleted.append({"path": rel, "bytes": size, "age_seconds": round(now - mtime, 1)})
                result.bytes_deleted += size
        if catalog.inventory.incarnation(tname) == record.incarnation:
            _reclaim_branches(catalog, tname, found.report, older_than, result)
        entry = Log(
            str(tname),
            "orphan-reclaim",
            actor,
            run_id=run_id,
            incarnation=record.incarnation,
            from_version=found.report.current_version,
            to_version=found.report.current_version,
            files_removed=sum(int(d.get("files", 1)) for d in result.deleted),
            bytes_removed=result.bytes_deleted,
            marker=False,
            detail={
                "older_than_seconds": older_than.total_seconds(),
                "deleted": [d["path"] for d in result.deleted[:MAX_LISTED]],
                "truncated": len(result.deleted) > MAX_LISTED,
                "kept": result.kept[:50],
            },
        )
        result.commit_id = catalog.reports.record_event(entry, lease=lease)
    return result


def _reclaim_branches(
    catalog: Catalog, tname: TableName, report: OrphanReport, older_than: timedelta, result: ReclaimResult
) -> None:
    """Under the table's lease: delete, through Lance, each Lance branch the scan found that no
    registry record names, re-checked right before (still unnamed, nothing in it younger)."""
    from lake_platform.engine import branches as engine_branches
    from lake_platform.engine import lance_engine as engine

    if not report.unknown_branches:
        return
    location = report.location
    storage = catalog.settings.storage_options(location)
    record = catalog.reads.open_table(str(tname)).record
    named = catalog.inventory.named_lance_branches(tname, record)
    foreign = tuple(folders_inside(catalog.store, record))
    listed = engine.list_files(location, storage, under="_refs/branches")
    refs = {f.path: f for f in listed if not in_folders(f.path, foreign)}
    for branch in report.unknown_branches:
        ref = refs.get(f"_refs/branches/{branch}.json")
        if branch in named or ref is None:
            result.kept.append({"path": f"tree/{branch}", "reason": "registered or gone since the scan"})
            continue
        files = list(engine.list_files(location, storage, under=f"tree/{branch}"))
        if time.time() - _newest(ref, location, branch, storage) < older_than.total_seconds():
            result.kept.append({"path": f"tree/{branch}", "reason": "changed since the scan"})
            continue
        if not engine_branches.delete_branch(location, branch, storage):
            result.kept.append({"path": f"tree/{branch}", "reason": "another branch builds on it"})
            continue
        size = ref.size + sum(f.size for f in files)
        result.deleted.append(
            {"path": f"tree/{branch}", "branch": branch, "bytes": size, "files": len(files) + 1}
        )
        result.bytes_deleted += size


def as_metadata(report: OrphanReport, listed: int = 50) -> dict[str, Any]:
    """A compact, JSON-friendly view for Dagster metadata."""
    return {
        "orphans": report.orphan_count,
        "orphan_bytes": report.orphan_bytes,
        "files_scanned": report.files_scanned,
        "files_live": report.files_live,
        "files_young": report.files_young,
        "files_unknown": report.files_unknown,
        "live_versions": report.live_versions,
        "tagged_versions": report.tagged_versions,
        "branches": report.branches,
        "unknown_branches": report.unknown_branches,
        "min_age_seconds": report.min_age_seconds,
        "scan_seconds": report.scan_seconds,
        "paths": [o.model_dump() for o in report.orphans[:listed]],
    }
