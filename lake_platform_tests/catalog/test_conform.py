"""Inputs conformed to the table's schema, under every ``schema_evolution`` policy: only lossless
conversions, narrower inputs widened without a table change, columns in any order; strings never
parsed into numbers, narrowing and duplicate columns refused before anything is written; CSV and
JSON lines read straight into the table's types."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from lake_platform.catalog.conform import widens
from lake_platform.catalog.evolution import table_widens
from lake_platform.errors import TableSchemaValidationError
from lake_platform.maintenance import sources
from lake_platform.naming import TableName
from lake_platform_tests.catalog.conftest import Lake, state
from lake_platform_tests.catalog.schema_tables import T, base, current_schema, policy, rows_of, seed, table


@pytest.fixture
def seeded(lake: Lake) -> Lake:
    return seed(lake)


# -- the type rules ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("src", "dst", "ok"),
    [
        (pa.int8(), pa.int64(), True),
        (pa.int32(), pa.int64(), True),
        (pa.uint32(), pa.int64(), True),
        (pa.int32(), pa.float64(), True),
        (pa.float32(), pa.float64(), True),
        (pa.string(), pa.large_string(), True),
        (pa.null(), pa.int64(), True),
        (pa.int64(), pa.int32(), False),  # narrowing: used to start and fail on overflow
        (pa.float64(), pa.float32(), False),
        (pa.large_string(), pa.string(), False),
        (pa.int64(), pa.float64(), False),  # not every int64 is exact as a double
        (pa.uint64(), pa.int64(), False),
        (pa.int64(), pa.uint64(), False),
        (pa.string(), pa.int64(), False),  # never parsed
        (pa.string(), pa.float64(), False),
        (pa.int64(), pa.string(), False),
    ],
)
def test_lossless_conversions_only(src: pa.DataType, dst: pa.DataType, ok: bool) -> None:
    assert widens(src, dst) is ok


def test_a_table_column_widens_within_its_kind_only() -> None:
    assert table_widens(pa.int32(), pa.int64())
    assert table_widens(pa.float32(), pa.float64())
    assert table_widens(pa.string(), pa.large_string())
    assert not table_widens(pa.int32(), pa.float64())  # a change of kind
    assert not table_widens(pa.int64(), pa.int32())


# -- conform: narrowing and parsing refused up front (all policies) ---------------------------


@pytest.mark.parametrize("mode", ["strict", "add_columns", "widen"])
def test_strings_are_never_parsed_into_numbers(seeded: Lake, mode: str) -> None:
    policy(seeded, mode)
    before = state(seeded)
    for bad in (
        table(id=pa.array(["3"]), score=pa.array([2.5], pa.float32()), name=pa.array(["c"])),
        table(id=pa.array([3], pa.int32()), score=pa.array(["2.5"]), name=pa.array(["c"])),
    ):
        with pytest.raises(TableSchemaValidationError, match="never parsed"):
            seeded.catalog.tables.append(T, bad)
    assert state(seeded) == before


@pytest.mark.parametrize("mode", ["strict", "add_columns"])
def test_narrowing_is_refused_before_anything_is_written(seeded: Lake, mode: str) -> None:
    """An int64 column into the table's int32 used to be cast batch by batch and fail on the
    first value over 2**31, after the write had started."""
    policy(seeded, mode)
    before = state(seeded)
    wide = table(
        id=pa.array([1, 2**40], pa.int64()),
        score=pa.array([1.0, 2.0], pa.float32()),
        name=pa.array(["x", "y"]),
    )
    with pytest.raises(TableSchemaValidationError, match="column id is int64, wider than the table's int32"):
        seeded.catalog.tables.append(T, wide)
    assert state(seeded) == before


def test_a_parquet_file_with_string_ids_is_refused_by_lake_ingest_path(seeded: Lake, tmp_path: Path) -> None:
    """The regression of issue 16: a Parquet file whose ``id`` is a string was ingested into the
    table's integer column (the values parsed)."""
    path = tmp_path / "ids.parquet"
    pq.write_table(pa.table({"id": ["7"], "score": pa.array([1.0], pa.float32()), "name": ["q"]}), path)
    src = sources.describe(path)
    readers = sources.open_all([src])
    before = state(seeded)
    with pytest.raises(TableSchemaValidationError, match="ids.parquet") as raised:
        change = seeded.catalog.schemas.plan_input(T, [r.schema for r in readers], labels=[src.label])
        seeded.catalog.tables.append(T, sources.chain([src], readers, change.target, change.optional))
    assert "string" in str(raised.value)
    # And the lower layer alone refuses it too (no parsing cast anywhere).
    with pytest.raises(TableSchemaValidationError, match="never narrowed or parsed"):
        sources.open_many([sources.describe(path)], current_schema(seeded)).read_all()
    assert state(seeded) == before


