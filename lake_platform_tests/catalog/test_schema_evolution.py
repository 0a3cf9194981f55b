"""Schema evolution, governed by the table's ``schema_evolution`` policy (issue 16).

Each policy value meets inputs that add a column, widen a type, narrow a type, carry strings
where numbers are, and rename a column. Whatever is refused is refused before anything is
written: the registry and the files are exactly as before. What is accepted lands in one
registry transaction with the rows (never a schema step alone), also on DynamoDB and S3, and a
writer killed anywhere in it leaves all or nothing. How an input is conformed to the table's
types under every policy: test_conform.py; explicit changes (``lake table alter``): test_alter.py.
"""

from __future__ import annotations

import signal
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from lake_platform.catalog.arrow_io import schema_from_ipc
from lake_platform.catalog.evolution import plan
from lake_platform.catalog.provenance import Provenance
from lake_platform.errors import InvalidInput, TableSchemaValidationError
from lake_platform.maintenance import sources
from lake_platform.naming import TableName
from lake_platform.registry import keys
from lake_platform.registry.records import TableRecord, decode
from lake_platform_tests.catalog.conftest import Lake, state
from lake_platform_tests.catalog.schema_tables import T, base, current_schema, policy, rows_of, seed, table


@pytest.fixture
def seeded(lake: Lake) -> Lake:
    return seed(lake)


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
