"""Schema evolution, governed by the table's ``schema_evolution`` policy (issue 16).

Each policy value meets inputs that add a column, widen a type, narrow a type, carry strings
where numbers are, and rename a column. Whatever is refused is refused before anything is
written: the registry and the files are exactly as before. What is accepted lands in one
registry transaction with the rows (never a schema step alone).
"""

from __future__ import annotations

import signal
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from lake_platform.catalog.arrow_io import schema_from_ipc
from lake_platform.catalog.conform import widens
from lake_platform.catalog.evolution import plan, table_widens
from lake_platform.catalog.provenance import Provenance
from lake_platform.errors import (
    InvalidInput,
    InvalidTableState,
    TableColumnNotFound,
    TableSchemaValidationError,
)
from lake_platform.maintenance import sources
from lake_platform.naming import TableName
from lake_platform.registry import keys
from lake_platform.registry.records import TableRecord, decode
from lake_platform_tests.catalog.conftest import Lake, state

T = "p.w.ns.t"


def table(**columns: pa.Array) -> pa.RecordBatchReader:
    return pa.table(columns).to_reader()


@pytest.fixture
def seeded(lake: Lake) -> Lake:
    lake.catalog.tables.create_table(
        T,
        table(
            id=pa.array([1, 2], pa.int32()),
            score=pa.array([0.5, 1.5], pa.float32()),
            name=pa.array(["a", "b"], pa.string()),
        ),
    )
    return lake


def policy(lake: Lake, mode: str) -> None:
    lake.catalog.policies.set_policy(T, {"schema_evolution": mode})


def current_schema(lake: Lake) -> pa.Schema:
    return schema_from_ipc(lake.catalog.reads.open_table(T).record.schema_ipc)


def rows_of(lake: Lake) -> dict[str, list[object]]:
    snap = lake.catalog.reads.open_table(T)
    return snap.to_reader().read_all().sort_by("id").to_pydict()


def base(n: int = 3, **extra: pa.Array) -> pa.RecordBatchReader:
    return table(
        id=pa.array([n], pa.int32()),
        score=pa.array([2.5], pa.float32()),
        name=pa.array(["c"], pa.string()),
        **extra,
    )


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


# -- strict ------------------------------------------------------------------------------------


def test_strict_is_the_default_and_refuses_a_new_column(seeded: Lake) -> None:
    assert seeded.catalog.policies.effective_policy(T).policy.schema_evolution == "strict"
    before = state(seeded)
    with pytest.raises(TableSchemaValidationError, match="1 unknown column.*policy is strict"):
        seeded.catalog.tables.append(T, base(extra=pa.array(["e"])))
    assert state(seeded) == before


def test_strict_refuses_a_wider_type(seeded: Lake) -> None:
    before = state(seeded)
    with pytest.raises(TableSchemaValidationError, match="does not allow widening"):
        seeded.catalog.tables.append(
            T, table(id=pa.array([3], pa.int64()), score=pa.array([2.5], pa.float32()), name=pa.array(["c"]))
        )
    assert state(seeded) == before


# -- add_columns -------------------------------------------------------------------------------


def test_add_columns_adds_the_column_in_the_same_registry_commit(seeded: Lake) -> None:
    policy(seeded, "add_columns")
    old = seeded.catalog.reads.open_table(T).record
    result = seeded.catalog.tables.append(T, base(extra=pa.array([9.0])))
    record = seeded.catalog.reads.open_table(T).record
    # Two Lance versions (the column, then the rows), registered by one transaction: one commit.
    assert (result.from_version, result.to_version) == (old.current_version, old.current_version + 2)
    entries = [e for e in seeded.catalog.reads.log(T) if e.commit_id == result.commit_id]
    assert [e.operation for e in entries] == ["add-columns", "append"]
    assert len({e.at_ms for e in entries}) >= 1 and entries[-1].rows_added == 1
    assert entries[-1].detail["added_columns"] == {"extra": "double"}
    assert current_schema(seeded).names == ["id", "score", "name", "extra"]
    assert current_schema(seeded).field("extra").nullable
    assert rows_of(seeded)["extra"] == [None, None, 9.0]  # old rows read as null
    assert record.current_version == result.to_version


