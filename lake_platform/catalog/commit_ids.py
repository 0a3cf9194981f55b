"""A caller's own commit id passed by two callers at once (invariant 5's race).

Both look for the id's marker before either lands, so neither is answered from it there; the
one that commits second finds the id landed: its marker is written only if absent. That commit
is this call's only if the marker bears its own mark (``PendingCommit.attempt``); another
caller's is answered as this call's result only when it is this same write (the marker's
``digest``: operation and options). Any other write, or one that carries rows without the
caller's digest of its request (rows are never hashed: that would cost every such write a pass
over its bytes), is CommitIdReused: nothing of this call was committed, and being told it landed
would lose it; a later retry finds the id landed and is answered from it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from lake_platform.catalog.pending import DATA_OPERATIONS
from lake_platform.catalog.step_records import marker_branch
from lake_platform.errors import CommitIdReused
from lake_platform.registry.store import ABSENT

if TYPE_CHECKING:
    from lake_platform.catalog.context import CatalogContext
    from lake_platform.catalog.pending import PendingCommit
    from lake_platform.catalog.results import CommitResult
    from lake_platform.registry.records import CommitMarker


def reused(commit_id: str, named: str) -> CommitIdReused:
    return CommitIdReused(
        f"commit id {commit_id} landed meanwhile as {named}, another write sent with it at the same "
        "time (other rows or options); nothing of this one was committed: use a new commit id "
        "(a write's idempotency key) for a new write"
    )


def landed_by_another(pending: PendingCommit, marker: CommitMarker) -> bool:
    """Whether ``marker``, found for ``pending``'s id, is another call's commit: one that
    started no marker of its own (a commit resumed from its marker continues it) and finds
    one with another mark. Markers written without a mark answer as before (this call's)."""
    return (
        not pending.landed
        and pending.marker_revision == ABSENT
        and marker.attempt is not None
        and marker.attempt != pending.attempt
    )


def require_same_write(pending: PendingCommit, marker: CommitMarker) -> None:
    """``marker`` (another call's, same id) is this same write, else CommitIdReused."""
    digest = pending.write_digest()
    if (
        digest is None
        or marker.digest != digest
        or marker.operation != pending.operation
        or marker.branch != marker_branch(pending.detail)
    ):
        line = "main" if marker.branch is None else f"branch {marker.branch}"
        raise reused(pending.commit_id, f"{marker.operation} of {marker.target} on {line}")


def landed_meanwhile(ctx: CatalogContext, pending: PendingCommit, table: str) -> CommitResult | None:
    """Under the lease, for a caller's own commit id: the commit that landed under it while
    this call waited (sent twice at once), when it is this same write; another write is
    CommitIdReused. None: nothing landed, or this write's rows are not read yet (its commit
    then finds the marker, and ``EngineCommits.resolve_failure`` decides)."""
    if pending.operation in DATA_OPERATIONS:
        return None
    replay = _replayed(ctx, pending, table)
    if replay is not None:
        marker = ctx.commit_landed(pending.commit_id)
        if marker is not None and landed_by_another(pending, marker):
            require_same_write(pending, marker)
    return replay


def answered(ctx: CatalogContext, pending: PendingCommit, table: str) -> CommitResult:
    """The result of the commit another call landed as this same write (``pending.replayed``)."""
    replay = _replayed(ctx, pending, table)
    assert replay is not None  # its marker was read before: markers are never removed
    return replay


def _replayed(ctx: CatalogContext, pending: PendingCommit, table: str) -> CommitResult | None:
    """The commit landed under ``pending``'s id, as the catalog's replay answers it (None:
    nothing landed); one of another operation, table or line is CommitIdReused."""
    return ctx.replayed(
        pending.commit_id,
        table=table,
        operation=pending.operation,
        branch=marker_branch(pending.detail),
        refuse=lambda named: reused(pending.commit_id, named),
    )
