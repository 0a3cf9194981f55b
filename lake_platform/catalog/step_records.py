"""The commit-log entry and commit marker each version of a commit registers with it.

``BoundTableNamespace.create_table_version`` writes them in the registry transaction that
registers the version: the entry says what the step did, the marker where the whole commit
started and where it is now (found by commit id when an outcome is unknown or a commit resumes).
"""

from __future__ import annotations

from collections.abc import Mapping

from lake_platform.catalog.pending import PendingCommit
from lake_platform.engine.storage import read_object
from lake_platform.engine.transactions import staged_change
from lake_platform.registry import keys
from lake_platform.registry.records import CommitLogEntry, CommitMarker, TableRecord, decode
from lake_platform.registry.store import ABSENT, MetaStore


def held_step_entry(
    pending: PendingCommit, record: TableRecord, target: str, *, from_version: int, version: int, at: int
) -> CommitLogEntry:
    """The entry of a schema step the rest of the commit builds on (``PendingCommit.hold``):
    registered with the commit's next version, never alone."""
    operation = pending.hold[len(pending.held)]
    return _entry(pending, record, target, operation, from_version, version, at, totals=False)


def step_entry(
    pending: PendingCommit,
    record: TableRecord,
    target: str,
    *,
    from_version: int,
    version: int,
    at: int,
    step: int,
    first: bool,
) -> CommitLogEntry:
    """The entry of a registered step; the commit's totals go on its first step only."""
    operation = pending.operation if first else f"{pending.operation}#{step}"
    return _entry(pending, record, target, operation, from_version, version, at, totals=first)


def _entry(
    pending: PendingCommit,
    record: TableRecord,
    target: str,
    operation: str,
    from_version: int,
    version: int,
    at: int,
    *,
    totals: bool,
) -> CommitLogEntry:
    """A step's entry as ``operation``; with ``totals``, the commit's rows, bytes and files."""
    rows, nbytes = pending.stream_totals() if pending.stream_totals and totals else (0, 0)
    files = pending.files_added
    if pending.file_totals is not None:  # a create's, counted from its transaction
        files, nbytes = pending.file_totals if totals else (0, 0)
    return CommitLogEntry(
        commit_id=pending.commit_id,
        target=target,
        operation=operation,
        actor=pending.actor,
        run_id=pending.run_id,
        at_ms=at,
        incarnation=record.incarnation,
        from_version=from_version,
        to_version=version,
        rows_added=rows,
        bytes_added=nbytes,
        files_added=files if totals else 0,
        rows_removed=pending.rows_removed if totals else 0,
        detail=dict(pending.detail),
    )


def count_created_files(
    pending: PendingCommit, location: str, staging: str, storage_options: dict[str, str] | None
) -> bytes | None:
    """Before a create's version registers: count the files and file bytes its staged
    transaction adds (a new table's every file is added, none removed), so its entry lands
    with the figures ``EngineCommits.enrich`` would otherwise reopen the table and rewrite the
    entry for: two registry round trips and a table open per table created. Returns the staged
    manifest's bytes it read (for the namespace's own check), None when it read none. A
    manifest that cannot be read here is left uncounted: the check after it says why, and
    ``enrich`` completes the entry of what lands anyway."""
    if pending.operation != "create":
        return None
    try:
        raw = read_object(location, staging, storage_options)
    except OSError:
        return None
    try:
        change = staged_change(location, staging, storage_options, raw=raw)
    except (OSError, ValueError):
        return raw
    if change.operation is not None:  # None: Lance recorded no transaction to count from
        pending.file_totals = (change.files_added, change.bytes_added)
    return raw


def marker_branch(detail: Mapping[str, object]) -> str | None:
    """The branch a commit is made on, for its marker: what its log entry names
    (``detail.branch``, set by every branch writer and by a publish); None is main."""
    branch = detail.get("branch")
    return branch if isinstance(branch, str) else None


def step_marker(
    store: MetaStore,
    pending: PendingCommit,
    record: TableRecord,
    target: str,
    *,
    version: int,
    first: bool,
    log_key: str,
    at: int,
) -> CommitMarker:
    """The commit's marker moved to ``version``. It keeps the version the commit started from:
    a later step, or the continuation of an interrupted commit, reads it from the marker."""
    marker = CommitMarker(
        commit_id=pending.commit_id,
        target=target,
        operation=pending.operation,
        branch=marker_branch(pending.detail),
        incarnation=record.incarnation,
        from_version=(record.current_version if first else None),
        to_version=version,
        log_key=log_key,
        at_ms=at,
        attempt=pending.attempt,
        digest=pending.write_digest(),
    )
    if pending.marker_revision != ABSENT:
        item = store.get(keys.commit_marker(pending.commit_id))
        if item is not None:
            marker = marker.model_copy(update={"from_version": decode(CommitMarker, item.value).from_version})
    return marker
