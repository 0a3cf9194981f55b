"""A commit id that landed replays only as the same commit: the same table, operation and line
(main or one branch). The same call answers the earlier result and writes nothing; the id reused
for anything else is InvalidInput naming what it already names, and changes nothing."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest

from lake_platform.catalog.provenance import Provenance
from lake_platform.errors import InvalidInput
from lake_platform.registry import keys
from lake_platform.registry.records import CommitMarker, decode
from lake_platform_tests.catalog.conftest import Lake, rows, state

T = "p.w.ns.t"
U = "p.w.ns.u"
ID = "reused-0001"
BY = Provenance(commit_id=ID)


@pytest.fixture
def storage() -> dict[str, Any]:
    """What is compared is registry records: the local warehouse is enough."""
    return {"root": None, "settings": {}}


@pytest.fixture
def lines(lake: Lake) -> Lake:
    """``T`` at version 2 with branches ``dev`` and ``qa`` made from it; ``U`` at version 1."""
    cat = lake.catalog
    cat.tables.create_table(T, rows([1, 2], "a"))
    cat.tables.append(T, rows([3], "b"))
    cat.branches.create_branch(T, "dev")
    cat.branches.create_branch(T, "qa")
    cat.tables.create_table(U, rows([1]))
    return lake


def refused(lake: Lake, call: Callable[[], Any], names: str, commit_id: str = ID) -> None:
    """``call`` is InvalidInput naming ``names`` (what the id landed as), and changes nothing."""
    before = state(lake)
    with pytest.raises(InvalidInput) as err:
        call()
    assert f"commit id {commit_id} already names {names}" in err.value.message
    assert state(lake) == before


def branch_append(lake: Lake) -> Any:
    return lake.catalog.branch_writes.append(T, "dev", rows([7]), by=BY)


def test_a_branch_append_replayed_answers_the_earlier_result_and_writes_nothing(lines: Lake) -> None:
    first = branch_append(lines)
    before = state(lines)
    again = branch_append(lines)
    assert again.replayed and (again.table, again.operation) == (T, "append")
    assert (again.from_version, again.to_version) == (first.from_version, first.to_version) == (2, 3)
    assert state(lines) == before
    item = lines.catalog.store.get(keys.commit_marker(ID))
    assert item is not None
    assert decode(CommitMarker, item.value).branch == "dev"


@pytest.mark.parametrize(
    "reuse",
    [
        pytest.param(lambda c: c.tables.append(T, rows([8]), by=BY), id="main"),
        pytest.param(lambda c: c.branch_writes.append(T, "qa", rows([8]), by=BY), id="another-branch"),
        pytest.param(lambda c: c.branch_writes.append(U, "dev", rows([8]), by=BY), id="another-table"),
        pytest.param(lambda c: c.tables.append(U, rows([8]), by=BY), id="another-table-on-main"),
        pytest.param(lambda c: c.branch_writes.overwrite(T, "dev", rows([8]), by=BY), id="overwrite"),
        pytest.param(lambda c: c.branch_changes.delete_rows(T, "dev", "id = 1", by=BY), id="delete"),
        pytest.param(lambda c: c.branch_indexes.create_index(T, "dev", "id", by=BY), id="index"),
        pytest.param(lambda c: c.branch_compaction.compact_branch(T, "dev", by=BY), id="compact"),
        pytest.param(lambda c: c.rows.update_rows(T, {"tag": "'z'"}, by=BY), id="main-update"),
        pytest.param(lambda c: c.restores.restore_table(T, 1, by=BY), id="main-restore"),
        pytest.param(lambda c: c.branch_publish.publish_branch(T, "dev", by=BY), id="publish"),
        pytest.param(lambda c: c.branches.create_branch(T, "x", by=BY), id="branch-create"),
    ],
)
def test_a_branch_appends_id_reused_for_another_commit_is_refused(
    lines: Lake, reuse: Callable[[Any], Any]
) -> None:
    branch_append(lines)
    refused(lines, lambda: reuse(lines.catalog), f"append of {T} on branch dev")


def test_a_main_appends_id_reused_on_a_branch_is_refused(lines: Lake) -> None:
    cat = lines.catalog
    cat.tables.append(T, rows([7]), by=BY)
    refused(lines, lambda: cat.branch_writes.append(T, "dev", rows([7]), by=BY), f"append of {T} on main")
    assert cat.tables.append(T, rows([7]), by=BY).replayed


def test_a_branch_row_change_replays_on_its_branch_only(lines: Lake) -> None:
    cat = lines.catalog
    first = cat.branch_changes.delete_rows(T, "dev", "id = 1", by=BY)
    before = state(lines)
    again = cat.branch_changes.delete_rows(T, "dev", "id = 1", by=BY)
    assert again.to_version == first.to_version == 3
    assert state(lines) == before
    names = f"delete of {T} on branch dev"
    refused(lines, lambda: cat.tables.delete_rows(T, "id = 1", by=BY), names)
    refused(lines, lambda: cat.branch_changes.delete_rows(T, "qa", "id = 1", by=BY), names)
    refused(lines, lambda: cat.branch_changes.update_rows(T, "dev", {"tag": "'z'"}, by=BY), names)


def test_a_branch_index_replays_on_its_branch_only(lines: Lake) -> None:
    cat = lines.catalog
    first = cat.branch_indexes.create_index(T, "dev", "id", by=BY)
    before = state(lines)
    again = cat.branch_indexes.create_index(T, "dev", "id", by=BY)
    assert (again.status, again.version, again.detail["replayed"]) == ("committed", first.version, True)
    assert state(lines) == before
    names = f"index create of {T} on branch dev"
    refused(lines, lambda: cat.indexes.create_index(T, "id", by=BY), names)
    refused(lines, lambda: cat.branch_indexes.create_index(T, "qa", "id", by=BY), names)
    refused(lines, lambda: cat.indexes.create_index(U, "id", by=BY), f"index create of {T} on branch dev")


def test_a_branch_restore_replays_on_its_branch_only(lines: Lake) -> None:
    cat = lines.catalog
    cat.branch_writes.append(T, "dev", rows([7]))
    first = cat.branch_history.restore(T, "dev", 2, by=BY)
    assert cat.branch_history.restore(T, "dev", 2, by=BY).to_version == first.to_version == 4
    refused(lines, lambda: cat.restores.restore_table(T, 2, by=BY), f"restore of {T} on branch dev")


def test_a_publish_replays_for_its_branch_only(lines: Lake) -> None:
    cat = lines.catalog
    cat.branch_writes.append(T, "dev", rows([7]))
    cat.branch_writes.append(T, "qa", rows([8]))
    first = cat.branch_publish.publish_branch(T, "dev", by=BY)
    again = cat.branch_publish.publish_branch(T, "dev", by=BY)
    assert again.replayed and again.to_version == first.to_version
    refused(lines, lambda: cat.branch_publish.publish_branch(T, "qa", by=BY), f"publish of {T} on branch dev")


def test_a_branch_create_replays_for_its_branch_only(lines: Lake) -> None:
    cat = lines.catalog
    made = cat.branches.create_branch(T, "x", by=BY)
    assert cat.branches.create_branch(T, "x", by=BY) == made
    refused(lines, lambda: cat.branches.create_branch(T, "y", by=BY), f"branch-create of {T} on branch x")


def test_a_transactions_id_reused_for_other_tables_is_refused(lines: Lake) -> None:
    cat = lines.catalog
    with cat.transaction(by=BY) as tx:
        tx.append(T, rows([7]))
        tx.append(U, rows([7]))
    before = state(lines)
    with cat.transaction(by=BY) as again:
        again.append(T, rows([7]))
        again.append(U, rows([7]))
    assert [r.replayed for r in again.results] == [True, True]
    assert state(lines) == before

    def other_tables() -> None:
        with cat.transaction(by=BY) as tx:
            tx.append(U, rows([7]))
            tx.overwrite("p.w.ns.v", rows([7]))

    cat.tables.create_table("p.w.ns.v", rows([1]))
    refused(lines, other_tables, f"append of {T} on main", f"{ID}-t0")


def rewrite_as_old_marker(lake: Lake, commit_id: str) -> None:
    """The marker as a writer before markers named their branch left it (record_version 1)."""
    item = lake.catalog.store.get(keys.commit_marker(commit_id))
    assert item is not None
    old = json.loads(item.value)
    del old["branch"]
    old["record_version"] = 1
    lake.catalog.store.compare_and_swap(item.key, item.revision, json.dumps(old).encode())


def test_an_old_marker_without_a_branch_decodes_as_main() -> None:
    # What an old writer encoded: every field of its shape, record_version 1, no branch.
    old = {"record_version": 1, "commit_id": ID, "target": T, "operation": "append", "to_version": 3}
    raw = json.dumps(old).encode()
    marker = decode(CommitMarker, raw)
    assert (marker.branch, marker.record_version, marker.to_version) == (None, 1, 3)


def test_an_old_main_marker_replays_on_main_and_refuses_a_branch(lines: Lake) -> None:
    cat = lines.catalog
    cat.tables.append(T, rows([7]), by=BY)
    rewrite_as_old_marker(lines, ID)
    assert cat.tables.append(T, rows([7]), by=BY).replayed
    refused(lines, lambda: cat.branch_writes.append(T, "dev", rows([7]), by=BY), f"append of {T} on main")


def test_an_old_branch_marker_is_read_with_its_log_entrys_branch(lines: Lake) -> None:
    """A branch commit's marker written before markers named their branch: its log entry says
    which branch, so a retry on that branch still replays and main does not take it."""
    cat = lines.catalog
    branch_append(lines)
    rewrite_as_old_marker(lines, ID)
    assert branch_append(lines).replayed
    refused(lines, lambda: cat.tables.append(T, rows([7]), by=BY), f"append of {T} on branch dev")


def test_a_replayed_append_answers_the_rows_and_bytes_its_commit_logged(lines: Lake) -> None:
    """A retry (``lake ingest --commit-id``, a REST or IO manager retry) is told what landed the
    first time, not 0 rows: it reads its commit's log entry."""
    cat = lines.catalog
    first = cat.tables.append(T, rows([7, 8]), by=BY)
    again = cat.tables.append(T, rows([9]), by=BY)
    assert again.replayed and not first.replayed
    assert (again.rows_added, again.bytes_added) == (first.rows_added, first.bytes_added)
    assert first.rows_added == 2 and first.bytes_added > 0
    on_dev = cat.branch_writes.append(T, "dev", rows([7, 8, 9]), by=Provenance(commit_id="dev-0001"))
    replayed = cat.branch_writes.append(T, "dev", rows([1]), by=Provenance(commit_id="dev-0001"))
    assert (
        (replayed.rows_added, replayed.bytes_added)
        == (on_dev.rows_added, on_dev.bytes_added)
        == (3, on_dev.bytes_added)
    )
