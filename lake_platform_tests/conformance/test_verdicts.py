"""Judging answers: a success body against the spec's schema, an error's status, media type,
shape and code, and the two spellings of "not supported"."""

from __future__ import annotations

import json
from typing import Any

import pyarrow as pa
import pytest

from lake_platform.conformance.client import Answer
from lake_platform.conformance.registry import CheckFailed, NotSupported
from lake_platform.conformance.verdicts import refused, succeeds


def answer(op: str, status: int, body: Any, kind: str = "application/json") -> Answer:
    raw = body if isinstance(body, bytes) else json.dumps(body).encode()
    return Answer(op, "POST", "http://x/v1/...", status, kind, raw)


def test_a_success_body_is_validated_against_the_response_schema() -> None:
    assert succeeds(answer("ListTables", 200, {"tables": ["a"]})) == {"tables": ["a"]}
    with pytest.raises(CheckFailed, match="not a ListTablesResponse: tables"):
        succeeds(answer("ListTables", 200, {"names": ["a"]}))  # a required member missing
    with pytest.raises(CheckFailed, match="not a ListTablesResponse: tables.0"):
        succeeds(answer("ListTables", 200, {"tables": [1]}))  # a member of the wrong type
    with pytest.raises(CheckFailed, match="expected application/json"):
        succeeds(answer("ListTables", 200, {"tables": []}, kind="text/plain"))
    with pytest.raises(CheckFailed, match="expected 200"):
        succeeds(answer("ListTables", 201, {"tables": []}))
    with pytest.raises(
        CheckFailed, match=r"expected 200, got 404 NamespaceNotFound \(1\): no such namespace$"
    ):
        succeeds(answer("ListTables", 404, {"error": "no such namespace", "code": 1}))


def test_primitive_success_bodies() -> None:
    assert succeeds(answer("CountTableRows", 200, b"42", kind="text/plain")) == 42
    with pytest.raises(CheckFailed, match="integer"):
        succeeds(answer("CountTableRows", 200, b"many", kind="text/plain"))
    assert succeeds(answer("UpdateTableSchemaMetadata", 200, {"k": "v"})) == {"k": "v"}
    with pytest.raises(CheckFailed, match="map of strings"):
        succeeds(answer("UpdateTableSchemaMetadata", 200, {"metadata": {"k": "v"}}))
    assert succeeds(answer("TableExists", 200, b"")) is None  # the spec gives it no body


def test_query_table_answers_arrow() -> None:
    sink = pa.BufferOutputStream()
    table = pa.table({"id": [1, 2]})
    with pa.ipc.new_file(sink, table.schema) as writer:
        writer.write_table(table)
    body = sink.getvalue().to_pybytes()
    assert succeeds(answer("QueryTable", 200, body, kind="application/vnd.apache.arrow.file")) == table
    with pytest.raises(CheckFailed, match="not Arrow IPC"):
        succeeds(answer("QueryTable", 200, {"rows": 2}))


def test_an_error_is_its_status_code_and_shape_in_either_media_type() -> None:
    problem = {"type": "/errors/TableNotFound", "status": 404, "error": "gone", "code": 4}
    assert refused(answer("DescribeTable", 404, problem, "application/problem+json"), "TableNotFound")
    assert refused(answer("DescribeTable", 404, {"error": "gone", "code": 4}), "TableNotFound")
    with pytest.raises(CheckFailed, match=r"expected 404 TableNotFound \(4\), got 404 NamespaceNotFound"):
        refused(answer("DescribeTable", 404, {"code": 1}), "TableNotFound")
    with pytest.raises(CheckFailed, match=r"got 500 TableNotFound"):
        refused(answer("DescribeTable", 500, {"code": 4}), "TableNotFound")
    with pytest.raises(CheckFailed, match="not an ErrorResponse"):
        refused(answer("DescribeTable", 404, {"error": "gone"}), "TableNotFound")  # no code
    with pytest.raises(CheckFailed, match="error body is text/html"):
        refused(answer("DescribeTable", 404, b"<h1>404</h1>", "text/html"), "TableNotFound")
    with pytest.raises(CheckFailed, match="expected TableNotFound, got 200"):
        refused(answer("DescribeTable", 200, {"table": "t"}), "TableNotFound")


def test_unsupported_is_not_a_failure_in_either_spelling() -> None:
    with pytest.raises(NotSupported, match="no renames"):
        succeeds(answer("RenameTable", 406, {"error": "no renames", "code": 0}))
    with pytest.raises(NotSupported, match="no renames"):
        refused(answer("RenameTable", 406, {"error": "no renames", "code": 0}), "TableNotFound")
    # pylance's reference server: 500 Internal whose message says so
    reference = {"error": "Not supported: rename_table not implemented", "code": 18}
    with pytest.raises(NotSupported, match=r"as 500 Internal \(18\), not 406/0"):
        succeeds(answer("RenameTable", 500, reference))
    # any other Internal error is a failure
    with pytest.raises(CheckFailed, match="Internal"):
        refused(answer("RenameTable", 500, {"error": "boom", "code": 18}), "TableNotFound")