def test_a_non_nullable_new_column_is_added_as_nullable(seeded: Lake) -> None:
    policy(seeded, "add_columns")
    schema = pa.schema(
        [
            pa.field("id", pa.int32()),
            pa.field("score", pa.float32()),
            pa.field("name", pa.string()),
            pa.field("extra", pa.int64(), nullable=False),
        ]
    )
    data = pa.table([[3], [2.5], ["c"], [7]], schema=schema)
    seeded.catalog.tables.append(T, data.to_reader())
    assert current_schema(seeded).field("extra").nullable
    assert rows_of(seeded)["extra"] == [None, None, 7]


def test_add_columns_still_refuses_widening_and_narrowing(seeded: Lake) -> None:
    policy(seeded, "add_columns")
    before = state(seeded)
    with pytest.raises(TableSchemaValidationError, match="does not allow widening"):
        seeded.catalog.tables.append(
            T, table(id=pa.array([3], pa.int64()), score=pa.array([2.5], pa.float32()), name=pa.array(["c"]))
        )
    assert state(seeded) == before


def test_a_rename_is_never_taken_for_one(seeded: Lake) -> None:
    """A file that renamed ``name`` to ``label`` looks like a missing and a new column: refused
    under ``strict``; under ``add_columns`` and ``widen`` ``label`` is added and the nullable
    ``name`` reads null for the file's rows (filled, never dropped: the old rows keep theirs).
    ``lake table alter rename-column`` is the explicit way; a renamed non-nullable column is
    refused under every policy (test_evolution)."""
    renamed = table(id=pa.array([3], pa.int32()), score=pa.array([2.5], pa.float32()), label=pa.array(["c"]))
    before = state(seeded)
    with pytest.raises(TableSchemaValidationError, match="missing column.*name"):
        seeded.catalog.tables.append(T, renamed)
    assert state(seeded) == before
    policy(seeded, "add_columns")
    seeded.catalog.tables.append(T, renamed)
    data = rows_of(seeded)
    assert data["name"] == ["a", "b", None] and data["label"] == [None, None, "c"]


def test_a_failure_after_the_schema_step_commits_nothing(seeded: Lake) -> None:
    """The column is a Lance commit the namespace holds back: when the append after it fails,
    the registry never heard of either, and the next write lands normally."""
    policy(seeded, "add_columns")
    before_version = seeded.catalog.reads.open_table(T).record.current_version
    before_schema = current_schema(seeded)

    def fail(point: str) -> None:
        if point == "append:after-evolve":
            raise OSError("storage went away")

    broken = seeded.new_catalog(hook=fail)
    with pytest.raises(Exception):  # noqa: B017 - whatever the engine failure becomes
        broken.tables.append(T, base(extra=pa.array([9.0])))
    broken.close()
    record = seeded.catalog.reads.open_table(T).record
    assert record.current_version == before_version
    assert current_schema(seeded) == before_schema
    assert [e.operation for e in seeded.catalog.reads.log(T)][-1] == "policy set"
    result = seeded.catalog.tables.append(T, base(4, extra=pa.array([1.0])))
    assert result.from_version == before_version
    assert rows_of(seeded)["extra"] == [None, None, 1.0]


# -- widen -------------------------------------------------------------------------------------


def test_widen_changes_the_column_type_with_the_rows(seeded: Lake) -> None:
    policy(seeded, "widen")
    result = seeded.catalog.tables.append(
        T,
        table(
            id=pa.array([2**40], pa.int64()),
            score=pa.array([2.5], pa.float64()),
            name=pa.array(["c"], pa.large_string()),
            extra=pa.array(["new"]),
        ),
    )
    schema = current_schema(seeded)
    assert [schema.field(n).type for n in ("id", "score", "name", "extra")] == [
        pa.int64(),
        pa.float64(),
        pa.large_string(),
        pa.string(),
    ]
    entries = [e.operation for e in seeded.catalog.reads.log(T) if e.commit_id == result.commit_id]
    assert entries == ["widen-columns", "add-columns", "append"]
    data = rows_of(seeded)
    assert data["id"] == [1, 2, 2**40] and data["score"] == [0.5, 1.5, 2.5]
    assert data["extra"] == [None, None, "new"]
    snap = seeded.catalog.reads.open_table(T)
    assert snap.dataset.schema.field("id").type == pa.int64()  # Lance agrees with the registry


