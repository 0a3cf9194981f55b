"""Schema evolution fills what is missing (issue 49): under ``add_columns`` or ``widen``, an input
that lacks a nullable column the table has gains it as nulls in the same commit (older producers
keep working the day a newer one adds a field); a missing non-nullable column is refused with a
TableSchemaValidationError naming it, and nothing changes. Under ``strict`` both are refused.
"""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from lake_platform.catalog.arrow_io import schema_from_ipc
from lake_platform.catalog.evolution import plan, plan_batch
from lake_platform.errors import TableSchemaValidationError
from lake_platform.maintenance import sources
from lake_platform_tests.catalog.conftest import Lake, state

T = "p.w.ns.t"

#: The table: ``id`` not null, ``name`` nullable.
SCHEMA = pa.schema([pa.field("id", pa.int64(), nullable=False), pa.field("name", pa.string())])


def rows(ids: list[int], **extra: pa.Array) -> pa.Table:
    columns = {"id": pa.array(ids, pa.int64()), "name": pa.array([f"n{i}" for i in ids]), **extra}
    fields = [SCHEMA.field("id"), SCHEMA.field("name")] + [pa.field(k, v.type) for k, v in extra.items()]
    return pa.table(list(columns.values()), schema=pa.schema(fields))


def without(data: pa.Table, *names: str) -> pa.Table:
    return data.drop_columns(list(names))


@pytest.fixture
def evolved(lake: Lake) -> Lake:
    """Table T that gained the nullable column ``bonus`` through ``add_columns``."""
    lake.catalog.tables.create_table(T, rows([1]).to_reader())
    lake.catalog.policies.set_policy(T, {"schema_evolution": "add_columns"})
    lake.catalog.tables.append(T, rows([2], bonus=pa.array([2.5])).to_reader())
    assert schema_of(lake).field("bonus").nullable
    return lake


def schema_of(lake: Lake) -> pa.Schema:
    return schema_from_ipc(lake.catalog.reads.open_table(T).record.schema_ipc)


def table_rows(lake: Lake) -> list[dict[str, object]]:
    return lake.catalog.reads.open_table(T).to_reader().read_all().sort_by("id").to_pylist()


# -- the plan ---------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["add_columns", "widen"])
def test_the_plan_fills_a_missing_nullable_column(mode: str) -> None:
    table = SCHEMA.append(pa.field("bonus", pa.float64()))
    change = plan(table, SCHEMA, mode, T)
    assert change.target.equals(table) and not change  # the table's schema does not change
    assert change.filled == ("bonus",) and change.optional == {"bonus"}
    assert change.describe()["filled_columns"] == ["bonus"]


def test_strict_still_refuses_a_missing_nullable_column_and_says_what_would_fill_it() -> None:
    table = SCHEMA.append(pa.field("bonus", pa.float64()))
    with pytest.raises(TableSchemaValidationError, match="missing column.*bonus.*add_columns or widen"):
        plan(table, SCHEMA, "strict", T)


@pytest.mark.parametrize("mode", ["strict", "add_columns", "widen"])
def test_a_missing_non_nullable_column_is_refused_by_name(mode: str) -> None:
    with pytest.raises(TableSchemaValidationError, match="missing non-nullable column.*id"):
        plan(SCHEMA, pa.schema([pa.field("name", pa.string())]), mode, T)


def test_a_batch_fills_for_each_input_and_adds_for_the_others() -> None:
    table = SCHEMA.append(pa.field("bonus", pa.float64()))
    old = SCHEMA  # an older producer: no bonus
    new = table.append(pa.field("extra", pa.int64()))  # a newer one: bonus and extra
    change = plan_batch(table, [old, new], "add_columns", T)
    assert [f.name for f in change.added] == ["extra"]
    assert change.filled == ("bonus",) and change.optional == {"bonus", "extra"}


# -- through the catalog ----------------------------------------------------------------------


def test_an_append_without_the_added_column_lands_with_nulls_in_one_commit(evolved: Lake) -> None:
    before = evolved.catalog.reads.open_table(T).record.current_version
    result = evolved.catalog.tables.append(T, rows([3]).to_reader())
    assert (result.from_version, result.to_version) == (before, before + 1)  # one version, one commit
    entries = [e for e in evolved.catalog.reads.log(T) if e.commit_id == result.commit_id]
    assert [e.operation for e in entries] == ["append"]
    assert entries[0].detail["filled_columns"] == ["bonus"]
    assert table_rows(evolved) == [
        {"id": 1, "name": "n1", "bonus": None},
        {"id": 2, "name": "n2", "bonus": 2.5},
        {"id": 3, "name": "n3", "bonus": None},
    ]
    assert schema_of(evolved).names == ["id", "name", "bonus"]


def test_a_missing_non_nullable_column_changes_nothing(evolved: Lake) -> None:
    before = state(evolved)
    with pytest.raises(TableSchemaValidationError, match="missing non-nullable column.*id") as raised:
        evolved.catalog.tables.append(T, without(rows([3]), "id").to_reader())
    assert "bonus" not in str(raised.value)  # bonus alone would have been filled
    assert state(evolved) == before


def test_widen_fills_too(evolved: Lake) -> None:
    evolved.catalog.policies.set_policy(T, {"schema_evolution": "widen"})
    evolved.catalog.tables.append(T, rows([3]).to_reader())
    assert [r["bonus"] for r in table_rows(evolved)] == [None, 2.5, None]


def test_strict_refuses_and_changes_nothing(evolved: Lake) -> None:
    evolved.catalog.policies.set_policy(T, {"schema_evolution": "strict"})
    before = state(evolved)
    with pytest.raises(TableSchemaValidationError, match="missing column.*bonus"):
        evolved.catalog.tables.append(T, rows([3]).to_reader())
    assert state(evolved) == before


def test_a_transaction_fills_too(evolved: Lake) -> None:
    with evolved.catalog.transaction() as tx:
        tx.append(T, rows([3]).to_reader())
    assert [r["bonus"] for r in table_rows(evolved)] == [None, 2.5, None]


def test_files_without_the_column_are_ingested_with_nulls(evolved: Lake, tmp_path: Path) -> None:
    """The path ``lake ingest`` and the inbox take: files planned together, each conformed."""
    old, new = tmp_path / "old.parquet", tmp_path / "new.parquet"
    pq.write_table(rows([3]), old)
    pq.write_table(rows([4], bonus=pa.array([4.5])), new)
    srcs = [sources.describe(old), sources.describe(new)]
    readers = sources.open_all(srcs)
    change = evolved.catalog.schemas.plan_input(T, [r.schema for r in readers])
    evolved.catalog.tables.append(T, sources.chain(srcs, readers, change.target, change.optional))
    assert [r["bonus"] for r in table_rows(evolved)] == [None, 2.5, None, 4.5]
