"""The catalog's own write path (``catalog/tables.py``): an append of no rows commits nothing
and answers the table's current version (no empty version, no log entry), also through
this process's small-append path, with a commit id, and from a stream of empty batches; an
ingest's markers riding on it still land, once. An overwrite with no rows empties the table and
commits; an append of no rows that adds a column (the schema policy allows it) commits too. A
delete whose predicate selects no row commits nothing either. A failed create answers its own
error even when its files cannot be removed."""

from __future__ import annotations

import contextlib
from pathlib import Path

import pyarrow as pa
import pytest

from lake_platform.catalog.provenance import Provenance
from lake_platform.errors import InvalidInput, ServiceUnavailable, TableNotFound
from lake_platform.registry.records import CommitMarker
from lake_platform_tests.catalog.conftest import Lake, rows
from lake_platform_tests.catalog.test_trash_expiry import undeletable

T = "p.w.ns.t"


def empty(batches: int = 0) -> pa.RecordBatchReader:
    schema = rows([]).schema
    return pa.RecordBatchReader.from_batches(schema, [pa.RecordBatch.from_pylist([], schema)] * batches)


def logged(lake: Lake) -> list[str]:
    return [e.operation for e in lake.catalog.reads.history(T)]


def test_an_append_of_no_rows_commits_nothing_and_answers_the_current_version(lake: Lake) -> None:
    lake.catalog.tables.create_table(T, rows([1, 2]))
    lake.catalog.tables.append(T, rows([3]))  # this process wrote last: the small-append path
    for data in (empty(), empty(batches=3)):
        result = lake.catalog.tables.append(T, data)
        assert (result.from_version, result.to_version, result.rows_added) == (2, 2, 0)
    once = lake.catalog.tables.append(T, empty(), by=Provenance(commit_id="none-0001"))
    assert (once.to_version, once.replayed) == (2, False)
    other = lake.new_catalog()  # not the table's last writer: the leased path
    try:
        assert other.tables.append(T, empty(batches=1)).to_version == 2
    finally:
        other.close()
    assert lake.catalog.reads.open_table(T).version == 2
    assert logged(lake) == ["create", "append"]
    assert lake.catalog.tables.append(T, rows([4])).to_version == 3  # rows still commit


def test_markers_riding_on_an_append_of_no_rows_land_once(lake: Lake) -> None:
    lake.catalog.tables.create_table(T, rows([1]))
    marker = CommitMarker(commit_id="file-0001", target=T, operation="ingest-file", part_of="batch-0001")
    by = Provenance(commit_id="batch-0001")
    first = lake.catalog.tables.append(T, empty(), markers=[marker], by=by)
    assert (first.to_version, first.replayed) == (1, False)
    landed = lake.catalog.ctx.commit_landed("file-0001")
    assert landed is not None and landed.part_of == "batch-0001"
    batch = lake.catalog.ctx.commit_landed("batch-0001")
    assert batch is not None and (batch.from_version, batch.to_version) == (1, 1)
    again = lake.catalog.tables.append(T, empty(), markers=[marker], by=by)  # the batch retried
    assert (again.to_version, again.replayed) == (1, True)
    assert logged(lake) == ["create"]
    assert lake.catalog.reads.open_table(T).version == 1


def test_a_delete_of_no_rows_commits_nothing_and_answers_the_current_version(lake: Lake) -> None:
    lake.catalog.tables.create_table(T, rows([1, 2]))
    for by in (Provenance(), Provenance(commit_id="none-0002")):
        result = lake.catalog.tables.delete_rows(T, "id > 99", by=by)
        assert (result.from_version, result.to_version, result.replayed) == (1, 1, False)
    assert lake.catalog.reads.open_table(T).version == 1
    assert logged(lake) == ["create"]
    with pytest.raises(InvalidInput):  # a bad predicate is still refused, not taken as selecting nothing
        lake.catalog.tables.delete_rows(T, "nope > 1")
    assert lake.catalog.tables.delete_rows(T, "id = 1").to_version == 2  # rows selected still commit


def test_an_overwrite_with_no_rows_empties_the_table(lake: Lake) -> None:
    lake.catalog.tables.create_table(T, rows([1, 2]))
    result = lake.catalog.tables.overwrite(T, empty())
    assert (result.from_version, result.to_version) == (1, 2)
    assert lake.catalog.reads.open_table(T).count_rows() == 0
    assert logged(lake) == ["create", "overwrite"]


def test_an_append_of_no_rows_adding_a_column_commits_the_column(lake: Lake) -> None:
    lake.catalog.tables.create_table(T, rows([1]))
    lake.catalog.policies.set_policy(T, {"schema_evolution": "add_columns"})
    wider = pa.table(
        {"id": pa.array([], pa.int64()), "tag": pa.array([], pa.string()), "n": pa.array([], pa.int64())}
    )
    result = lake.catalog.tables.append(T, wider.to_reader())
    assert result.from_version == 1 and result.to_version is not None and result.to_version > 1
    assert lake.catalog.reads.open_table(T).schema.names == ["id", "tag", "n"]


@pytest.mark.parametrize("storage", ["local"], indirect=True)
def test_a_failed_create_answers_its_own_error_when_its_files_cannot_be_removed(lake: Lake) -> None:
    """A create that failed removes its unregistered files; when one cannot be deleted, that
    OSError replaced the create's typed error (the caller saw a raw OSError, not why the create
    failed). The create's error stands; the leftovers are the orphan scan's."""
    with contextlib.ExitStack() as stack:

        def fail_after_writing(point: str) -> None:
            if point == "create:staged":  # its files written, nothing registered
                stack.enter_context(undeletable(next(Path(lake.root).rglob("*.lance"))))
                raise ServiceUnavailable("the registry went away")

        creator = lake.new_catalog(hook=fail_after_writing)
        stack.callback(creator.close)
        with pytest.raises(ServiceUnavailable, match="the registry went away"):
            creator.tables.create_table(T, rows([1, 2]))
    with pytest.raises(TableNotFound):
        lake.catalog.reads.open_table(T)
