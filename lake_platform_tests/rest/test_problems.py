"""The error map, pinned against the spec: a code added to the spec fails here, not in a client."""

from __future__ import annotations

import errno
import json

import lance_namespace.errors as ns_errors
from lance_namespace.errors import ErrorCode as NsErrorCode

from lake_platform.errors import ERRORS_BY_CODE, ErrorCode, Internal, RequestTooLarge, TableNotFound
from lake_platform.rest import spec
from lake_platform.rest.problems import PROBLEM_JSON, problem

#: The HTTP status of each code, as the reference server (lance's rest_adapter.rs) answers it.
REFERENCE_STATUS = {
    0: 406, 1: 404, 2: 409, 3: 409, 4: 404, 5: 409, 6: 404, 7: 409, 8: 404, 9: 409, 10: 404, 11: 404,
    12: 404, 13: 400, 14: 409, 15: 403, 16: 401, 17: 503, 18: 500, 19: 409, 20: 400, 21: 429, 22: 404,
    23: 409,
}  # fmt: skip


def test_every_spec_code_has_exactly_one_error_class_with_its_name() -> None:
    codes = spec.error_codes()
    assert sorted(codes) == list(range(24))
    assert {int(c) for c in ERRORS_BY_CODE} == set(codes)
    for code, name in codes.items():
        assert ERRORS_BY_CODE[ErrorCode(code)].__name__ == name
    assert {int(c) for c in NsErrorCode} == set(codes)  # the pinned client agrees too


def test_statuses_match_the_reference_server() -> None:
    assert {int(c): cls.http_status for c, cls in ERRORS_BY_CODE.items()} == REFERENCE_STATUS


def test_a_problem_body_carries_rfc9457_members_and_the_spec_code() -> None:
    resp = problem(TableNotFound("table p.w.ns.t does not exist"), "/v1/table/p$w$ns$t/describe")
    body = json.loads(resp.body)
    assert resp.status_code == 404 and resp.media_type == PROBLEM_JSON
    assert body == {
        "type": "/errors/TableNotFound",
        "title": "TableNotFound",
        "status": 404,
        "detail": "table p.w.ns.t does not exist",
        "instance": "/v1/table/p$w$ns$t/describe",
        "error": "table p.w.ns.t does not exist",
        "code": 4,
    }


def test_client_package_errors_and_unknown_exceptions_map_through_the_same_table() -> None:
    resp = problem(ns_errors.TableTagNotFoundError("no tag"))
    assert resp.status_code == 404 and json.loads(resp.body)["code"] == 8
    resp = problem(KeyError("/secret/path"))
    body = json.loads(resp.body)
    assert resp.status_code == 500 and body["code"] == int(Internal.code) and "/secret" not in body["detail"]
    resp = problem(RequestTooLarge("too big"))
    assert resp.status_code == 413 and json.loads(resp.body)["code"] == 13


def test_a_full_disk_is_503_with_retry_after_never_500() -> None:
    for exc in (
        OSError(errno.ENOSPC, "No space left on device"),
        OSError("IO error: No space left on device"),
    ):
        resp = problem(exc, "/v1/table/p$w$ns$t/query")
        assert (resp.status_code, json.loads(resp.body)["code"]) == (503, 17)
        assert resp.headers["retry-after"] == "1"
        assert "/" not in json.loads(resp.body)["detail"]  # no path of the server's disk
