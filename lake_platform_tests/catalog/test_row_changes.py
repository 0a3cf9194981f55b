"""Updates and merge-inserts: one logged commit each through the catalog; bad input changes
nothing."""

from __future__ import annotations

import pytest

from lake_platform.errors import InvalidInput
from lake_platform_tests.catalog.conftest import Lake, rows, state

T = "p.w.ns.t"


def content(lake: Lake) -> dict[int, str]:
    table = lake.catalog.reads.open_table(T).to_reader().read_all()
    return dict(zip(table.column("id").to_pylist(), table.column("tag").to_pylist(), strict=True))


def test_update_and_merge_insert(lake: Lake) -> None:
    lake.catalog.tables.create_table(T, rows([1, 2, 3]))
    updated = lake.catalog.rows.update_rows(T, {"tag": "'u'"}, "id > 1")
    assert (updated.version, updated.counts) == (2, {"updated_rows": 2})
    merged = lake.catalog.rows.merge_insert(
        T, rows([3, 4], "m"), ["id"], update_matched=True, insert_unmatched=True
    )
    assert merged.version == 3 and merged.counts["num_updated_rows"] == 1
    assert merged.counts["num_inserted_rows"] == 1
    assert content(lake) == {1: "x", 2: "u", 3: "m", 4: "m"}
    log = {e.commit_id: e for e in lake.catalog.reads.log(T)}
    assert log[updated.commit_id].operation == "update" and log[merged.commit_id].operation == "merge"
    assert log[updated.commit_id].detail["updated_rows"] == 2


def test_bad_input_changes_nothing(lake: Lake) -> None:
    lake.catalog.tables.create_table(T, rows([1]))
    before = state(lake)
    for call in [
        lambda: lake.catalog.rows.update_rows(T, {"nope": "1"}),
        lambda: lake.catalog.rows.update_rows(T, {}),
        lambda: lake.catalog.rows.merge_insert(T, rows([2]), ["nope"], insert_unmatched=True),
        lambda: lake.catalog.rows.merge_insert(T, rows([2]), ["id"]),
    ]:
        with pytest.raises(InvalidInput):
            call()
    assert state(lake) == before


def test_a_bad_predicate_commits_nothing(lake: Lake) -> None:
    lake.catalog.tables.create_table(T, rows([1]))
    with pytest.raises(InvalidInput):
        lake.catalog.rows.update_rows(T, {"tag": "'a'"}, "nope = 1")
    # refused by Lance under the lease: no version, no log entry, the rows as they were
    assert lake.catalog.reads.open_table(T).record.current_version == 1
    assert [e.operation for e in lake.catalog.reads.log(T)] == ["create"]
    assert content(lake) == {1: "x"}
