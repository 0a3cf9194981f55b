"""RestoreTable and BatchDeleteTableVersions with ``branch`` (issue 46: version operations take a
branch), through pylance's own RestNamespace and plain HTTP, checked against the registry: a
restore is a new version of the branch equal to an earlier one of its line, main never moving;
a deletion removes the branch's versions only, never its head, a tagged one, one another branch
was made from, or one a reader may still have pinned, and never a version of main."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import lance
import pyarrow as pa
import pytest
from lance_namespace_urllib3_client.models import RestoreTableRequest

from lake_platform.catalog.arrow_io import schema_from_ipc
from lake_platform.naming import TableName
from lake_platform_tests.rest.clients import rest_namespace, rows
from lake_platform_tests.rest.conftest import RestLake, start_rest_lake
from lake_platform_tests.rest.handlers.events import NAME, TP, T, problem


@pytest.fixture
def lake(tmp_path: Path) -> Iterator[RestLake]:
    """Tickets live 1 ms (no reader pins a superseded version for long). Main: versions 1 (id 1)
    and 2 (plus 2). Branch dev from main's 2: 3 (plus 3), 4 (overwritten: id 9 and a column
    more), 5, 6 and 7 (plus 10, 11, 12)."""
    for lake in start_rest_lake(tmp_path, ticket_lifetime_seconds=0.001, reader_max_stale_seconds=0.0):
        ns = rest_namespace(lake.url, lake.tokens["writer"])
        lance.write_dataset(rows([1]), namespace_client=ns, table_id=T, mode="create")
        lance.write_dataset(rows([2]), namespace_client=ns, table_id=T, mode="append")
        cat = lake.catalog
        cat.branches.create_branch(NAME, "dev")
        cat.branch_writes.append(NAME, "dev", rows([3]).to_reader())
        wide = rows([9]).append_column("more", pa.array([1], pa.int32()))
        cat.branch_writes.overwrite(NAME, "dev", wide.to_reader())
        for i in (10, 11, 12):
            cat.branch_writes.append(
                NAME, "dev", wide.set_column(0, "id", pa.array([i], pa.int64())).to_reader()
            )
        yield lake


def main_state(lake: RestLake) -> tuple[int, list[int], list[int]]:
    """Main's head, its rows, and the versions it has registered."""
    record = lake.catalog.ctx.table(TableName.parse(NAME))[0]
    ids = lake.catalog.reads.open_table(NAME).dataset.to_table().column("id").to_pylist()
    return record.current_version, sorted(ids), sorted(lake.catalog.reads.readable_versions(NAME)[1])


def branch(lake: RestLake, name: str = "dev") -> Any:
    return lake.catalog.branches.branch(TableName.parse(NAME), name)[0]


def branch_ids(lake: RestLake, version: int | None = None, name: str = "dev") -> list[int]:
    snap = lake.catalog.branches.open_branch(NAME, name, version)
    return sorted(snap.dataset.to_table().column("id").to_pylist())


def branch_versions(lake: RestLake, name: str = "dev") -> list[int]:
    return sorted(lake.catalog.branches.readable_versions(NAME, name)[1])


def test_restore_on_a_branch_is_a_new_version_of_its_line(lake: RestLake) -> None:
    before = main_state(lake)
    ns = rest_namespace(lake.url, lake.tokens["writer"])
    answer = ns.restore_table(RestoreTableRequest(id=T, version=3, branch="dev"))
    rec = branch(lake)
    assert rec.current_version == 8 and branch_ids(lake) == [1, 2, 3]
    assert schema_from_ipc(rec.schema_ipc).names == ["id", "tag"]  # version 3's schema again
    entry = next(e for e in lake.catalog.reads.log(NAME) if e.commit_id == answer.transaction_id)
    assert (entry.operation, entry.from_version, entry.to_version) == ("restore", 7, 8)
    assert (entry.detail["restored_version"], entry.detail["branch"]) == (3, "dev")
    assert branch_ids(lake, 7) == [9, 10, 11, 12]  # the versions between stay readable
    assert main_state(lake) == before
    # the branch's first version (where it was made) is on its line too
    assert lake.post(f"/v1/table/{TP}/restore", {"version": 2, "branch": "dev"}).status_code == 200
    assert (branch(lake).current_version, branch_ids(lake)) == (9, [1, 2])
    assert main_state(lake) == before


