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

A key names one request. Reused for another one (another table, another kind of change, other
rows), it is refused with :class:`IdempotencyKeyReused`: HTTP 422, as the IETF Idempotency-Key
draft (draft-ietf-httpapi-idempotency-key-header, "payload mismatch") asks.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping

from lake_platform.catalog.principals import Principal
from lake_platform.errors import IdempotencyKeyReused, InvalidInput

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
