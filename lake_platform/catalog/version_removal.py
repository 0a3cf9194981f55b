"""What removing registered versions of a line does the same way on main (``Versions.cleanup``
and ``delete_versions``) and on a branch (``BranchHistory.delete_versions``): which versions a
reader may still have pinned, the removal's commit-log entry, and the version records taken out
of the registry under the line's lease, each still untagged.

Out of ``versions.py`` because these functions have one job and two callers: the service that
removes a branch's versions uses them without needing main's compaction and cleanup.
"""

from __future__ import annotations

import logging
from datetime import timedelta
from itertools import pairwise
from typing import Any

from lake_platform.catalog.context import BATCH, CatalogContext, Log
from lake_platform.catalog.folder_claims import in_lance_folders
from lake_platform.catalog.lease import Lease
from lake_platform.catalog.principals import Principal
from lake_platform.catalog.provenance import Provenance
from lake_platform.catalog.results import MaintenanceResult
from lake_platform.errors import ConcurrentModification
from lake_platform.naming import TableName
from lake_platform.registry import keys
from lake_platform.registry.records import CommitLogEntry, TableRecord, VersionRecord, decode
from lake_platform.registry.store import Delete, MetaStore, Op

log = logging.getLogger(__name__)


def young_versions(ctx: CatalogContext, versions: list[VersionRecord], retention: timedelta) -> set[int]:
    """The versions superseded less than ``retention`` (at least the ticket lifetime) plus the
    readers' staleness ago; the head never is superseded. A version can be pinned by a ticket for
    as long as it is current, and a reader's cached snapshot may still treat it as current a
    little after that: its age counts from when it was superseded (its successor's commit), not
    from its own commit."""
    window = max(retention, timedelta(seconds=ctx.settings.ticket_lifetime_seconds)) + timedelta(
        seconds=ctx.settings.reader_max_stale_seconds
    )
    cut_ms = ctx.clock.wall_ms() - int(window.total_seconds() * 1000)
    ordered = sorted(versions, key=lambda v: v.version)
    superseded_at = {older.version: newer.committed_at_ms for older, newer in pairwise(ordered)}
    return {v.version for v in ordered if superseded_at.get(v.version, cut_ms) >= cut_ms}


def removal_entry(
    ctx: CatalogContext,
    tname: TableName,
    operation: str,
    by: Provenance,
    who: Principal,
    commit_id: str,
    line: TableRecord,
    detail: dict[str, object],
) -> Log:
    """The commit-log entry (with its marker) of removing versions of ``line``, main's record or a
    branch's: the head does not move, so it goes from the head to the head."""
    return Log(
        str(tname),
        operation,
        ctx.actor(by.actor, who),
        commit_id=commit_id,
        run_id=by.run_id,
        incarnation=line.incarnation,
        from_version=line.current_version,
        to_version=line.current_version,
        detail=detail,
    )


def removed_before(
    ctx: CatalogContext, tname: TableName, by: Provenance, branch: str | None = None
) -> MaintenanceResult | None:
    """The removal ``by.commit_id`` made already on ``branch`` (None: main) of ``tname``, as its
    log entry says (the versions it removed), when a caller named that id and it landed: a
    keyed retry, or the same request that waited for the lease, which would otherwise find
    nothing left to remove and answer none. An id that landed as another commit is
    InvalidInput, nothing removed. Looked at under the line's lease."""
    if by.commit_id is None:
        return None
    first = ctx.replayed(by.commit_id, table=str(tname), operation="delete-versions", branch=branch)
    marker = ctx.commit_landed(by.commit_id) if first is not None else None
    item = ctx.store.get(marker.log_key) if marker is not None and marker.log_key else None
    if first is None or item is None:
        return None
    entry = decode(CommitLogEntry, item.value, item.key)
    return MaintenanceResult(
        str(tname), "delete-versions", "committed", entry.to_version or 0, by.commit_id, dict(entry.detail)
    )


def unregister(
    ctx: CatalogContext, incarnation: str, doomed: list[VersionRecord], lease: Lease, entry: Log, when: str
) -> None:
    """``doomed``'s version records out of the registry, in batches conditional on ``lease`` and
    on each record as it is now, still untagged (a tag lands only under the lease: this is the
    second line); ``entry`` is logged with the first batch. ``when`` ends the refusals' text."""
    for start in range(0, len(doomed), BATCH):
        ops: list[Op] = [
            Delete(keys.version(incarnation, v.version), _untagged_revision(ctx.store, incarnation, v, when))
            for v in doomed[start : start + BATCH]
        ]
        with lease.fenced() as fence:
            ctx.commit([*ops, fence], log=entry if start == 0 else None)


def _untagged_revision(store: MetaStore, incarnation: str, v: VersionRecord, when: str) -> int:
    item = store.get(keys.version(incarnation, v.version))
    if item is None:
        raise ConcurrentModification(f"version {v.version} vanished {when}")
    if decode(VersionRecord, item.value, item.key).tags:
        raise ConcurrentModification(f"version {v.version} was tagged {when}; nothing was removed")
    return item.revision


def lance_cleanup(
    ctx: CatalogContext, record: TableRecord, dataset: Any, versions: list[int]
) -> dict[str, int]:
    """Lance's cleanup of exactly ``versions`` of ``dataset`` (main's current root of ``record``),
    already out of the registry. Skipped, counted as ``lance_cleanup_skipped``, while another
    table's folder lies inside one of this table's Lance folders (``folder_claims``: a namespace
    ``data`` under a folder an older release adopted): Lance's cleanup also takes the files
    there its manifests do not name, the other table's data. The removed versions' files are
    then left to the orphan reclaim, which never touches another table's folder."""
    from lake_platform.engine import lance_engine as engine  # Lance: only a cleanup loads it

    others = in_lance_folders(ctx.store, record)
    if others:
        log.warning(
            "cleanup of %s leaves its files to the orphan reclaim: %s lie inside", record.name, others
        )
        return {"old_versions": 0, "bytes_removed": 0, "data_files_removed": 0, "lance_cleanup_skipped": 1}
    return engine.cleanup_versions(dataset, versions)