def test_narrower_inputs_are_widened_without_a_table_change(seeded: Lake) -> None:
    before_version = seeded.catalog.reads.open_table(T).record.current_version
    seeded.catalog.tables.append(
        T, table(id=pa.array([3], pa.int8()), score=pa.array([2.5], pa.float16()), name=pa.array(["c"]))
    )
    record = seeded.catalog.reads.open_table(T).record
    assert record.current_version == before_version + 1
    assert current_schema(seeded).field("id").type == pa.int32()
    assert rows_of(seeded)["id"] == [1, 2, 3]


def test_columns_may_come_in_any_order(seeded: Lake) -> None:
    seeded.catalog.tables.append(
        T, table(name=pa.array(["c"]), id=pa.array([3], pa.int32()), score=pa.array([2.5], pa.float32()))
    )
    assert rows_of(seeded)["name"] == ["a", "b", "c"]


def test_an_input_of_the_tables_own_schema_plans_as_the_full_plan_does(seeded: Lake) -> None:
    """An input whose schema is the table's skips the planner (the small-append fast path):
    it must plan exactly what the planner does, also once the table's schema has changed."""
    from lake_platform.catalog.evolution import plan_batch

    def both(schema: pa.Schema) -> None:
        tname = TableName.parse(T)
        fast = seeded.catalog.schemas.plan_schema(tname, current_schema(seeded), [schema])
        full = plan_batch(current_schema(seeded), [schema], "strict", T)
        assert fast.target.equals(full.target, check_metadata=True)
        assert (bool(fast), fast.added, fast.widened) == (bool(full), full.added, full.widened)

    both(current_schema(seeded))
    both(current_schema(seeded).with_metadata({b"from": b"a file"}))
    policy(seeded, "add_columns")
    seeded.catalog.tables.append(T, base(extra=pa.array([9.0])))
    both(current_schema(seeded))  # the evolved schema, not the one planned against before
    # An input of the old schema is planned in full (it lacks the new column): filled with nulls.
    seeded.catalog.tables.append(T, base(4))
    assert rows_of(seeded)["extra"] == [None, None, 9.0, None]


def test_duplicate_input_columns_are_refused(seeded: Lake) -> None:
    policy(seeded, "add_columns")
    before = state(seeded)
    dup = pa.Table.from_arrays(
        [pa.array([3], pa.int32()), pa.array([2.5], pa.float32()), pa.array(["c"]), pa.array(["d"])],
        names=["id", "score", "name", "name"],
    )
    with pytest.raises(TableSchemaValidationError, match="duplicate column names"):
        seeded.catalog.tables.append(T, dup.to_reader())
    assert state(seeded) == before


# -- text formats read the table's columns with the table's types -----------------------------------


def _ingest(lake: Lake, *paths: Path) -> object:
    srcs = [sources.describe(p) for p in paths]
    readers = sources.open_all(srcs, lake.catalog.schemas.table_schema(T))
    change = lake.catalog.schemas.plan_input(T, [r.schema for r in readers], labels=[s.label for s in srcs])
    return lake.catalog.tables.append(T, sources.chain(srcs, readers, change.target, change.optional))


def test_csv_and_json_lines_are_read_with_the_table_types(seeded: Lake, tmp_path: Path) -> None:
    """A CSV has no types: guessed, its ``id`` would be int64 (wider than the table's int32) and a
    column of whole numbers would not be a float. Parsed straight into the table's types, both
    fit; the new column's type is inferred (under add_columns)."""
    policy(seeded, "add_columns")
    (tmp_path / "a.csv").write_text("id,score,name,extra\n3,2,c,7\n")
    (tmp_path / "b.jsonl").write_text('{"id": 4, "score": 1, "name": "d"}\n')
    _ingest(seeded, tmp_path / "a.csv", tmp_path / "b.jsonl")
    assert current_schema(seeded).field("id").type == pa.int32()
    assert current_schema(seeded).field("extra").type == pa.int64()
    data = rows_of(seeded)
    assert data["score"] == [0.5, 1.5, 2.0, 1.0] and data["extra"] == [None, None, 7, None]


def test_a_csv_value_that_does_not_fit_the_table_type_is_refused_unquoted(
    seeded: Lake, tmp_path: Path
) -> None:
    (tmp_path / "big.csv").write_text("id,score,name\n1,1,a\n3000000000,1,b\n")
    before = state(seeded)
    with pytest.raises(TableSchemaValidationError, match="big.csv.*does not convert to int32") as raised:
        _ingest(seeded, tmp_path / "big.csv")
    assert "3000000000" not in str(raised.value)
    assert state(seeded) == before
