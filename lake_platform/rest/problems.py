"""Every REST error as an RFC 9457 ``application/problem+json`` body with the spec's ``code``.

The one place a failure becomes an HTTP answer: the status and code come from the
:class:`~lake_platform.errors.LakeError` class (``errors.ERRORS_BY_CODE`` is the map, pinned
against the spec's enum by ``lake_platform_tests/rest/test_problems.py``); errors the
``lance_namespace`` package raises (its ``LanceNamespaceError`` carries the same codes) go
through the same map. A full disk (or quota) is ServiceUnavailable with ``Retry-After``: the
request was fine and may succeed once space is back. Anything else is an Internal error whose
text never reaches the client.
"""

from __future__ import annotations

import errno
import json
import logging

from lance_namespace.errors import LanceNamespaceError
from starlette.responses import Response

from lake_platform.errors import (
    ERRORS_BY_CODE,
    ErrorCode,
    Internal,
    LakeError,
    ServiceUnavailable,
    error_for_code,
)

log = logging.getLogger(__name__)

PROBLEM_JSON = "application/problem+json"
_DISK_FULL = {errno.ENOSPC, errno.EDQUOT}


def _disk_full(exc: BaseException) -> bool:
    # Lance and pyarrow raise OSError; some wrap the OS error's text without its errno.
    return isinstance(exc, OSError) and (
        exc.errno in _DISK_FULL or "No space left on device" in str(exc) or "Disk quota exceeded" in str(exc)
    )


def as_lake_error(exc: BaseException) -> LakeError:
    if isinstance(exc, LakeError):
        return exc
    if isinstance(exc, LanceNamespaceError):
        return error_for_code(int(exc.code), str(exc))
    if _disk_full(exc):
        log.warning("a REST request failed for lack of disk space: %s", exc)
        return ServiceUnavailable("the server is out of disk space; retry later")
    log.error("unexpected error answering a REST request", exc_info=exc)
    return Internal("internal error (see the server log)")


def status_of(error: LakeError) -> int:
    return int(error.http_status)


def problem(exc: BaseException, instance: str = "") -> Response:
    error = as_lake_error(exc)
    status = status_of(error)
    name = ERRORS_BY_CODE[ErrorCode(int(error.code))].__name__
    body = {
        # RFC 9457 members
        "type": f"/errors/{name}",
        "title": name,
        "status": status,
        "detail": error.message,
        "instance": instance,
        # the Lance Namespace ErrorResponse members
        "error": error.message,
        "code": int(error.code),
    }
    headers = {"retry-after": "1"} if error.retryable and status in (429, 503) else None
    return Response(json.dumps(body), status_code=status, media_type=PROBLEM_JSON, headers=headers)
