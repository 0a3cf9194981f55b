"""Judging one answer against the spec: the success status and schema, or the error's status,
media type, ``ErrorResponse`` shape and code."""

from __future__ import annotations

import io
import json
from typing import Any

import pyarrow as pa
import pyarrow.ipc
from pydantic import ValidationError

from lake_platform.conformance.client import Answer
from lake_platform.conformance.registry import CheckFailed, NotSupported
from lake_platform.conformance.spec import STATUS_BY_CODE, model, spec_operations

#: error bodies: the spec's application/json, or RFC 9457's problem+json carrying the same members.
ERROR_MEDIA_TYPES = ("application/json", "application/problem+json")
CODE_NAMES = {
    0: "Unsupported",
    1: "NamespaceNotFound",
    2: "NamespaceAlreadyExists",
    3: "NamespaceNotEmpty",
    4: "TableNotFound",
    5: "TableAlreadyExists",
    6: "TableIndexNotFound",
    7: "TableIndexAlreadyExists",
    8: "TableTagNotFound",
    9: "TableTagAlreadyExists",
    10: "TransactionNotFound",
    11: "TableVersionNotFound",
    12: "TableColumnNotFound",
    13: "InvalidInput",
    14: "ConcurrentModification",
    15: "PermissionDenied",
    16: "Unauthenticated",
    17: "ServiceUnavailable",
    18: "Internal",
    19: "InvalidTableState",
    20: "TableSchemaValidationError",
    21: "Throttling",
    22: "TableBranchNotFound",
    23: "TableBranchAlreadyExists",
}
CODES = {name: code for code, name in CODE_NAMES.items()}


def error_code(answer: Answer) -> int | None:
    """The ``code`` of an error answer's JSON body, if it has one."""
    if answer.status < 400:
        return None
    try:
        body = answer.json()
    except ValueError:
        return None
    code = body.get("code") if isinstance(body, dict) else None
    return code if isinstance(code, int) else None


def _unsupported(answer: Answer) -> None:
    """NotSupported for the spec's Unsupported (code 0), and for an error that says it is one
    under another code (pylance's reference server: 500 Internal "Not supported: ...")."""
    code = error_code(answer)
    message = _message(answer)
    if code == 0:
        raise NotSupported(message)
    if code is not None and message.lower().startswith(("not supported", "not implemented")):
        raise NotSupported(f"as {answer.status} {CODE_NAMES.get(code, code)} ({code}), not 406/0: {message}")


def _message(answer: Answer) -> str:
    try:
        body = answer.json()
    except ValueError:
        return answer.describe()
    text = body.get("error") or body.get("detail") if isinstance(body, dict) else None
    return str(text or answer.describe())[:200]


def succeeds(answer: Answer) -> Any:
    """The answer is the operation's success, its body valid against the spec's response schema.
    Returns the body (JSON, an Arrow table, an int or text). Unsupported -> NotSupported."""
    _unsupported(answer)
    op = spec_operations()[answer.operation_id]
    if answer.status != op.success_status:
        code = error_code(answer)
        if code is not None:
            got = f"{answer.status} {CODE_NAMES.get(code, code)} ({code}): {_message(answer)}"
            raise CheckFailed(f"expected {op.success_status}, got {got}")
        raise CheckFailed(f"expected {op.success_status}, got {answer.describe()}")
    schema = op.success_schema
    if schema is None:
        return None
    if schema == "bytearray":  # QueryTable: an Arrow IPC file or stream
        return _arrow(answer)
    if schema == "int":
        try:
            return int(answer.body)
        except ValueError as exc:
            raise CheckFailed(f"expected an integer body, got {answer.describe()}") from exc
    if schema == "str":
        text = answer.body.decode("utf-8", errors="replace")
        if answer.content_type == "application/json":
            try:
                text = json.loads(text)
            except ValueError as exc:
                raise CheckFailed(f"labelled JSON but not JSON: {answer.describe()}") from exc
        if not isinstance(text, str):
            raise CheckFailed(f"expected a string, got {answer.describe()}")
        return text
    body = _json(answer)
    if schema == "Dict[str, str]":
        if not isinstance(body, dict) or not all(isinstance(v, str) for v in body.values()):
            raise CheckFailed(f"expected a map of strings, got {answer.describe()}")
        return body
    try:
        model(schema).model_validate(body)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "body"
        raise CheckFailed(f"not a {schema}: {where}: {first['msg']}") from exc
    return body


def refused(answer: Answer, name: str) -> dict[str, Any]:
    """The answer is the spec's error ``name`` (``TableNotFound``): its status, a JSON (or
    problem+json) ``ErrorResponse`` body with that code. Unsupported -> NotSupported."""
    expected = CODES[name]
    if expected != 0:
        _unsupported(answer)
    if answer.status < 400:
        raise CheckFailed(f"expected {name}, got {answer.describe()}")
    if answer.content_type not in ERROR_MEDIA_TYPES:
        raise CheckFailed(f"error body is {answer.content_type or 'unlabelled'}: {answer.describe()}")
    body = _json(answer)
    try:
        model("ErrorResponse").model_validate(body)
    except ValidationError as exc:
        raise CheckFailed(f"not an ErrorResponse: {exc.errors()[0]['msg']}: {answer.describe()}") from exc
    code = body["code"]
    status = STATUS_BY_CODE[expected]
    if code != expected or answer.status != status:
        got = CODE_NAMES.get(code, str(code))
        raise CheckFailed(
            f"expected {status} {name} ({expected}), got {answer.status} {got} ({code}): {_message(answer)}"
        )
    return body


def _json(answer: Answer) -> Any:
    if answer.content_type != "application/json" and answer.status < 400:
        raise CheckFailed(f"expected application/json, got {answer.describe()}")
    try:
        return answer.json()
    except ValueError as exc:
        raise CheckFailed(f"body is not JSON: {answer.describe()}") from exc


def _arrow(answer: Answer) -> pa.Table:
    for open_ipc in (pyarrow.ipc.open_file, pyarrow.ipc.open_stream):
        try:
            return open_ipc(io.BytesIO(answer.body)).read_all()
        except (pa.ArrowInvalid, OSError):
            continue
    raise CheckFailed(f"body is not Arrow IPC: {answer.describe()}")
