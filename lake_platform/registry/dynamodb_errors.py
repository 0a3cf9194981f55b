"""Translating botocore's DynamoDB errors into the platform's typed errors."""

from __future__ import annotations

import re
from collections.abc import Sequence

from botocore.exceptions import ClientError, NoCredentialsError, ParamValidationError, PartialCredentialsError

from lake_platform.errors import (
    ConcurrentModification,
    ConditionFailed,
    Internal,
    InvalidInput,
    LakeError,
    PermissionDenied,
    ServiceUnavailable,
    SettingsError,
    Throttling,
    Unauthenticated,
)
from lake_platform.registry.dynamodb_items import Raw, item_of
from lake_platform.registry.store import Item, Op, Put

_THROTTLE_CODES = {
    "ProvisionedThroughputExceededException",
    "ThrottlingException",
    "RequestLimitExceeded",
    "Throttling",
    "ThrottlingError",
    "ProvisionedThroughputExceeded",
}
_AUTH_CODES = {
    "UnrecognizedClientException",
    "InvalidSignatureException",
    "ExpiredTokenException",
    "MissingAuthenticationTokenException",
    "InvalidClientTokenId",
}


def error_code(exc: ClientError) -> str:
    return str(exc.response.get("Error", {}).get("Code", ""))


def botocore_retried(exc: Exception) -> bool:
    if isinstance(exc, ClientError):
        return int(exc.response.get("ResponseMetadata", {}).get("RetryAttempts", 0) or 0) > 0
    return True  # transport errors: we cannot tell how far the request got


def _cancellation_codes(exc: ClientError) -> list[str]:
    reasons = exc.response.get("CancellationReasons")
    if reasons:
        return [str(r.get("Code", "None")) for r in reasons]
    # Some servers only put the reasons in the message: "... reasons [None, ConditionalCheckFailed]".
    match = re.search(r"\[([^\]]*)\]\s*$", str(exc.response.get("Error", {}).get("Message", "")))
    return [c.strip() for c in match.group(1).split(",")] if match else []


def _old_items(exc: ClientError, ops: Sequence[Op]) -> dict[int, Raw]:
    """ALL_OLD images the server returned with a failed condition, by op index."""
    if error_code(exc) == "ConditionalCheckFailedException":
        item = exc.response.get("Item")
        return {0: item} if item else {}
    reasons = exc.response.get("CancellationReasons") or []
    return {i: r["Item"] for i, r in enumerate(reasons[: len(ops)]) if r.get("Item")}


def own_items(exc: Exception, ops: Sequence[Op], write_id: str) -> dict[str, Item] | None:
    """If a failed condition saw this call's own earlier write, the call has landed: return the
    items it wrote, else None."""
    if not isinstance(exc, ClientError):
        return None
    mine = {
        ops[i].key: item_of(raw)
        for i, raw in _old_items(exc, ops).items()
        if isinstance(ops[i], Put) and raw.get("w", {}).get("S") == write_id
    }
    return mine or None


def condition_message(op: Op, found: int | None) -> str:
    seen = "" if found is None else f", found {found}"
    return f"registry condition failed on {op.key!r}: expected revision {op.expected}{seen}"


def translate(exc: Exception, ops: Sequence[Op], table: str) -> LakeError:
    if isinstance(exc, ClientError):
        code = error_code(exc)
        message = exc.response.get("Error", {}).get("Message", "") or code
        status = int(exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0) or 0)
        if code == "ConditionalCheckFailedException" and ops:
            old = _old_items(exc, ops).get(0)
            found = int(old["r"]["N"]) if old and "r" in old else None
            return ConditionFailed(condition_message(ops[0], found), key=ops[0].key)
        if code == "TransactionCanceledException":
            codes = _cancellation_codes(exc)
            for i, reason in enumerate(codes[: len(ops)]):
                if reason == "ConditionalCheckFailed":
                    old = _old_items(exc, ops).get(i)
                    found = int(old["r"]["N"]) if old and "r" in old else None
                    return ConditionFailed(condition_message(ops[i], found), key=ops[i].key)
            if "ConditionalCheckFailed" in codes:
                return ConditionFailed(f"registry condition failed: {message}")
            if "TransactionConflict" in codes and not ops:
                # A read (reads pass no ops): TransactGetItems is cancelled when a write to one of
                # its items is in flight. Nothing was decided; the read is retried like any
                # transient trouble (and reported as such when retries run out).
                return ServiceUnavailable(f"registry read conflicted with a write in flight: {message}")
            if "TransactionConflict" in codes:
                return ConcurrentModification(f"registry transaction conflict: {message}")
            if _THROTTLE_CODES.intersection(codes):
                return Throttling(f"registry throttled: {message}")
            if "ValidationError" in codes:
                return InvalidInput(f"registry rejected the batch: {message}")
            return Internal(f"registry transaction cancelled: {message}")
        if code in ("TransactionConflictException",):
            return ConcurrentModification(f"registry transaction conflict: {message}")
        if code in _THROTTLE_CODES:
            return Throttling(f"registry throttled: {message}")
        if code == "TransactionInProgressException":
            return ServiceUnavailable(f"registry transaction still in progress: {message}")
        if code == "ResourceNotFoundException":
            return SettingsError(
                f"LAKE_REGISTRY_URL: registry table {table!r} not found (run `lake registry init`)"
            )
        if code == "AccessDeniedException":
            return PermissionDenied(f"registry access denied: {message}")
        if code in _AUTH_CODES:
            return Unauthenticated(f"registry credentials rejected: {message}")
        if code == "ValidationException":
            return InvalidInput(f"registry rejected the request: {message}")
        if status >= 500 or code in ("InternalServerError", "ServiceUnavailable"):
            return ServiceUnavailable(f"registry unavailable: {message}")
        return Internal(f"registry error {code}: {message}")
    if isinstance(exc, ParamValidationError):
        return InvalidInput(f"registry request invalid: {exc}")
    if isinstance(exc, (NoCredentialsError, PartialCredentialsError)):
        return Unauthenticated(f"no AWS credentials for the registry: {exc}")
    return ServiceUnavailable(f"registry unreachable: {exc}")
