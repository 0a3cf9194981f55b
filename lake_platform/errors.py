"""Typed errors carrying the Lance Namespace error codes.

Every error a user can see is a :class:`LakeError` with a stable code (0-23, the Lance
Namespace spec's numbering), one HTTP status and one gRPC status. Entry points (CLI, Flight,
Dagster) translate these into their own vocabulary; nothing else reaches a client.
"""

from __future__ import annotations

from enum import IntEnum
from typing import ClassVar


class ErrorCode(IntEnum):
    UNSUPPORTED = 0
    NAMESPACE_NOT_FOUND = 1
    NAMESPACE_ALREADY_EXISTS = 2
    NAMESPACE_NOT_EMPTY = 3
    TABLE_NOT_FOUND = 4
    TABLE_ALREADY_EXISTS = 5
    TABLE_INDEX_NOT_FOUND = 6
    TABLE_INDEX_ALREADY_EXISTS = 7
    TABLE_TAG_NOT_FOUND = 8
    TABLE_TAG_ALREADY_EXISTS = 9
    TRANSACTION_NOT_FOUND = 10
    TABLE_VERSION_NOT_FOUND = 11
    TABLE_COLUMN_NOT_FOUND = 12
    INVALID_INPUT = 13
    CONCURRENT_MODIFICATION = 14
    PERMISSION_DENIED = 15
    UNAUTHENTICATED = 16
    SERVICE_UNAVAILABLE = 17
    INTERNAL = 18
    INVALID_TABLE_STATE = 19
    TABLE_SCHEMA_VALIDATION_ERROR = 20
    THROTTLING = 21
    TABLE_BRANCH_NOT_FOUND = 22
    TABLE_BRANCH_ALREADY_EXISTS = 23


class LakeError(Exception):
    """Base of every error the platform reports to a user."""

    code: ClassVar[ErrorCode] = ErrorCode.INTERNAL
    http_status: ClassVar[int] = 500
    grpc_status: ClassVar[str] = "INTERNAL"
    #: Retrying the same request later may succeed (throttling, unavailability, lost races).
    retryable: ClassVar[bool] = False

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message

    def __str__(self) -> str:
        return self.message

    def to_dict(self) -> dict[str, object]:
        return {"code": int(self.code), "error": type(self).__name__, "message": self.message}


class Unsupported(LakeError):
    code, http_status, grpc_status = ErrorCode.UNSUPPORTED, 406, "UNIMPLEMENTED"


class NamespaceNotFound(LakeError):
    code, http_status, grpc_status = ErrorCode.NAMESPACE_NOT_FOUND, 404, "NOT_FOUND"


class NamespaceAlreadyExists(LakeError):
    code, http_status, grpc_status = ErrorCode.NAMESPACE_ALREADY_EXISTS, 409, "ALREADY_EXISTS"


class NamespaceNotEmpty(LakeError):
    code, http_status, grpc_status = ErrorCode.NAMESPACE_NOT_EMPTY, 409, "FAILED_PRECONDITION"


class TableNotFound(LakeError):
    code, http_status, grpc_status = ErrorCode.TABLE_NOT_FOUND, 404, "NOT_FOUND"


class TableAlreadyExists(LakeError):
    code, http_status, grpc_status = ErrorCode.TABLE_ALREADY_EXISTS, 409, "ALREADY_EXISTS"


class TableIndexNotFound(LakeError):
    code, http_status, grpc_status = ErrorCode.TABLE_INDEX_NOT_FOUND, 404, "NOT_FOUND"


class TableIndexAlreadyExists(LakeError):
    code, http_status, grpc_status = ErrorCode.TABLE_INDEX_ALREADY_EXISTS, 409, "ALREADY_EXISTS"


class TableTagNotFound(LakeError):
    code, http_status, grpc_status = ErrorCode.TABLE_TAG_NOT_FOUND, 404, "NOT_FOUND"


class TableTagAlreadyExists(LakeError):
    code, http_status, grpc_status = ErrorCode.TABLE_TAG_ALREADY_EXISTS, 409, "ALREADY_EXISTS"


class TransactionNotFound(LakeError):
    code, http_status, grpc_status = ErrorCode.TRANSACTION_NOT_FOUND, 404, "NOT_FOUND"


class TableVersionNotFound(LakeError):
    code, http_status, grpc_status = ErrorCode.TABLE_VERSION_NOT_FOUND, 404, "NOT_FOUND"


class TableColumnNotFound(LakeError):
    code, http_status, grpc_status = ErrorCode.TABLE_COLUMN_NOT_FOUND, 404, "NOT_FOUND"


class InvalidInput(LakeError):
    code, http_status, grpc_status = ErrorCode.INVALID_INPUT, 400, "INVALID_ARGUMENT"


class ConcurrentModification(LakeError):
    code, http_status, grpc_status = ErrorCode.CONCURRENT_MODIFICATION, 409, "ABORTED"
    retryable = True


class PermissionDenied(LakeError):
    code, http_status, grpc_status = ErrorCode.PERMISSION_DENIED, 403, "PERMISSION_DENIED"


class Unauthenticated(LakeError):
    code, http_status, grpc_status = ErrorCode.UNAUTHENTICATED, 401, "UNAUTHENTICATED"


class ServiceUnavailable(LakeError):
    code, http_status, grpc_status = ErrorCode.SERVICE_UNAVAILABLE, 503, "UNAVAILABLE"
    retryable = True


class Internal(LakeError):
    code, http_status, grpc_status = ErrorCode.INTERNAL, 500, "INTERNAL"


class InvalidTableState(LakeError):
    code, http_status, grpc_status = ErrorCode.INVALID_TABLE_STATE, 409, "FAILED_PRECONDITION"