def test_widen_never_narrows_nor_changes_kind(seeded: Lake) -> None:
    policy(seeded, "widen")
    seeded.catalog.tables.append(
        T, table(id=pa.array([3], pa.int64()), score=pa.array([2.5], pa.float32()), name=pa.array(["c"]))
    )
    before = state(seeded)
    with pytest.raises(TableSchemaValidationError, match="no lossless conversion"):
        seeded.catalog.tables.append(
            T, table(id=pa.array([4], pa.int64()), score=pa.array([1], pa.int64()), name=pa.array(["d"]))
        )
    with pytest.raises(TableSchemaValidationError):
        seeded.catalog.tables.append(
            T, table(id=pa.array([4], pa.int64()), score=pa.array([1.0], pa.float32()), name=pa.array([1]))
        )
    assert state(seeded) == before
    # The int32 file into the now-int64 column is a plain lossless cast.
    seeded.catalog.tables.append(T, base(5))
    assert rows_of(seeded)["id"] == [1, 2, 3, 5]


def test_a_batch_of_files_may_add_different_columns(seeded: Lake, tmp_path: Path) -> None:
    policy(seeded, "add_columns")
    a, b = tmp_path / "a.parquet", tmp_path / "b.parquet"
    pq.write_table(
        pa.table(
            {"id": pa.array([3], pa.int32()), "score": pa.array([1.0], pa.float32()), "name": ["c"], "x": [1]}
        ),
        a,
    )
    pq.write_table(
        pa.table(
            {
                "id": pa.array([4], pa.int32()),
                "score": pa.array([1.0], pa.float32()),
                "name": ["d"],
                "y": ["why"],
            }
        ),
        b,
    )
    srcs = [sources.describe(a), sources.describe(b)]
    readers = sources.open_all(srcs)
    change = seeded.catalog.schemas.plan_input(T, [r.schema for r in readers])
    assert change.optional == {"x", "y"}
    seeded.catalog.tables.append(T, sources.chain(srcs, readers, change.target, change.optional))
    data = rows_of(seeded)
    assert data["x"] == [None, None, 1, None] and data["y"] == [None, None, None, "why"]


def test_plan_refuses_an_unknown_mode() -> None:
    schema = pa.schema([("id", pa.int64())])
    with pytest.raises(TableSchemaValidationError, match="unknown schema_evolution"):
        plan(schema, schema, "loose", T)


def test_the_policy_value_is_validated(seeded: Lake) -> None:
    before = state(seeded)
    with pytest.raises(InvalidInput, match="schema_evolution.*'strict', 'add_columns' or 'widen'"):
        seeded.catalog.policies.set_policy(T, {"schema_evolution": "loose"})
    assert state(seeded) == before


def test_the_policy_resolves_like_the_others(seeded: Lake) -> None:
    seeded.catalog.policies.set_policy("p.w", {"schema_evolution": "add_columns"})
    resolved = seeded.catalog.policies.effective_policy(T)
    assert (resolved.policy.schema_evolution, resolved.source) == ("add_columns", "p.w")
    seeded.catalog.tables.append(T, base(extra=pa.array([1.0])))  # the warehouse's record applies
    seeded.catalog.policies.set_policy(T, {"retain_versions": 5})  # a table record wins whole: strict again
    with pytest.raises(TableSchemaValidationError, match="strict"):
        seeded.catalog.tables.append(
            T,
            table(
                id=pa.array([4], pa.int32()),
                score=pa.array([1.0], pa.float32()),
                name=pa.array(["d"]),
                extra=pa.array([1.0]),
                more=pa.array([1]),
            ),
        )


# -- explicit changes: add, drop, rename ----------------------------------------------------------


def test_alter_add_drop_rename_are_registry_commits(seeded: Lake) -> None:
    v = seeded.catalog.reads.open_table(T).record.current_version
    added = seeded.catalog.alter.add_column(T, "note", "string", by=Provenance(actor="ops"))
    renamed = seeded.catalog.alter.rename_column(T, "note", "remark", by=Provenance(actor="ops"))
    dropped = seeded.catalog.alter.drop_column(T, "score", by=Provenance(actor="ops"))
    assert [r.to_version for r in (added, renamed, dropped)] == [v + 1, v + 2, v + 3]
    assert current_schema(seeded).names == ["id", "name", "remark"]
    assert seeded.catalog.reads.open_table(T).dataset.schema.names == ["id", "name", "remark"]
    log = [(e.operation, e.actor, e.detail) for e in seeded.catalog.reads.log(T)][-3:]
    assert log == [
        ("add-column", "ops", {"column": "note", "type": "string"}),
        ("rename-column", "ops", {"column": "note", "new_name": "remark"}),
        ("drop-column", "ops", {"column": "score"}),
    ]
    assert rows_of(seeded) == {"id": [1, 2], "name": ["a", "b"], "remark": [None, None]}
    # Time travel still sees the dropped column.
    assert "score" in seeded.catalog.reads.open_table(T, version=v).dataset.schema.names
    # And appends follow the new schema.
    seeded.catalog.tables.append(
        T, table(id=pa.array([3], pa.int32()), name=pa.array(["c"]), remark=pa.array(["r"]))
    )
    assert rows_of(seeded)["remark"] == [None, None, "r"]


