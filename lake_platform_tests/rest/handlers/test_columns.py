"""Column changes over REST through pylance's own RestNamespace: each request is one catalog
schema-change commit (all its columns or none), with lake table alter's roles; every refusal is
the spec's error and changes nothing (the registry's schema and version stay)."""

from __future__ import annotations

import lance_namespace.errors as ns_errors
import pyarrow as pa
import pytest
from lance_namespace_urllib3_client.models import (
    AddColumnsEntry,
    AlterColumnsEntry,
    AlterTableAddColumnsRequest,
    AlterTableAlterColumnsRequest,
    AlterTableDropColumnsRequest,
    UpdateFieldMetadataResponse,
)

from lake_platform.catalog.arrow_io import schema_from_ipc
from lake_platform.naming import TableName
from lake_platform_tests.rest.conftest import RestLake
from lake_platform_tests.rest.handlers.events import NAME, TP, T, client, problem, version_and_columns


def test_add_rename_and_drop_columns_each_one_commit(events: RestLake) -> None:
    added = client(events).alter_table_add_columns(
        AlterTableAddColumnsRequest(
            id=T,
            new_columns=[
                AddColumnsEntry(name="double", expression="id * 2"),
                AddColumnsEntry(name="label", expression="concat(tag, '!')"),
            ],
        )
    )
    assert (
        version_and_columns(events) == (added.version, ["id", "tag", "double", "label"])
        and added.version == 2
    )
    table = events.catalog.reads.open_table(NAME).dataset.to_table()
    assert table.column("double").to_pylist() == [2, 4, 6]
    assert table.schema.field("double").type == pa.int64()
    assert table.column("label").to_pylist() == ["x!"] * 3
    renamed = client(events, "admin").alter_table_alter_columns(
        AlterTableAlterColumnsRequest(
            id=T,
            alterations=[
                AlterColumnsEntry(path="double", rename="twice"),
                AlterColumnsEntry(path="label", rename="l"),
            ],
        )
    )
    assert version_and_columns(events) == (3, ["id", "tag", "twice", "l"]) and renamed.version == 3
    dropped = client(events, "admin").alter_table_drop_columns(
        AlterTableDropColumnsRequest(id=T, columns=["twice", "l"])
    )
    assert version_and_columns(events) == (4, ["id", "tag"]) and dropped.version == 4
    log = {e.commit_id: e for e in events.catalog.reads.log(NAME)}
    assert log[dropped.transaction_id].operation == "drop-column"
    assert [e.operation for e in log.values() if e.to_version and e.to_version > 1] == [
        "add-columns",
        "rename-column",
        "drop-column",
    ]


def test_refusals_are_the_specs_errors_and_change_nothing(events: RestLake) -> None:
    before = version_and_columns(events)
    path = f"/v1/table/{TP}"
    cases = [
        ("add_columns", {"new_columns": [{"name": "id", "expression": "1"}]}, "writer", (400, 20)),
        ("add_columns", {"new_columns": [{"name": "x", "expression": "nope + 1"}]}, "writer", (400, 13)),
        ("add_columns", {"new_columns": [{"name": "x"}]}, "writer", (400, 13)),
        ("add_columns", {"new_columns": []}, "writer", (400, 13)),
        ("add_columns", {"new_columns": [{"name": "x", "expression": "1"}]}, "reader", (403, 15)),
        ("add_columns", {"new_columns": [{"name": "x", "virtual_column": {}}]}, "writer", (406, 0)),
        # a bad second entry refuses the first too
        (
            "alter_columns",
            {"alterations": [{"path": "tag", "rename": "t"}, {"path": "nope", "rename": "n"}]},
            "admin",
            (404, 12),
        ),
        ("alter_columns", {"alterations": [{"path": "tag", "rename": "id"}]}, "admin", (400, 20)),
        ("alter_columns", {"alterations": [{"path": "tag", "rename": "t"}]}, "writer", (403, 15)),
        (
            "alter_columns",
            {"alterations": [{"path": "tag", "data_type": {"type": "int64"}}]},
            "admin",
            (406, 0),
        ),
        ("alter_columns", {"alterations": [{"path": "tag"}]}, "admin", (400, 13)),
        ("drop_columns", {"columns": ["tag", "nope"]}, "admin", (404, 12)),
        ("drop_columns", {"columns": ["id", "tag"]}, "admin", (400, 20)),
        ("drop_columns", {"columns": ["tag"]}, "writer", (403, 15)),
        ("drop_columns", {"columns": []}, "admin", (400, 13)),
        ("drop_columns", {"columns": ["tag"]}, "other", (404, 4)),
    ]
    for route, body, who, expected in cases:
        assert problem(events.post(f"{path}/{route}", body, who=who)) == expected, (route, body)
    assert version_and_columns(events) == before


def test_a_protected_tables_column_is_not_dropped(events: RestLake) -> None:
    events.catalog.containers.set_protected(NAME, True)
    with pytest.raises(ns_errors.InvalidTableStateError):
        client(events, "admin").alter_table_drop_columns(AlterTableDropColumnsRequest(id=T, columns=["tag"]))
    assert version_and_columns(events)[1] == ["id", "tag"]


def test_update_field_metadata_merges_or_replaces_in_one_commit(events: RestLake) -> None:
    events.catalog.schemas.update_field_metadata(NAME, {"id": ({"unit": "count", "old": "1"}, False)})
    # pylance 14.0.2's RestNamespace does not send this operation: HTTP
    resp = events.post(
        f"/v1/table/{TP}/update_field_metadata",
        {
            "updates": [
                {"path": "id", "metadata": {"owner": "ops", "old": None}},
                {"path": "tag", "metadata": {"pii": "no"}, "replace": True},
            ]
        },
    )
    answer = UpdateFieldMetadataResponse.from_dict(resp.json())
    assert answer.fields == {"id": {"unit": "count", "owner": "ops"}, "tag": {"pii": "no"}}
    assert answer.version == version_and_columns(events)[0] == 3
    schema = events.catalog.reads.open_table(NAME).schema
    assert schema.field("id").metadata == {b"unit": b"count", b"owner": b"ops"}
    record = events.catalog.ctx.table(TableName.parse(NAME))[0]
    assert schema_from_ipc(record.schema_ipc).field("tag").metadata == {b"pii": b"no"}
    before = version_and_columns(events)
    path = f"/v1/table/{TP}/update_field_metadata"
    for body, who, expected in [
        ({"updates": [{"path": "nope", "metadata": {"a": "b"}}]}, "writer", (404, 12)),
        ({"updates": [{"path": "id", "metadata": {"a": 1}}]}, "writer", (400, 13)),
        ({"updates": [{"path": "id", "metadata": {"a": "b"}}]}, "reader", (403, 15)),
        ({"updates": []}, "writer", (400, 13)),
    ]:
        assert problem(events.post(path, body, who=who)) == expected, body
    assert version_and_columns(events) == before