class TableSchemaValidationError(LakeError):
    code, http_status, grpc_status = ErrorCode.TABLE_SCHEMA_VALIDATION_ERROR, 400, "INVALID_ARGUMENT"


class Throttling(LakeError):
    code, http_status, grpc_status = ErrorCode.THROTTLING, 429, "RESOURCE_EXHAUSTED"
    retryable = True


class TableBranchNotFound(LakeError):
    code, http_status, grpc_status = ErrorCode.TABLE_BRANCH_NOT_FOUND, 404, "NOT_FOUND"


class TableBranchAlreadyExists(LakeError):
    code, http_status, grpc_status = ErrorCode.TABLE_BRANCH_ALREADY_EXISTS, 409, "ALREADY_EXISTS"


# Refinements: narrower meaning, same wire code as their parent.


class ConditionFailed(ConcurrentModification):
    """A registry condition (expected revision) did not hold; nothing was written."""

    def __init__(self, message: str, key: str | None = None) -> None:
        super().__init__(message)
        self.key = key


class LeaseExpired(ConcurrentModification):
    """The writer's lease ran out (or was taken over); its writes are fenced off."""


class BranchDiverged(ConcurrentModification):
    """A branch cannot be published by fast-forward: main moved since the branch was made."""

    retryable = False


class LeaseUnavailable(ConcurrentModification):
    """Another writer holds the table's lease and did not release it in time."""


class SettingsError(InvalidInput):
    """A setting (environment variable or .env entry) has a bad value."""


class InvalidPolicyValue(InvalidInput):
    """A policy key given a value it does not accept (a maintenance interval below its floor, an
    unknown index kind); ``key`` names it as ``lake policy set`` spells it. Nothing was changed."""

    def __init__(self, message: str, key: str = "") -> None:
        super().__init__(message)
        self.key = key


class TransactionTooLarge(InvalidInput):
    """A multi-table transaction writing more tables than the registry backend commits in one
    atomic write; ``max_tables`` is that limit. Refused before anything was written."""

    def __init__(self, message: str, max_tables: int = 0) -> None:
        super().__init__(message)
        self.max_tables = max_tables


class RecordTooLarge(InvalidInput):
    """A registry record, or one atomic write of records, larger than the registry backend
    stores (DynamoDB: 400 KB an item, 4 MB a transaction); ``key`` names the record (empty for a
    whole batch), ``size`` and ``limit`` are in bytes. Refused before anything was written."""

    def __init__(self, message: str, *, key: str = "", size: int = 0, limit: int = 0) -> None:
        super().__init__(message)
        self.key = key
        self.size = size
        self.limit = limit


class TrashExpiryFailed(InvalidTableState):
    """Trash expiry could not purge some due records; every other due record was expired.
    ``failures`` names each (the trash record's target, what went wrong). A record refused
    before its purge began stays in the trash as it was (undrop still brings it back); one whose
    purge failed part way stays claimed ("purging") and the next expiry finishes it."""

    def __init__(self, message: str, failures: list[tuple[str, str]] | None = None) -> None:
        super().__init__(message)
        self.failures = list(failures or [])


class PolicyNotFound(NamespaceNotFound):
    """No policy record is attached at the named scope."""


class UserNotFound(NamespaceNotFound):
    """No user has the name given (or it is in a project the caller cannot see); the wire code
    is NamespaceNotFound's, as a missing project's."""


class TokenNotFound(NamespaceNotFound):
    """No service token has the id given (or it is in a project the caller cannot see); the wire
    code is NamespaceNotFound's, as a missing project's."""


class ResultNotFound(TransactionNotFound):
    """A spooled query result (or one of its segments) is gone: expired, cancelled, reclaimed."""


ERRORS_BY_CODE: dict[ErrorCode, type[LakeError]] = {
    cls.code: cls
    for cls in (
        Unsupported,
        NamespaceNotFound,
        NamespaceAlreadyExists,
        NamespaceNotEmpty,
        TableNotFound,
        TableAlreadyExists,
        TableIndexNotFound,
        TableIndexAlreadyExists,
        TableTagNotFound,
        TableTagAlreadyExists,
        TransactionNotFound,
        TableVersionNotFound,
        TableColumnNotFound,
        InvalidInput,
        ConcurrentModification,
        PermissionDenied,
        Unauthenticated,
        ServiceUnavailable,
        Internal,
        InvalidTableState,
        TableSchemaValidationError,
        Throttling,
        TableBranchNotFound,
        TableBranchAlreadyExists,
    )
}


def error_for_code(code: int, message: str) -> LakeError:
    """Build the typed error for a wire code; unknown codes become :class:`Internal`."""
    try:
        return ERRORS_BY_CODE[ErrorCode(code)](message)
    except ValueError:
        return Internal(message)


class Protected(InvalidTableState):
    """Deletion protection refused a drop; ``force`` overrides it (and nothing else)."""


class RequestTooLarge(InvalidInput):
    """A request body above the server's limit (HTTP 413; the wire code stays InvalidInput)."""

    http_status = 413


class IdempotencyKeyReused(InvalidInput):
    """An idempotency key already used for a different request (HTTP 422, the IETF
    Idempotency-Key draft's answer to a payload mismatch; the wire code stays InvalidInput)."""

    http_status = 422


class CommitIdReused(IdempotencyKeyReused):
    """A commit id (a write's idempotency key) that landed meanwhile as another write: two
    callers passed it at once with other data or options. Nothing of this one was committed
    (HTTP 422, as for a reused idempotency key)."""


class RequestTimeout(InvalidInput):
    """A request body not received within the server's time limit (HTTP 408; the wire code stays
    InvalidInput)."""

    http_status = 408
