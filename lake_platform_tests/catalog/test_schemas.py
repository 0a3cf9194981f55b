"""``repair_schema`` (issue 49's ``lake table repair --schema``): a registration stored without a
schema (registered before schemas were stored) gets the schema Lance recorded at its registered
version, in one logged commit; a stored schema is left alone; bad input changes nothing."""

from __future__ import annotations

from collections.abc import Callable

import pyarrow as pa
import pytest

from lake_platform.catalog.arrow_io import schema_from_ipc
from lake_platform.catalog.catalog import Catalog
from lake_platform.catalog.principals import Principal
from lake_platform.catalog.provenance import Provenance
from lake_platform.catalog.results import CommitResult
from lake_platform.errors import InvalidInput, PermissionDenied, TableNotFound
from lake_platform.naming import TableName
from lake_platform.registry import keys
from lake_platform.registry.records import TableRecord, decode
from lake_platform_tests.catalog.conftest import Lake, sent_at_once, staged_manifests, state

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


@pytest.mark.parametrize(
    ("change", "operation"),
    [
        (lambda c, by: c.schemas.update_schema_metadata(T, {"owner": "etl"}, by=by), "schema-metadata"),
        (
            lambda c, by: c.schemas.update_field_metadata(T, {"name": ({"unit": "cm"}, False)}, by=by),
            "field-metadata",
        ),
    ],
)
def test_one_metadata_change_sent_twice_at_once_lands_once_and_both_answer_it(
    lake: Lake, change: Callable[[Catalog, Provenance], tuple[CommitResult, object]], operation: str
) -> None:
    """Two catalogs (two servers) given one commit id at once: whichever takes the lease second
    finds the first change landed and answers it (the same version and metadata); Lance never
    commits it a second time."""
    lake.catalog.tables.create_table(
        T, pa.table([pa.array([1], pa.int64()), ["a"]], schema=SCHEMA).to_reader()
    )
    answers = sent_at_once(lake, lambda c: change(c, Provenance(commit_id="sent-twice-0004")))
    assert len(answers) == 2 and all(isinstance(a, tuple) for a in answers), answers
    (first, first_metadata), (second, second_metadata) = answers  # type: ignore[misc]
    assert (first.commit_id, first.to_version, first_metadata) == (
        second.commit_id,
        second.to_version,
        second_metadata,
    )
    assert [e.operation for e in lake.catalog.reads.log(T)] == ["create", operation]
    assert staged_manifests(lake) == []  # Lance ran it once