def test_restore_on_a_branch_refusals_change_nothing(lake: RestLake) -> None:
    before = main_state(lake), branch(lake).current_version
    path = f"/v1/table/{TP}/restore"
    for body, who, expected in [
        ({"version": 1, "branch": "dev"}, "writer", (404, 11)),  # main's, before the branch was made
        ({"version": 99, "branch": "dev"}, "writer", (404, 11)),
        ({"version": 3, "branch": "nope"}, "writer", (404, 22)),
        ({"version": 3, "branch": "dev"}, "reader", (403, 15)),
        ({"version": 3, "branch": "dev"}, "other", (404, 4)),
        ({"version": 0, "branch": "dev"}, "writer", (400, 13)),
    ]:
        assert problem(lake.post(path, body, who=who)) == expected, body
    assert (main_state(lake), branch(lake).current_version) == before


def test_batch_delete_on_a_branch_removes_only_the_branchs_deletable_versions(lake: RestLake) -> None:
    lake.catalog.tags.create_tag(NAME, "keep", 5, branch="dev")
    lake.catalog.branches.create_branch(NAME, "kid", from_branch="dev", from_version=6)
    before = main_state(lake)
    ns = rest_namespace(lake.url, lake.tokens["admin"])
    # pylance 14.0.2 takes this one request as a dict
    everything = [{"start_version": 0, "end_version": -1}]
    answer = ns.batch_delete_table_versions({"id": T, "branch": "dev", "ranges": everything})
    assert answer["deleted_count"] == 3 and branch_versions(lake) == [5, 6, 7]
    entry = next(e for e in lake.catalog.reads.log(NAME) if e.commit_id == answer["transaction_id"])
    assert entry.operation == "delete-versions" and entry.detail["branch"] == "dev"
    assert entry.detail["versions_removed"] == [2, 3, 4]
    assert entry.detail["data_files_removed"] == 1  # the branch's own file of id 3, none of main's
    assert entry.detail["kept"] == {"current": [7], "tagged": [5], "branched": [6], "pinned": []}
    # main keeps every version and every row (versions 2 and 3 of the branch were the last of it
    # to read main's files); the branch, its kept versions and the kid still read
    assert main_state(lake) == before
    assert lake.catalog.reads.open_table(NAME, 1).dataset.to_table().column("id").to_pylist() == [1]
    assert (branch_ids(lake), branch_ids(lake, 5)) == ([9, 10, 11, 12], [9, 10])
    assert branch_ids(lake, name="kid") == [9, 10, 11]
    # a removed version is gone from the branch's line
    assert problem(lake.post(f"/v1/table/{TP}/restore", {"version": 3, "branch": "dev"})) == (404, 11)


def test_batch_delete_on_a_branch_refusals_change_nothing(lake: RestLake) -> None:
    before = main_state(lake), branch_versions(lake)
    path = f"/v1/table/{TP}/version/delete"
    some = [{"start_version": 3, "end_version": 5}]
    for body, who, expected in [
        ({"branch": "dev", "ranges": some}, "writer", (403, 15)),
        ({"branch": "nope", "ranges": some}, "admin", (404, 22)),
        ({"branch": "dev", "ranges": []}, "admin", (400, 13)),
        ({"branch": "dev", "ranges": some}, "other", (404, 4)),
    ]:
        assert problem(lake.post(path, body, who=who)) == expected, body
    # main's versions are not the branch's: a range below the branch's line removes nothing
    low = lake.post(path, {"branch": "dev", "ranges": [{"start_version": 0, "end_version": 2}]}, who="admin")
    assert low.status_code == 200 and low.json()["deleted_count"] == 0
    assert (main_state(lake), branch_versions(lake)) == before


def test_a_branch_version_a_reader_may_have_pinned_is_kept(tmp_path: Path) -> None:
    """With the default ticket lifetime (an hour), a branch version superseded a moment ago is
    pinned."""
    for lake in start_rest_lake(tmp_path):
        ns = rest_namespace(lake.url, lake.tokens["writer"])
        lance.write_dataset(rows([1]), namespace_client=ns, table_id=T, mode="create")
        lake.catalog.branches.create_branch(NAME, "dev")
        lake.catalog.branch_writes.append(NAME, "dev", rows([2]).to_reader())
        body = {"branch": "dev", "ranges": [{"start_version": 0, "end_version": -1}]}
        answer = lake.post(f"/v1/table/{TP}/version/delete", body, who="admin").json()
        assert answer["deleted_count"] == 0 and branch_versions(lake) == [1, 2]
