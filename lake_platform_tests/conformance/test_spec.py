"""The spec's responses as the kit reads them from the pinned generated client."""

from __future__ import annotations

from lake_platform.conformance.spec import model, spec_operations

PRIMITIVES = {"str", "int", "bytearray", "Dict[str, str]"}


def test_every_operation_has_a_success_and_the_error_schema() -> None:
    ops = spec_operations()
    assert len(ops) == 54
    for op in ops.values():
        assert op.responses["400"] == op.responses["5XX"] == "ErrorResponse", op.operation_id
        schema = op.success_schema
        assert schema is None or schema in PRIMITIVES or model(schema) is not None, op.operation_id


def test_success_statuses_and_schemas() -> None:
    ops = spec_operations()
    assert ops["DescribeTable"].success_status == 200
    assert ops["CreateMaterializedView"].success_status == 201
    assert ops["AlterTableBackfillColumns"].success_status == 202
    assert (
        ops["CreateTable"].responses["409"] == "ErrorResponse" and "409" not in ops["DescribeTable"].responses
    )
    assert ops["QueryTable"].success_schema == "bytearray"
    assert ops["UpdateTableSchemaMetadata"].success_schema == "Dict[str, str]"
