"""Bad input gets a typed error and changes nothing: not the registry, not the data."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from lake_platform.catalog.arrow_io import schema_from_ipc
from lake_platform.catalog.provenance import Provenance
from lake_platform.errors import (
    Internal,
    InvalidInput,
    LakeError,
    NamespaceAlreadyExists,
    NamespaceNotFound,
    TableAlreadyExists,
    TableNotFound,
    TableSchemaValidationError,
    TableVersionNotFound,
)
from lake_platform.maintenance import sources
from lake_platform_tests.catalog.conftest import Lake, ids_of, rows, state
from lake_platform_tests.engine.helpers import PANICS

T = "p.w.ns.t"


@pytest.fixture
def seeded(lake: Lake) -> Lake:
    lake.catalog.tables.create_table(T, rows([1, 2]))
    return lake


BAD_NAMES = [
    "",
    "P.w.ns.t",
    "p.w.ns",
    "p.w..t",
    "p.w.ns.t/../x",
    "p.w.ns.ü",
    "p.w.ns.1t",
    "p.w.ns." + "t" * 64,
    "p w.ns.t",
    "p.w.ns.t;drop",
]


@pytest.mark.parametrize("name", BAD_NAMES)
def test_invalid_identifiers_change_nothing(seeded: Lake, name: str) -> None:
    before = state(seeded)
    for call in (
        lambda: seeded.catalog.tables.create_table(name, rows([9])),
        lambda: seeded.catalog.tables.append(name, rows([9])),
        lambda: seeded.catalog.tables.overwrite(name, rows([9])),
        lambda: seeded.catalog.trash.drop_table(name, purge=True),
        lambda: seeded.catalog.versions.compact(name),
        lambda: seeded.catalog.reads.open_table(name),
    ):
        with pytest.raises(InvalidInput):
            call()
    for call in (
        lambda: seeded.catalog.containers.create_namespace(name),
        lambda: seeded.catalog.containers.create_warehouse(name),
    ):
        with pytest.raises((InvalidInput, NamespaceAlreadyExists)):  # "p.w.ns" is a valid namespace name
            call()
    assert state(seeded) == before


def test_append_with_wrong_schema_changes_nothing(seeded: Lake) -> None:
    before = state(seeded)
    wrong = pa.table({"id": pa.array(["not", "ints"]), "tag": ["a", "b"]}).to_reader()
    with pytest.raises(TableSchemaValidationError):
        seeded.catalog.tables.append(T, wrong)
    extra = pa.table({"id": pa.array([1], pa.int64()), "tag": ["a"], "more": [1]}).to_reader()
    with pytest.raises(TableSchemaValidationError, match="unknown column"):
        seeded.catalog.tables.append(T, extra)
    missing = pa.table({"id": pa.array([1], pa.int64())}).to_reader()
    with pytest.raises(TableSchemaValidationError, match="missing column"):
        seeded.catalog.tables.append(T, missing)
    assert state(seeded) == before
    assert ids_of(seeded.catalog.reads.open_table(T)) == [1, 2]


def test_data_that_is_not_arrow_is_refused_and_a_table_is_streamed(seeded: Lake) -> None:
    before = state(seeded)
    for bad in ([{"id": 3}], {"id": [3]}, None, "id\n3\n"):
        with pytest.raises(InvalidInput, match="RecordBatchReader, Table or RecordBatch"):
            seeded.catalog.tables.append(T, bad)  # type: ignore[arg-type]
        with pytest.raises(InvalidInput, match="RecordBatchReader, Table or RecordBatch"):
            seeded.catalog.tables.create_table("p.w.ns.other", bad)  # type: ignore[arg-type]
    assert state(seeded) == before
    table = rows([3]).read_all()  # an in-memory Table, and a RecordBatch, are written as streams
    seeded.catalog.tables.append(T, table)  # type: ignore[arg-type]
    seeded.catalog.tables.create_table("p.w.ns.other", table.to_batches()[0])  # type: ignore[arg-type]
    assert ids_of(seeded.catalog.reads.open_table(T)) == [1, 2, 3]
    assert ids_of(seeded.catalog.reads.open_table("p.w.ns.other")) == [3]


def test_widening_cast_is_accepted(seeded: Lake) -> None:
    narrow = pa.table({"id": pa.array([3], pa.int32()), "tag": ["c"]}).to_reader()
    seeded.catalog.tables.append(T, narrow)
    assert ids_of(seeded.catalog.reads.open_table(T)) == [1, 2, 3]


def test_unreadable_files_change_nothing(seeded: Lake, tmp_path: Path) -> None:
    before = state(seeded)
    record = seeded.catalog.reads.open_table(T).record
    schema = schema_from_ipc(record.schema_ipc)
    garbage = tmp_path / "garbage.parquet"
    garbage.write_bytes(b"this is not parquet at all")
    with pytest.raises(InvalidInput, match="garbage.parquet"):
        seeded.catalog.tables.append(T, sources.open_many([sources.describe(garbage)], schema))
    with pytest.raises(InvalidInput, match="missing.csv"):
        sources.describe(tmp_path / "missing.csv")
    with pytest.raises(InvalidInput, match="unsupported file type"):
        sources.describe(tmp_path / "file.xlsx")
    assert state(seeded) == before


def test_file_broken_halfway_changes_nothing_visible(seeded: Lake, tmp_path: Path) -> None:
    """A CSV whose later rows do not parse: the error names the file, no version lands."""
    good_head = "id,tag\n" + "".join(f"{i},ok\n" for i in range(10, 200_000))
    broken = tmp_path / "broken.csv"
    broken.write_text(good_head + "not-a-number,bad\n")
    before_registry, _ = state(seeded)
    with pytest.raises(LakeError) as err:
        seeded.catalog.tables.append(
            T,
            sources.open_many(
                [sources.describe(broken)],
                schema_from_ipc(seeded.catalog.reads.open_table(T).record.schema_ipc),
            ),
        )
    assert isinstance(err.value, (InvalidInput, TableSchemaValidationError))
    assert "broken.csv" in err.value.message or "fit the table" in err.value.message
    after_registry, _ = state(seeded)
    # The lease record may have been taken and released; nothing else in the registry moved.
    assert [r for r in after_registry if not r[0].startswith("lse/")] == [
        r for r in before_registry if not r[0].startswith("lse/")
    ]
    assert ids_of(seeded.catalog.reads.open_table(T)) == [1, 2]


def test_missing_parents_change_nothing(lake: Lake) -> None:
    before = state(lake)
    with pytest.raises(NamespaceNotFound, match="p.w.nope"):
        lake.catalog.tables.create_table("p.w.nope.t", rows([1]))
    with pytest.raises(NamespaceNotFound, match="p.w.nope"):
        lake.catalog.containers.create_namespace("p.w.nope.sub")
    with pytest.raises(NamespaceNotFound, match="p.x"):
        lake.catalog.containers.create_namespace("p.x.ns")
    with pytest.raises(NamespaceNotFound, match="q"):
        lake.catalog.containers.create_warehouse("q.w")
    with pytest.raises(TableNotFound):
        lake.catalog.tables.append(T, rows([1]))
    with pytest.raises(TableNotFound):
        lake.catalog.trash.drop_table(T, purge=True)
    assert state(lake) == before


def test_duplicates_change_nothing(seeded: Lake) -> None:
    before = state(seeded)
    with pytest.raises(TableAlreadyExists):
        seeded.catalog.tables.create_table(T, rows([5]))
    with pytest.raises(NamespaceAlreadyExists):
        seeded.catalog.containers.create_namespace("p.w.ns")
    with pytest.raises(NamespaceAlreadyExists):
        seeded.catalog.containers.create_project("p")
    assert state(seeded) == before


def test_unknown_version_and_bad_arguments(seeded: Lake) -> None:
    with pytest.raises(TableVersionNotFound):
        seeded.catalog.reads.open_table(T, 99)
    with pytest.raises(InvalidInput):
        seeded.catalog.reads.open_table(T, 0)
    with pytest.raises(InvalidInput):
        seeded.catalog.tables.append(T, rows([1]), by=Provenance(commit_id="bad id!"))
    with pytest.raises(InvalidInput):
        seeded.catalog.tables.delete_rows(T, "  ")
    with pytest.raises(InvalidInput):
        seeded.catalog.containers.create_warehouse("p.w2", root="ftp://somewhere/x")


@pytest.mark.parametrize("version", [2**63, 2**70])
def test_a_version_beyond_int64_is_invalid_input(seeded: Lake, version: int) -> None:
    """Versions are Lance's u64 and registry keys hold 20 digits: before, open_table took 2**70
    to Lance and answered INTERNAL ("int too big to convert"); a tag asked for it read a key
    of 22 digits."""
    c = seeded.catalog
    c.branches.create_branch(T, "dev")
    before = state(seeded)
    for call in (
        lambda: c.reads.open_table(T, version),
        lambda: c.tags.create_tag(T, "x", version),
        lambda: c.branches.open_branch(T, "dev", version),
        lambda: c.restores.restore_table(T, version),
    ):
        with pytest.raises(InvalidInput, match="version"):
            call()
    assert state(seeded) == before


@pytest.mark.parametrize("wanted", ["1", [-1], [2**70], ["1"], [True], None])
def test_versions_to_delete_that_are_no_versions_are_invalid_input(seeded: Lake, wanted: Any) -> None:
    """Before, they matched no version: "nothing-to-do", after taking and releasing the lease."""
    before = state(seeded)
    with pytest.raises(InvalidInput, match="versions to delete"):
        seeded.catalog.versions.delete_versions(T, wanted)
    assert state(seeded) == before


def test_create_with_bad_schema_leaves_nothing(lake: Lake) -> None:
    before = state(lake)
    dup = pa.Table.from_arrays([pa.array([1]), pa.array([2])], names=["a", "a"]).to_reader()
    with pytest.raises(TableSchemaValidationError):
        lake.catalog.tables.create_table(T, dup)
    empty = pa.schema([])
    with pytest.raises(TableSchemaValidationError):
        lake.catalog.tables.create_table(T, pa.RecordBatchReader.from_batches(empty, []))
    assert state(lake) == before


def broken_csv(tmp_path: Path) -> pa.RecordBatchReader:
    """A CSV whose last line has too many fields: found after 100,000 rows were written."""
    broken = tmp_path / "b.csv"
    broken.write_text("id,tag\n" + "".join(f"{i},x\n" for i in range(100_000)) + "1,2,3,4\n")
    return sources.open_many([sources.describe(broken)])


def lance_panics(tmp_path: Path) -> pa.RecordBatchReader:
    """Data Lance panics on. A panic (pyo3's PanicException, a BaseException) passed every
    ``except Exception``: a traceback, and the new table's folder left behind. Now it is an
    engine failure like any other."""
    return PANICS.add_column(0, "id", pa.array([1, 2], pa.int64())).to_reader()


@pytest.mark.parametrize(
    ("data", "error", "message"),
    [
        (broken_csv, InvalidInput, ""),
        (lance_panics, Internal, "create failed: Lance panicked: "),
    ],
    ids=["bad input midway", "a Lance panic"],
)
def test_failed_create_removes_its_unique_location(
    lake: Lake, tmp_path: Path, data: Any, error: type[Exception], message: str
) -> None:
    before = state(lake)
    with pytest.raises(error, match=message):
        lake.catalog.tables.create_table(T, data(tmp_path))
    registry, files = state(lake)
    assert [r for r in registry if not r[0].startswith("lse/")] == [
        r for r in before[0] if not r[0].startswith("lse/")
    ]
    assert files == before[1]
    with pytest.raises(TableNotFound):
        lake.catalog.reads.open_table(T)
    lake.catalog.tables.create_table(T, rows([1, 2]))  # the name is free
    assert ids_of(lake.catalog.reads.open_table(T)) == [1, 2]


def test_parquet_round_trip_through_sources(lake: Lake, tmp_path: Path) -> None:
    path = tmp_path / "in.parquet"
    pq.write_table(pa.table({"id": pa.array([5, 6], pa.int64()), "tag": ["a", "b"]}), path)
    lake.catalog.tables.create_table(T, sources.open_many([sources.describe(path)]))
    assert ids_of(lake.catalog.reads.open_table(T)) == [5, 6]


MERGES = [
    pytest.param(
        pa.table({"id": pa.array([1, 1], pa.int64()), "tag": ["a", "b"]}),
        ["id"],
        "the data holds more than one row for key (id = 1)",
        id="duplicate-keys",
    ),
    pytest.param(
        pa.table({"id": pa.array([1], pa.int64()), "tag": ["a"], "k": [1]}),
        ["k"],
        "column 'k'",
        id="key-not-in-table",
    ),
    pytest.param(
        pa.table({"id": ["1"], "tag": ["a"]}),
        ["id"],
        "int64",
        id="key-of-another-type",
    ),
]


@pytest.mark.parametrize("branch", [None, "dev"])
@pytest.mark.parametrize(("data", "on", "says"), MERGES)
def test_a_merge_the_data_cannot_make_is_invalid_input_naming_why(
    seeded: Lake, data: pa.Table, on: list[str], says: str, branch: str | None
) -> None:
    """What was wrong, in the catalog's words: no Lance internals (its Rust source paths).
    Refused under the write lease: nothing but the lease's record changes."""
    cat = seeded.catalog
    cat.branches.create_branch(T, "dev")
    before = unleased(seeded)
    flags: dict[str, Any] = {"update_matched": True, "insert_unmatched": True}
    with pytest.raises(InvalidInput) as err:
        if branch is None:
            cat.rows.merge_insert(T, data.to_reader(), on, **flags)
        else:
            cat.branch_changes.merge_insert(T, branch, data.to_reader(), on, **flags)
    assert says in err.value.message
    assert ".rs:" not in err.value.message and "/home/" not in err.value.message
    assert unleased(seeded) == before


def unleased(lake: Lake) -> tuple[list[Any], list[Any]]:
    registry, files = state(lake)
    return [i for i in registry if not i[0].startswith("lse/")], files
