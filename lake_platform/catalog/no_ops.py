"""A write that had nothing to commit (an append of no rows, a delete whose predicate selects
none) makes no version and no log entry, and answers the line's current version, from and to.

Under a caller's own commit id (an idempotency key, ``Provenance.commit_id``) that answer is
recorded as the id's marker, pointing at the version it answered (from and to), with no log
entry: a retry under the id is answered from it (``CatalogContext.replayed``, REST's
``keyed``), as a commit's is. Without it a retried delete ran its predicate again and removed
rows that arrived meanwhile, and the retry of either answered another version. The marker
carries the request's digest (``request_digest``), which a REST retry compares as it compares a
commit's log entry. Two calls sent at once under one id answer as two commits do
(``commit_ids``): the marker is written only if absent, and one found with another mark is this
call's answer when it is the same write (operation, options and line: a write with nothing to
commit has no rows to tell apart), else CommitIdReused."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

from lake_platform.catalog.commit_ids import answered, reused
from lake_platform.catalog.context import CatalogContext
from lake_platform.catalog.pending import PendingCommit
from lake_platform.catalog.results import CommitResult
from lake_platform.catalog.step_records import marker_branch
from lake_platform.errors import ConcurrentModification, ConditionFailed
from lake_platform.registry import keys
from lake_platform.registry.records import CommitLogEntry, CommitMarker
from lake_platform.registry.store import ABSENT, Put


def nothing_digest(pending: PendingCommit) -> str:
    """What a write with nothing to commit was: its operation and options as asked (no rows)."""
    return hashlib.sha256(pending.asked.encode()).hexdigest()[:40]


def nothing_committed(
    ctx: CatalogContext,
    pending: PendingCommit,
    table: str,
    incarnation: str,
    version: int,
    *,
    given: bool,
    markers: Sequence[CommitMarker] = (),
) -> CommitResult:
    """The answer of ``pending``, which had nothing to commit to ``table`` at ``version``
    (its line's current one). ``given``: its commit id is the caller's own, so the answer is
    recorded; ``markers`` (an ingest's per-file ones) land with it, in one registry write."""
    if not given and not markers:
        return CommitResult.nothing(pending.commit_id, table, pending.operation, version)
    request = pending.detail.get("request_digest")
    own = CommitMarker(
        commit_id=pending.commit_id,
        target=table,
        operation=pending.operation,
        incarnation=incarnation,
        from_version=version,
        to_version=version,
        branch=marker_branch(pending.detail),
        attempt=pending.attempt,
        digest=nothing_digest(pending),
        request_digest=request if isinstance(request, str) else None,
    )
    try:
        ctx.store.transact(
            [Put(keys.commit_marker(m.commit_id), m.encode(), ABSENT) for m in [own, *markers]]
        )
    except ConditionFailed:
        landed = ctx.commit_landed(pending.commit_id)
        if landed is None:
            raise ConcurrentModification(
                f"a marker of this {pending.operation} of {table} landed meanwhile with another "
                "commit; nothing was written"
            ) from None
        if landed.attempt is not None and (
            landed.digest != own.digest
            or landed.operation != own.operation
            or landed.branch != own.branch
            or landed.target != table
        ):  # another call's commit under this id, not this same write
            line = "main" if landed.branch is None else f"branch {landed.branch}"
            raise reused(pending.commit_id, f"{landed.operation} of {landed.target} on {line}") from None
        return answered(ctx, pending, table)
    return CommitResult.nothing(pending.commit_id, table, pending.operation, version)


def answer_of(marker: CommitMarker, table: str) -> CommitLogEntry | None:
    """What a keyed write with nothing to commit answered (``marker``, its id's, on ``table``),
    in the shape of the log entry a commit's retry is answered from: no rows, from and to the
    version it answered, and its request's digest. None for any other marker."""
    if marker.target != table or marker.log_key or marker.request_digest is None:
        return None
    return CommitLogEntry(
        commit_id=marker.commit_id,
        target=marker.target,
        operation=marker.operation,
        actor="",
        at_ms=marker.at_ms,
        incarnation=marker.incarnation,
        from_version=marker.from_version,
        to_version=marker.to_version,
        detail={"request_digest": marker.request_digest},
    )
