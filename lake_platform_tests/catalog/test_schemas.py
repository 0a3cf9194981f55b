"""``repair_schema`` (issue 49's ``lake table repair --schema``): a registration stored without a
schema (registered before schemas were stored) gets the schema Lance recorded at its registered
version, in one logged commit; a stored schema is left alone; bad input changes nothing."""

from __future__ import annotations

import pyarrow as pa
import pytest

from lake_platform.catalog.arrow_io import schema_from_ipc
from lake_platform.catalog.principals import Principal
from lake_platform.catalog.provenance import Provenance
from lake_platform.errors import InvalidInput, PermissionDenied, TableNotFound
from lake_platform.naming import TableName
from lake_platform.registry import keys
from lake_platform.registry.records import TableRecord, decode
from lake_platform_tests.catalog.conftest import Lake, state

T = "p.w.ns.t"
SCHEMA = pa.schema([pa.field("id", pa.int64(), nullable=False), pa.field("name", pa.string())])


def forget_schema(lake: Lake) -> None:
    """The registration as one written before schemas were stored."""
    item = lake.catalog.store.get(keys.table(TableName.parse(T)))
    assert item is not None
    record = decode(TableRecord, item.value, item.key)
    lake.catalog.store.compare_and_swap(
        item.key, item.revision, record.model_copy(update={"schema_ipc_b64": ""}).encode()
    )


@pytest.fixture
def unschema(lake: Lake) -> Lake:
    data = pa.table([pa.array([1, 2], pa.int64()), ["a", "b"]], schema=SCHEMA)
    lake.catalog.tables.create_table(T, data.to_reader())
    lake.catalog.tables.append(T, data.slice(0, 1).to_reader())
    forget_schema(lake)
    assert lake.catalog.reads.describe_table(T, with_stats=False).schema == []
    return lake


def test_the_schema_is_backfilled_from_the_registered_version(unschema: Lake) -> None:
    c = unschema.catalog
    version = c.reads.open_table(T).record.current_version
    result = c.schemas.repair_schema(T)
    assert (result.repaired, result.version, result.columns) == (True, version, ("id", "name"))
    record = c.reads.open_table(T).record
    assert schema_from_ipc(record.schema_ipc).equals(SCHEMA)
    assert record.current_version == version  # no new version: data untouched
    entry = c.reads.history(T)[-1]
    assert entry.operation == "repair schema" and entry.detail["version"] == version
    assert [col["name"] for col in c.reads.describe_table(T, with_stats=False).schema] == ["id", "name"]
    c.tables.append(T, pa.table([pa.array([3], pa.int64()), ["c"]], schema=SCHEMA).to_reader())


def test_a_stored_schema_is_left_alone(unschema: Lake) -> None:
    unschema.catalog.schemas.repair_schema(T)
    before = state(unschema)
    again = unschema.catalog.schemas.repair_schema(T)
    assert not again.repaired and again.columns == ()
    assert state(unschema) == before


@pytest.mark.parametrize(
    ("name", "by", "error"),
    [
        ("p.w.ns.missing", None, TableNotFound),
        (T, Principal("ray", "user", "p", "reader"), PermissionDenied),
        ("p.w.ns.Bad", None, InvalidInput),
    ],
)
def test_bad_input_changes_nothing(unschema: Lake, name: str, by: Principal | None, error: type) -> None:
    before = state(unschema)
    with pytest.raises(error):
        unschema.catalog.schemas.repair_schema(name, by=Provenance(principal=by))
    assert state(unschema) == before
