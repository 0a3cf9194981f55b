"""Idempotency keys: a client's own name for one commit, so that a retry after an unknown
outcome (the server was killed after the commit landed, the answer was lost) returns the first
outcome instead of committing the batch again, as ``lake ingest --commit-id`` does.

A key arrives as the ``Idempotency-Key`` HTTP header or as the Lance transaction property
``idempotency-key`` (``write_dataset(transaction_properties=...)``; any letter case). It becomes
the commit's id (:func:`commit_id_for`), so the registry's commit marker, which lands in the
commit's own transaction, is the proof that it landed (invariant 5): a retry finds the marker
and answers from it, and two requests racing with one key cannot both land (the marker is
written only if absent). The id is derived from the key, the principal (kind, project, name)
and the kind of commit, so tenants' keys never meet and one key may name a declare and the
commit that follows it (a client that sends the same header on every request).

A key names one request. Reused for another one (another table or branch, another kind of
change, other rows), it is refused with :class:`IdempotencyKeyReused`: HTTP 422, as the IETF
Idempotency-Key draft (draft-ietf-httpapi-idempotency-key-header, "payload mismatch") asks.

A Lance client's commit (CreateTableVersion, on main or a branch) is replayed by
:func:`first_version`: its retry stages a new manifest, so "the same request" is the same change
(Lance's operation and rows), not the same body.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

from lake_platform.catalog.principals import Principal
from lake_platform.errors import IdempotencyKeyReused, InvalidInput, InvalidTableState

if TYPE_CHECKING:
    from lake_platform.catalog.context import CatalogContext
    from lake_platform.engine.transactions import StagedChange
    from lake_platform.naming import TableName
    from lake_platform.registry.records import VersionRecord

#: The HTTP header (RFC-style spelling; headers are matched in any case).
HEADER = "Idempotency-Key"
#: The Lance transaction property, matched in any letter case.
PROPERTY = "idempotency-key"
_MAX_LENGTH = 255


def valid_key(key: object) -> str:
    """``key`` if it is 1-255 visible ASCII characters, else InvalidInput."""
    if (
        not isinstance(key, str)
        or not 1 <= len(key) <= _MAX_LENGTH
        or not all(33 <= ord(c) < 127 for c in key)
    ):
        raise InvalidInput(f"an idempotency key is 1-{_MAX_LENGTH} visible ASCII characters")
    return key


def key_in(values: Mapping[str, str], name: str) -> str | None:
    """The value of ``name`` in ``values`` (headers or transaction properties), in any case;
    checked with :func:`valid_key`."""
    wanted = name.lower()
    for found, value in values.items():
        if found.lower() == wanted:
            return valid_key(value.strip() if isinstance(value, str) else value)
    return None


def commit_id_for(principal: Principal, key: str, kind: str) -> str:
    """The commit id a key stands for: ``kind`` is the kind of commit (``declare``,
    ``version``, ...), so one key may name a declare and the version commit after it."""
    scope = "\0".join((principal.kind, principal.project, principal.name, kind, key))
    return "idem-" + hashlib.sha256(scope.encode()).hexdigest()[:48]


def reused(key: str, first: str, now: str) -> IdempotencyKeyReused:
    return IdempotencyKeyReused(
        f"idempotency key {key!r} was used for another request ({first}); this one ({now}) was not "
        "committed: use a new key for a new request"
    )


def retry_digest(tname: TableName, change: StagedChange, branch: str | None = None) -> str:
    """What a Lance client's retry under the same key must commit again: the table (and the
    branch, when on one), Lance's operation and its rows (not the files: a retry writes new
    ones)."""
    text = f"{tname}\0{change.operation}\0{change.rows_added}"
    if branch is not None:
        text += f"\0{branch}"
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def first_version(
    ctx: CatalogContext,
    commit_id: str,
    key: str,
    tname: TableName,
    manifest_path: str,
    retry: Callable[[], tuple[str, str]],
    location: str,
) -> VersionRecord | None:
    """The version a Lance client's commit made under ``key`` (``commit_id``) landed as, or None
    if none did. The same request resent names the manifest the first one committed; a client's
    retry stages a new one (Lance writes one per attempt, numbered after what it sees), which
    must make the same change: ``retry()`` gives its digest, compared with the one the first
    commit logged, and what it commits (for the refusal). A retry's staging manifest, under
    ``location`` (the dataset root its version lives in), is removed: nothing will ever register
    it (its data files are left to the orphan scan, as for any refused write). Another table,
    or another change, is IdempotencyKeyReused."""
    from lake_platform.engine import lance_engine as engine
    from lake_platform.registry import keys
    from lake_platform.registry.records import CommitLogEntry, VersionRecord, decode

    marker = ctx.commit_landed(commit_id)
    if marker is None:
        return None
    if marker.target != str(tname):
        raise reused(key, f"a commit to {marker.target}", f"a commit to {tname}")
    item = None
    if marker.to_version is not None and marker.incarnation is not None:
        item = ctx.store.get(keys.version(marker.incarnation, marker.to_version))
    if item is None:
        raise InvalidTableState(
            f"the commit made under idempotency key {key!r} landed as version {marker.to_version} "
            f"of {tname}, which no longer exists (cleaned up or the table was replaced)"
        )
    ver = decode(VersionRecord, item.value, item.key)
    first_staged = {p.rpartition("/")[2] for p in (ver.manifest_path, ver.staged_from) if p}
    if manifest_path.rpartition("/")[2] not in first_staged:
        digest, what = retry()
        entry = ctx.store.get(marker.log_key)
        logged = decode(CommitLogEntry, entry.value).detail.get("request_digest") if entry else None
        if logged != digest:
            raise reused(key, f"version {ver.version} of {tname}", what)
        if engine.is_staging_manifest(manifest_path):
            engine.remove_files(location, [manifest_path], ctx.storage(location))
    return ver
