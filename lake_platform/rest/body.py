"""A request's body and query values, read and parsed within the server's limits.

The body is read only after the caller is identified (``app.Endpoint``), within
LAKE_REST_MAX_BODY_BYTES (a declared length over it is 413 before a byte is read; a streamed one
is cut off at it) and LAKE_REST_BODY_TIMEOUT_SECONDS (408). JSON is refused (400) when nested
deeper than LAKE_REST_MAX_JSON_DEPTH or when it carries an integer outside the signed 64-bit
range or a non-finite number: no handler, registry or Lance call ever sees one. An empty body
and the JSON ``null`` read as no body (``{}``), as stock Lance clients send them.
"""

from __future__ import annotations

import json
import re
from typing import Any

import anyio
from starlette.requests import Request

from lake_platform.errors import InvalidInput, RequestTimeout, RequestTooLarge

JSON = "application/json"
INT64_MIN, INT64_MAX = -(1 << 63), (1 << 63) - 1
_BOOLS = {"true": True, "false": False, "1": True, "0": False}
_INTEGER = re.compile(r"-?[0-9]{1,20}")


BODY_LIMIT = "LAKE_REST_MAX_BODY_BYTES"


def check_declared_length(request: Request, limit: int, setting: str = BODY_LIMIT) -> None:
    """413 when the declared ``Content-Length`` is over ``limit`` (``setting``): checked before
    anything else (no token check, no byte of the body read)."""
    declared = request.headers.get("content-length")
    if declared is not None and _INTEGER.fullmatch(declared) and int(declared) > limit:
        raise RequestTooLarge(f"the body is {declared} bytes; the limit is {limit} ({setting})")


async def read_body(request: Request, limit: int, timeout: float, setting: str = BODY_LIMIT) -> bytes:
    """The request body, refused (413) past ``limit`` (``setting``) before or while reading it,
    and (408) when it has not all arrived within ``timeout`` seconds; a client gone mid-body is
    Starlette's ``ClientDisconnect``, raised by ``Request.stream``."""
    check_declared_length(request, limit, setting)
    body = bytearray()
    with anyio.move_on_after(timeout) as deadline:
        async for chunk in request.stream():
            if len(body) + len(chunk) > limit:
                raise RequestTooLarge(f"the body exceeds the limit of {limit} bytes ({setting})")
            body += chunk
    if deadline.cancelled_caught:
        raise RequestTimeout(
            f"the body did not arrive within {timeout:g} seconds (LAKE_REST_BODY_TIMEOUT_SECONDS)"
        )
    return bytes(body)


def _int64(text: str) -> int:
    # Python's own digit limit (4300) also stops a huge literal before it is converted.
    value = int(text)
    if not INT64_MIN <= value <= INT64_MAX:
        raise InvalidInput(f"the body has an integer outside the signed 64-bit range: {text[:40]}")
    return value


def _finite(text: str) -> float:
    raise InvalidInput(f"the body has a non-finite number ({text}); JSON has none")


def _depth(value: Any, limit: int) -> None:
    """InvalidInput when ``value`` nests arrays and objects deeper than ``limit`` (iterative).
    Only arrays and objects go on the stack: an entry per value made a 64 MiB array of numbers
    cost gigabytes (a tuple per number) before the request was even looked at."""
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if depth > limit:
            raise InvalidInput(f"the body nests deeper than {limit} levels (LAKE_REST_MAX_JSON_DEPTH)")
        children = item.values() if isinstance(item, dict) else item
        stack.extend((child, depth + 1) for child in children if isinstance(child, (dict, list)))


def check_encoding(raw: bytes, content_encoding: str) -> None:
    """InvalidInput for a body sent with a Content-Encoding (gzip, br, ...): the server decodes
    none, and read as it is the body would be refused as broken JSON or Arrow instead."""
    encoding = content_encoding.strip().lower()
    if raw and encoding not in ("", "identity"):
        raise InvalidInput(
            f"Content-Encoding {content_encoding[:40]!r} is not accepted: send the body unencoded"
        )


def parse_json(raw: bytes, content_type: str, max_depth: int, *, bodyless: bool = False) -> dict[str, Any]:
    """The body as a JSON object; an empty body and ``null`` are no body (``{}``), as stock
    clients send them (lancedb 0.40 and pylance 13 post ``null`` to ListTableVersions).
    ``bodyless``: an operation the spec gives no body (ListTableVersions, ListTableTags, ...):
    its content type is not checked, as the reference server ignores such a body; a JSON
    object there is still read (its members are the operation's parameters)."""
    if not raw.strip():
        return {}
    media = content_type.split(";", 1)[0].strip().lower()
    if media and media != JSON and not bodyless:
        raise InvalidInput(f"this operation takes application/json, not {media!r}")
    try:
        body = json.loads(raw, parse_int=_int64, parse_constant=_finite)
    except RecursionError:  # deeper than the interpreter's stack: far past max_depth
        raise InvalidInput(
            f"the body nests deeper than {max_depth} levels (LAKE_REST_MAX_JSON_DEPTH)"
        ) from None
    except (ValueError, UnicodeDecodeError) as exc:
        raise InvalidInput(f"the body is not valid JSON: {exc}") from None
    if body is None:
        return {}
    if not isinstance(body, dict):
        raise InvalidInput("the body must be a JSON object")
    _depth(body, max_depth)
    return body


def query_value(name: str, value: str, ints: set[str], bools: set[str]) -> Any:
    """A query parameter as the spec types it: an integer (decimal ASCII digits, in the signed
    64-bit range), a boolean, or the string itself."""
    if name in ints:
        # ASCII digits only: int() would also read "1_0" as 10, " 1" as 1 and other scripts' digits.
        if _INTEGER.fullmatch(value) is None:
            raise InvalidInput(f"query parameter {name} must be an integer, got {value[:40]!r}")
        number = int(value)
        if not INT64_MIN <= number <= INT64_MAX:
            raise InvalidInput(f"query parameter {name} is outside the signed 64-bit range")
        return number
    if name in bools:
        if value.lower() not in _BOOLS:
            raise InvalidInput(f"query parameter {name} must be true or false, got {value[:40]!r}")
        return _BOOLS[value.lower()]
    return value
