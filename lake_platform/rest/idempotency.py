"""The ``Idempotency-Key`` header of a committing request (``catalog/idempotency.py``): the key
itself, and :func:`commit_once`, which runs a data write (CreateTable, InsertIntoTable,
DeleteFromTable) under the commit id the key stands for, so a retry answers the first outcome
and the key reused for another request is refused (422)."""

from __future__ import annotations

import hashlib
from collections.abc import Callable

from lake_platform.catalog.idempotency import HEADER, commit_id_for, key_in, reused
from lake_platform.catalog.provenance import Provenance
from lake_platform.catalog.results import CommitResult
from lake_platform.naming import TableName
from lake_platform.rest.request import RestRequest

#: What a write puts in its log entry's detail (and the retry compares): Callable's argument.
Commit = Callable[[Provenance, dict[str, object]], CommitResult]


def idempotency_key(request: RestRequest) -> str | None:
    """The request's ``Idempotency-Key`` (None without one); InvalidInput when malformed."""
    return key_in(request.headers, HEADER)


def commit_once(
    request: RestRequest, tname: TableName, kind: str, payload: bytes, commit: Commit, operations: set[str]
) -> CommitResult:
    """``commit`` under the request's idempotency key, if it sent one. ``kind`` names the
    request (``create``, ``insert``, ``delete``), ``payload`` is what makes it this request (the
    body, the mode, the predicate) and ``operations`` the log operations its commit may have.
    A retry whose first attempt landed answers that commit (rows from its log entry) and writes
    nothing; the key used for another table, kind or payload is IdempotencyKeyReused (422)."""
    key = idempotency_key(request)
    if key is None:
        return commit(Provenance(principal=request.principal), {})
    catalog = request.service.catalog
    commit_id = commit_id_for(request.principal, key, kind)
    digest = hashlib.sha256(b"\0".join((kind.encode(), str(tname).encode(), payload))).hexdigest()[:32]
    marker = catalog.ctx.commit_landed(commit_id)
    if marker is None:
        by = Provenance(principal=request.principal, commit_id=commit_id)
        return commit(by, {"idempotency_key": key, "request_digest": digest})
    entry = catalog.reads.commit(str(tname), commit_id, by=Provenance(principal=request.principal))
    first = f"{marker.operation} of {marker.target}"
    if entry is None or marker.operation not in operations:
        raise reused(key, first, f"{kind} of {tname}")
    if entry.detail.get("request_digest", digest) != digest:
        raise reused(key, f"{first} with other rows or options", f"{kind} of {tname}")
    return CommitResult(
        commit_id,
        entry.target,
        entry.operation,
        entry.from_version,
        entry.to_version,
        rows_added=entry.rows_added,
        bytes_added=entry.bytes_added,
        replayed=True,
    )
