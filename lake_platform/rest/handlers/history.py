"""A table's history over REST: RestoreTable commits a new version equal to an older one
(``catalog/restore.py``: one registry commit under the lease, logged ``restore``; an
``Idempotency-Key`` makes a retry answer the first restore);
BatchDeleteTableVersions removes versions as a governed delete (``Versions.delete_versions``:
never the current, a tagged or a possibly pinned version; admin; an ``Idempotency-Key`` makes a
retry answer the first removal's count). With ``branch`` both work on
the branch's own line (``catalog/branch_history.py``), main never moving. DescribeTransaction
reads a commit's log entry by its commit id (every commit is atomic, so a transaction found is
``Succeeded``)."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import lake_platform.rest.handlers.branches as branches
from lake_platform.catalog.provenance import Provenance
from lake_platform.errors import InvalidInput, TransactionNotFound, Unsupported
from lake_platform.naming import TableName
from lake_platform.registry.records import CommitLogEntry
from lake_platform.rest.handlers.common import scoped
from lake_platform.rest.idempotency import confirm, keyed, keyed_body
from lake_platform.rest.request import RestRequest


def restore_table(request: RestRequest) -> Any:
    scoped(request, table=True)
    tname = request.table_name()
    branch = branches.branch_of(request)
    version = request.body.get("version")
    if not isinstance(version, int) or isinstance(version, bool) or version < 1:
        raise InvalidInput(f"version must be a positive integer, got {version!r}")
    catalog = request.service.catalog
    payload = json.dumps([branch, version]).encode()
    request_key = keyed(request, tname, "restore", payload, {"restore"})
    if request_key.first is not None:  # the key's restore landed: its answer, nothing committed
        return {"transaction_id": request_key.first.commit_id}
    by, detail = request_key.by, request_key.detail
    if branch is not None:
        result = catalog.branch_history.restore(str(tname), branch, version, detail=detail, by=by)
    else:
        result = catalog.restores.restore_table(str(tname), version, detail=detail, by=by)
    confirm(request, tname, request_key, result.commit_id)
    return {"transaction_id": result.commit_id}


def _range(entry: Any) -> tuple[int, int | None]:
    """(first, end) of a spec VersionRange: start inclusive (0: the first), end exclusive
    (-1: through the latest, None here)."""
    if not isinstance(entry, dict):
        raise InvalidInput("each range is {start_version, end_version}")
    start, end = entry.get("start_version"), entry.get("end_version")
    for value in (start, end):
        if not isinstance(value, int) or isinstance(value, bool):
            raise InvalidInput("start_version and end_version are integers")
    if start < 0 or end < -1 or (end != -1 and end <= start):
        raise InvalidInput(f"invalid version range {start}..{end}: start >= 0, end > start or -1")
    return start, None if end == -1 else end


def batch_delete_versions(request: RestRequest) -> Any:
    scoped(request, table=True)
    tname = request.table_name()
    branch = branches.branch_of(request)
    ranges = request.body.get("ranges")
    if not isinstance(ranges, list) or not ranges:
        raise InvalidInput("ranges must be a non-empty list of version ranges")
    bounds = [_range(r) for r in ranges]
    by = Provenance(principal=request.principal)
    catalog = request.service.catalog
    # The request is its ranges (and branch), not the versions they match now: a retry after
    # the first removal landed matches fewer, and answers the first removal's count.
    request_key = keyed_body(request, tname, "delete-versions", {"delete-versions"}, branch)
    if request_key.first is not None:
        first = request_key.first
        return {"deleted_count": len(_removed(first.detail)), "transaction_id": first.commit_id}
    if branch is None:
        _, registered = catalog.reads.readable_versions(str(tname), by=by)
    else:
        _, registered = catalog.branches.readable_versions(str(tname), branch, by=by)
    wanted = [v for v in registered if any(v >= lo and (hi is None or v < hi) for lo, hi in bounds)]
    keyed_by, detail = request_key.by, request_key.detail
    if branch is None:
        result = catalog.versions.delete_versions(str(tname), wanted, detail=detail, by=keyed_by)
    else:
        result = catalog.branch_history.delete_versions(
            str(tname), branch, wanted, detail=detail, by=keyed_by
        )
    removed = _removed(result.detail)
    return {
        "deleted_count": len(removed) if result.status == "committed" else 0,
        "transaction_id": result.commit_id,
    }


def _removed(detail: dict[str, object]) -> list[object]:
    removed = detail.get("versions_removed")
    return removed if isinstance(removed, list) else []


def _commit_entry(request: RestRequest) -> CommitLogEntry:
    """The commit a transaction id names: the table's id and then the commit id (as the
    reference server takes it). TransactionNotFound when the table has no such commit."""
    *table, commit_id = request.ids
    if len(table) < 4:
        raise InvalidInput("a transaction id is the table's id followed by the commit id")
    scoped(dataclasses.replace(request, id=table), table=True)  # the table, not its commit id
    tname = TableName.from_parts(table)
    entry = request.service.catalog.reads.commit(
        str(tname), commit_id, by=Provenance(principal=request.principal)
    )
    if entry is None:
        raise TransactionNotFound(f"no commit {commit_id} on {tname}")
    return entry


def alter_transaction(request: RestRequest) -> Any:
    """Every commit here is one registry transaction, committed when it answers: there is no
    open transaction to alter. An id naming no commit is TransactionNotFound, as
    DescribeTransaction answers it; a committed one cannot change (Unsupported)."""
    entry = _commit_entry(request)
    raise Unsupported(
        f"commit {entry.commit_id} on {entry.target} is committed; a committed transaction cannot be altered"
    )


def describe_transaction(request: RestRequest) -> Any:
    """The id is the table's id and then the commit id (as the reference server takes it)."""
    entry = _commit_entry(request)
    properties = {
        "commit_id": entry.commit_id,
        "table": entry.target,
        "operation": entry.operation,
        "actor": entry.actor,
        "committed_at_ms": entry.at_ms,
        "from_version": entry.from_version,
        "version": entry.to_version,
        "rows_added": entry.rows_added,
        "rows_removed": entry.rows_removed,
    }
    return {
        "status": "Succeeded",
        "properties": {k: str(v) for k, v in properties.items() if v is not None},
    }


HANDLERS = {
    "RestoreTable": restore_table,
    "BatchDeleteTableVersions": batch_delete_versions,
    "DescribeTransaction": describe_transaction,
    "AlterTransaction": alter_transaction,
}
