"""What a commit id that already landed answers (``CatalogContext.replayed``): the earlier
result, read from its commit marker and log entry, or a refusal when the id names another commit.

``replayed_all`` answers several ids at once (a multi-table commit's, one per table): their
markers, then their log entries, in as few registry requests as ``get_many`` allows, where one
id at a time costs two round trips each (a 100-table transaction replayed: 200 on DynamoDB).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from lake_platform.catalog.results import CommitResult
from lake_platform.errors import InvalidInput, LakeError
from lake_platform.registry import keys
from lake_platform.registry.records import CommitLogEntry, CommitMarker, decode
from lake_platform.registry.store import MetaStore, get_all


@dataclass(frozen=True)
class Wanted:
    """One commit id to answer, and the commit it must name to be answered from: ``operation``
    of ``table`` on ``branch`` (None: main; ``operation`` None: any). ``refuse``: the error for
    an id that landed as another commit (given what it names; None: InvalidInput)."""

    commit_id: str
    table: str
    operation: str | None
    branch: str | None = None
    refuse: Callable[[str], LakeError] | None = None


def replayed_all(store: MetaStore, wanted: Sequence[Wanted]) -> list[CommitResult | None]:
    """Each id's earlier result, or None when it never landed; the first (in order) that landed
    as another commit is refused. The ids must be distinct."""
    found = get_all(store, [keys.commit_marker(w.commit_id) for w in wanted])
    markers = [decode(CommitMarker, i.value, i.key) if i is not None else None for i in found]
    log_keys = list(dict.fromkeys(m.log_key for m in markers if m is not None and m.log_key))
    entries = dict(zip(log_keys, get_all(store, log_keys), strict=True))
    out: list[CommitResult | None] = []
    for w, marker in zip(wanted, markers, strict=True):
        if marker is None:
            out.append(None)
            continue
        entry_item = entries.get(marker.log_key) if marker.log_key else None
        entry = decode(CommitLogEntry, entry_item.value, entry_item.key) if entry_item is not None else None
        out.append(answer(w, marker, entry))
    return out


def answer(w: Wanted, marker: CommitMarker, entry: CommitLogEntry | None) -> CommitResult:
    """The result ``marker`` (found for ``w``'s id) and its log ``entry`` (None: not found)
    answer, or ``w``'s refusal when it landed as another commit."""
    landed_on = branch_of(marker, entry)
    if (
        marker.target != w.table
        or landed_on != w.branch
        or (w.operation is not None and marker.operation != w.operation)
    ):
        # Answering it would tell the caller a write landed that never did.
        line = "main" if landed_on is None else f"branch {landed_on}"
        named = f"{marker.operation} of {marker.target} on {line}"
        if w.refuse is not None:
            raise w.refuse(named)
        raise InvalidInput(f"commit id {w.commit_id} already names {named}; nothing was written")
    # What landed the first time, as its log entry says (a retry is not told 0 rows).
    return CommitResult(
        w.commit_id,
        marker.target,
        marker.operation,
        marker.from_version,
        marker.to_version,
        rows_added=entry.rows_added if entry is not None else 0,
        bytes_added=entry.bytes_added if entry is not None else 0,
        replayed=True,
    )


def branch_of(marker: CommitMarker, entry: CommitLogEntry | None) -> str | None:
    """The line ``marker``'s commit landed on; ``entry``: its log entry."""
    if marker.record_version >= 2 or not marker.log_key:
        return marker.branch
    # Written before markers named their branch: a branch's commit says so in its log entry.
    branch = entry.detail.get("branch") if entry is not None else None
    return branch if isinstance(branch, str) else None


__all__ = ["Wanted", "answer", "branch_of", "replayed_all"]
