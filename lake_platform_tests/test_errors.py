from __future__ import annotations

import lance_namespace.errors as spec

from lake_platform.errors import ERRORS_BY_CODE, ErrorCode, Internal, LakeError, error_for_code

# The full list from the issue / Lance Namespace spec: code -> (name, HTTP, gRPC).
EXPECTED = {
    0: ("Unsupported", 406, "UNIMPLEMENTED"),
    1: ("NamespaceNotFound", 404, "NOT_FOUND"),
    2: ("NamespaceAlreadyExists", 409, "ALREADY_EXISTS"),
    3: ("NamespaceNotEmpty", 409, "FAILED_PRECONDITION"),
    4: ("TableNotFound", 404, "NOT_FOUND"),
    5: ("TableAlreadyExists", 409, "ALREADY_EXISTS"),
    6: ("TableIndexNotFound", 404, "NOT_FOUND"),
    7: ("TableIndexAlreadyExists", 409, "ALREADY_EXISTS"),
    8: ("TableTagNotFound", 404, "NOT_FOUND"),
    9: ("TableTagAlreadyExists", 409, "ALREADY_EXISTS"),
    10: ("TransactionNotFound", 404, "NOT_FOUND"),
    11: ("TableVersionNotFound", 404, "NOT_FOUND"),
    12: ("TableColumnNotFound", 404, "NOT_FOUND"),
    13: ("InvalidInput", 400, "INVALID_ARGUMENT"),
    14: ("ConcurrentModification", 409, "ABORTED"),
    15: ("PermissionDenied", 403, "PERMISSION_DENIED"),
    16: ("Unauthenticated", 401, "UNAUTHENTICATED"),
    17: ("ServiceUnavailable", 503, "UNAVAILABLE"),
    18: ("Internal", 500, "INTERNAL"),
    19: ("InvalidTableState", 409, "FAILED_PRECONDITION"),
    20: ("TableSchemaValidationError", 400, "INVALID_ARGUMENT"),
    21: ("Throttling", 429, "RESOURCE_EXHAUSTED"),
    22: ("TableBranchNotFound", 404, "NOT_FOUND"),
    23: ("TableBranchAlreadyExists", 409, "ALREADY_EXISTS"),
}


def test_map_covers_every_code_exactly() -> None:
    assert sorted(int(c) for c in ErrorCode) == list(range(24))
    assert sorted(int(c) for c in ERRORS_BY_CODE) == sorted(EXPECTED)
    for code, (name, http, grpc) in EXPECTED.items():
        cls = ERRORS_BY_CODE[ErrorCode(code)]
        assert (cls.__name__, cls.http_status, cls.grpc_status) == (name, http, grpc), code


def test_codes_agree_with_lance_namespace_spec() -> None:
    for code in ErrorCode:
        assert int(spec.ErrorCode(int(code))) == int(code)
        assert spec.ErrorCode(int(code)).name == code.name


def test_unknown_code_becomes_internal() -> None:
    assert isinstance(error_for_code(99, "x"), Internal)
    err = error_for_code(4, "no such table")
    assert isinstance(err, LakeError) and err.to_dict() == {
        "code": 4,
        "error": "TableNotFound",
        "message": "no such table",
    }
