"""The ``Idempotency-Key`` header of a committing request (``catalog/idempotency.py``): the key
itself; :func:`keyed`, what a committing handler runs its commit under (the commit id the key
stands for, the key and the request's digest for the log entry) or, when the key's commit
already landed as this same request, that commit's log entry to answer from; and
:func:`commit_once`, which does both for a write answered by a :class:`CommitResult`
(CreateTable, InsertIntoTable, DeleteFromTable); :func:`once`, which does both for a change
without a lease to look for the key under (a container's create or drop, RegisterTable). A
retry answers the first outcome and commits nothing; the key reused for another request is
refused (422)."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TypeVar

from lake_platform.catalog.idempotency import HEADER, commit_id_for, key_in, reused
from lake_platform.catalog.no_ops import answer_of
from lake_platform.catalog.provenance import Provenance
from lake_platform.catalog.results import CommitResult
from lake_platform.naming import TableName
from lake_platform.registry.records import CommitLogEntry, CommitMarker, decode
from lake_platform.rest.request import RestRequest

#: What a write puts in its log entry's detail (and the retry compares): Callable's argument.
Commit = Callable[[Provenance, dict[str, object]], CommitResult]
T = TypeVar("T")


def idempotency_key(request: RestRequest) -> str | None:
    """The request's ``Idempotency-Key`` (None without one); InvalidInput when malformed."""
    return key_in(request.headers, HEADER)


@dataclass(frozen=True)
class Keyed:
    """A committing request under its key: ``by`` (with the key's commit id) and ``detail``
    (the key and the request's digest) for its commit and log entry, or, when the key's commit
    already landed as this request, ``first``: that commit's log entry, to answer from."""

    by: Provenance
    detail: dict[str, object] = field(default_factory=dict)
    first: CommitLogEntry | None = None


def keyed(
    request: RestRequest, tname: TableName | str, kind: str, payload: bytes, operations: set[str]
) -> Keyed:
    """The request's commit under its idempotency key, if it sent one. ``kind`` names the
    request (``create``, ``update``, ``merge``, ``restore``, ...), ``payload`` is what makes it
    this request (the body, the mode, the predicate, the branch) and ``operations`` the log
    operations its commit may have. ``tname`` is a table, or (a str) the dotted name of a
    project, warehouse or namespace whose commit-log entry the commit leaves. The key used for
    another target, kind or payload is IdempotencyKeyReused (422), before anything is written."""
    key = idempotency_key(request)
    if key is None:
        return Keyed(Provenance(principal=request.principal))
    catalog = request.service.catalog
    commit_id = commit_id_for(request.principal, key, kind)
    digest = hashlib.sha256(b"\0".join((kind.encode(), str(tname).encode(), payload))).hexdigest()[:32]
    by = Provenance(principal=request.principal, commit_id=commit_id)
    detail: dict[str, object] = {"idempotency_key": key, "request_digest": digest}
    marker = catalog.ctx.commit_landed(commit_id)
    if marker is None:
        return Keyed(by, detail)
    if isinstance(tname, TableName):
        entry = first_answer(request, tname, commit_id, marker)
    else:  # a container's: the commit id is this principal's own (commit_id_for), so is its entry
        item = catalog.store.get(marker.log_key) if marker.target == tname and marker.log_key else None
        entry = decode(CommitLogEntry, item.value, item.key) if item is not None else None
    first = f"{marker.operation} of {marker.target}"
    if entry is None or marker.operation not in operations:
        raise reused(key, first, f"{kind} of {tname}")
    if entry.detail.get("request_digest", digest) != digest:
        raise reused(key, f"{first} with other rows or options", f"{kind} of {tname}")
    return Keyed(by, detail, entry)


def first_answer(
    request: RestRequest, tname: TableName, commit_id: str, marker: CommitMarker | None = None
) -> CommitLogEntry | None:
    """What the commit ``commit_id`` (the request's key's) answered on ``tname``: its log entry,
    or, for a write that had nothing to commit (``catalog/no_ops``), its marker's answer."""
    catalog = request.service.catalog
    entry = catalog.reads.commit(str(tname), commit_id, by=Provenance(principal=request.principal))
    if entry is None:
        marker = marker or catalog.ctx.commit_landed(commit_id)
        entry = answer_of(marker, str(tname)) if marker is not None else None
    return entry


def once(
    request_key: Callable[[], Keyed], run: Callable[[Keyed], T], answer: Callable[[CommitLogEntry], T]
) -> T:
    """``run`` under the request's key (``request_key``: :func:`keyed` or :func:`keyed_body`
    for it), or ``answer`` from the first commit when the key's commit landed as this request.
    For an operation whose catalog call has no lease to look for the key under (a container's
    create or drop, a register): a refusal it raises (exists already, not found, changed
    meanwhile) is looked at again, since the same request sent at once may have landed
    between the first look and the catalog's; its commit marker lands in the commit's own
    transaction, so a refusal after it sees it."""
    first = request_key()
    if first.first is not None:
        return answer(first.first)
    try:
        return run(first)
    except Exception:  # a LakeError, or the spec's error LakeNamespace turned it into
        if not first.detail:  # no key: the refusal stands
            raise
        again = request_key()
        if again.first is None:
            raise
        return answer(again.first)


def keyed_body(
    request: RestRequest, tname: TableName | str, kind: str, operations: set[str], *also: object
) -> Keyed:
    """:func:`keyed` for a request whose JSON body (with ``also``: the branch, a name the
    query gave) is what makes it this request."""
    payload = json.dumps([*also, request.body], sort_keys=True, default=str).encode()
    return keyed(request, tname, kind, payload, operations)


def confirm(request: RestRequest, tname: TableName, request_key: Keyed, commit_id: str | None) -> None:
    """After a commit under the request's key: the commit that landed under it is this
    request's. Two requests sent at once under one key both find no commit when they look
    (:func:`keyed`); the catalog answers the one that commits second from the first one's
    commit (its id, the key's, landed), so with other rows or options it would be told that
    its change was made. It is IdempotencyKeyReused (422) instead; nothing of it was committed."""
    digest = request_key.detail.get("request_digest")
    if digest is None or commit_id is None or commit_id != request_key.by.commit_id:
        return
    entry = first_answer(request, tname, commit_id)
    if entry is not None and entry.detail.get("request_digest", digest) != digest:
        key = str(request_key.detail["idempotency_key"])
        first = f"{entry.operation} of {entry.target} with other rows or options, sent at the same time"
        raise reused(key, first, f"{entry.operation} of {tname}")


def commit_once(
    request: RestRequest, tname: TableName, kind: str, payload: bytes, commit: Commit, operations: set[str]
) -> CommitResult:
    """``commit`` under the request's idempotency key (:func:`keyed`), if it sent one. A retry
    whose first attempt landed answers that commit (rows from its log entry) and writes
    nothing; one sent at the same time with other rows is refused (:func:`confirm`)."""
    request_key = keyed(request, tname, kind, payload, operations)
    entry = request_key.first
    if entry is None:
        result = commit(request_key.by, request_key.detail)
        if result is not None:  # None: a create that kept the table (exist_ok), nothing committed
            confirm(request, tname, request_key, result.commit_id)
        return result
    return CommitResult(
        entry.commit_id,
        entry.target,
        entry.operation,
        entry.from_version,
        entry.to_version,
        rows_added=entry.rows_added,
        bytes_added=entry.bytes_added,
        replayed=True,
    )