@pytest.mark.parametrize(
    ("call", "error", "match"),
    [
        (lambda c: c.alter.add_column(T, "name", "string"), TableSchemaValidationError, "already exists"),
        (lambda c: c.alter.add_column(T, "n2", "varchar"), InvalidInput, "unknown column type"),
        (lambda c: c.alter.add_column(T, "", "string"), InvalidInput, "invalid column name"),
        (lambda c: c.alter.add_column(T, "a.b", "string"), InvalidInput, "nested"),
        (lambda c: c.alter.drop_column(T, "nope"), TableColumnNotFound, "no column nope"),
        (lambda c: c.alter.rename_column(T, "nope", "x"), TableColumnNotFound, "no column nope"),
        (lambda c: c.alter.rename_column(T, "id", "name"), TableSchemaValidationError, "already exists"),
        (lambda c: c.alter.rename_column(T, "id", " x"), InvalidInput, "invalid new column name"),
        (lambda c: c.alter.add_column("p.w.ns.missing", "x", "string"), Exception, "missing"),
    ],
)
def test_bad_alter_input_changes_nothing(seeded: Lake, call: object, error: type, match: str) -> None:
    before = state(seeded)
    with pytest.raises(error, match=match):
        call(seeded.catalog)  # type: ignore[operator]
    assert state(seeded) == before


def test_dropping_a_column_of_a_protected_table_is_refused(seeded: Lake) -> None:
    seeded.catalog.containers.set_protected(T)
    before = state(seeded)
    with pytest.raises(InvalidTableState, match="protected"):
        seeded.catalog.alter.drop_column(T, "score")
    assert state(seeded) == before
    seeded.catalog.alter.add_column(T, "note", "int64")  # adding hides nothing: allowed
    assert "note" in current_schema(seeded).names


def test_the_last_column_cannot_be_dropped(lake: Lake) -> None:
    lake.catalog.tables.create_table(T, table(id=pa.array([1])))
    before = state(lake)
    with pytest.raises(TableSchemaValidationError, match="only column"):
        lake.catalog.alter.drop_column(T, "id")
    assert state(lake) == before


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


def test_an_alter_between_planning_and_the_lease_refuses_the_append(
    seeded: Lake, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The append was planned on the schema it read first; a column renamed by another writer
    before the append holds the lease makes it ConcurrentModification, with nothing written."""
    from lake_platform.catalog.schemas import Schemas
    from lake_platform.errors import ConcurrentModification

    other = seeded.new_catalog()
    planned = Schemas.plan_schema

    def plan_then_someone_alters(self: Schemas, *args: object, **kwargs: object) -> object:
        change = planned(self, *args, **kwargs)  # type: ignore[arg-type]
        other.alter.rename_column(T, "name", "label")
        return change

    monkeypatch.setattr(Schemas, "plan_schema", plan_then_someone_alters)
    version = seeded.catalog.reads.open_table(T).record.current_version
    with pytest.raises(ConcurrentModification, match="schema of p.w.ns.t changed"):
        seeded.catalog.tables.append(T, base())
    other.close()
    record = seeded.catalog.reads.open_table(T).record
    assert record.current_version == version + 1  # the rename only
    assert current_schema(seeded).names == ["id", "score", "label"]


def test_evolution_and_alter_on_dynamodb_and_s3(scale_out: tuple[object, object]) -> None:
    """The held schema step rides in the DynamoDB transaction with the append's version."""
    _, catalog = scale_out
    catalog.tables.create_table(T, table(id=pa.array([1], pa.int32()), name=pa.array(["a"])))  # type: ignore[attr-defined]
    catalog.policies.set_policy(T, {"schema_evolution": "widen"})  # type: ignore[attr-defined]
    result = catalog.tables.append(  # type: ignore[attr-defined]
        T, table(id=pa.array([2**40], pa.int64()), name=pa.array(["b"]), extra=pa.array([1.5]))
    )
    assert (result.from_version, result.to_version) == (1, 4)
    catalog.alter.rename_column(T, "extra", "score")  # type: ignore[attr-defined]
    snap = catalog.reads.open_table(T)  # type: ignore[attr-defined]
    assert snap.record.current_version == 5
    assert snap.to_reader().read_all().sort_by("id").to_pylist() == [
        {"id": 1, "name": "a", "score": None},
        {"id": 2**40, "name": "b", "score": 1.5},
    ]


# -- a writer killed anywhere in an evolving append ------------------------------------------------

KILL_COMMIT = "evolving-append-0001"


def op_evolving_append(catalog: object, commit_id: str) -> object:
    """The killed writer's operation (module level: the forkserver child imports it by name)."""
    return catalog.tables.append(T, base(3, extra=pa.array([9.0])), by=Provenance(commit_id=commit_id))  # type: ignore[attr-defined]


@pytest.mark.slow
@pytest.mark.parametrize(
    ("point", "nth"),
    [
        ("append:staged", 1),  # the held add-columns manifest is written, nothing registered
        ("append:after-evolve", 1),  # the schema step is done in Lance, still held
        ("append:staged", 2),  # the rows' data files and manifest are written
        ("append:registered", 1),  # both versions registered in one transaction, unpublished
        ("append:finalize-copied", 1),
        ("append:after-commit", 1),
    ],
)
def test_a_writer_killed_mid_evolution_leaves_all_or_nothing(tmp_path: Path, point: str, nth: int) -> None:
    from lake_platform.catalog.catalog import Catalog
    from lake_platform_tests.catalog import faults
    from lake_platform_tests.catalog.conftest import lake_settings

    settings = lake_settings(tmp_path / "home", warehouse_roots=str(tmp_path / "wh"))
    with Catalog(settings) as c:
        c.containers.create_project("p")
        c.containers.create_warehouse("p.w", root=str(tmp_path / "wh"))
        c.containers.create_namespace("p.w.ns")
        c.tables.create_table(
            T,
            table(
                id=pa.array([1, 2], pa.int32()),
                score=pa.array([0.5, 1.5], pa.float32()),
                name=pa.array(["a", "b"]),
            ),
        )
        c.policies.set_policy(T, {"schema_evolution": "add_columns"})
    code, _ = faults.kill_writer(settings, op_evolving_append, point, nth, KILL_COMMIT)
    assert code == -signal.SIGKILL, f"the writer never reached {point} (#{nth}); exit code {code}"
    with Catalog(settings) as c:
        item = c.store.get(keys.table(TableName.parse(T)))
        assert item is not None
        current = decode(TableRecord, item.value, item.key)
        landed = point not in ("append:staged", "append:after-evolve")
        assert current.current_version == (3 if landed else 1), "the schema step landed alone"
        assert ("extra" in schema_from_ipc(current.schema_ipc).names) is landed
        c.manifests.repair_table(T)  # publishes what the dead writer registered; quarantines what it did not
        again = op_evolving_append(c, KILL_COMMIT)  # the retry: replayed, or the first landing
        assert again.replayed is landed  # type: ignore[attr-defined]
        snap = c.reads.open_table(T)
        assert snap.record.current_version == 3
        assert snap.to_reader().read_all().sort_by("id").to_pydict()["extra"] == [None, None, 9.0]
        assert snap.dataset.schema.names == schema_from_ipc(snap.record.schema_ipc).names
        assert [e.operation for e in c.reads.history(T)][-2:] == ["add-columns", "append"]


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


def test_a_writer_may_add_a_column_but_not_drop_or_rename_one(seeded: Lake) -> None:
    from lake_platform.catalog.principals import Principal
    from lake_platform.errors import PermissionDenied

    writer = Principal(name="etl", kind="token", project="p", role="writer")
    reader = Principal(name="ana", kind="user", project="p", role="reader")
    before = state(seeded)
    with pytest.raises(PermissionDenied):
        seeded.catalog.alter.add_column(T, "note", "string", by=Provenance(principal=reader))
    with pytest.raises(PermissionDenied):
        seeded.catalog.alter.drop_column(T, "score", by=Provenance(principal=writer))
    with pytest.raises(PermissionDenied):
        seeded.catalog.alter.rename_column(T, "score", "points", by=Provenance(principal=writer))
    assert state(seeded) == before
    seeded.catalog.alter.add_column(T, "note", "string", by=Provenance(principal=writer))
    assert [e.actor for e in seeded.catalog.reads.log(T)][-1] == "etl"
