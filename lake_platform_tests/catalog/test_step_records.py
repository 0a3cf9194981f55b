"""The commit-log entry and commit marker a version of a commit registers with it: a commit's
totals are counted once, on its first step, and its marker keeps the version it started from."""

from __future__ import annotations

from pathlib import Path

from lake_platform.catalog.pending import PendingCommit
from lake_platform.catalog.step_records import held_step_entry, step_entry, step_marker
from lake_platform.registry import keys
from lake_platform.registry.records import TableRecord
from lake_platform.registry.sqlite import SqliteMetaStore
from lake_platform.registry.store import ABSENT, Put

TARGET = "p.w.ns.t"
RECORD = TableRecord(name=TARGET, incarnation="inc", location="/wh/t", current_version=3)


def pending() -> PendingCommit:
    return PendingCommit(
        commit_id="c1",
        operation="append",
        actor="me",
        stream_totals=lambda: (7, 700),
        files_added=2,
        hold=["add-columns"],
    )


def test_a_commits_totals_go_on_its_first_step_only() -> None:
    p = pending()
    first = step_entry(p, RECORD, TARGET, from_version=3, version=4, at=1, step=0, first=True)
    later = step_entry(p, RECORD, TARGET, from_version=4, version=5, at=2, step=1, first=False)
    assert (first.operation, first.rows_added, first.bytes_added, first.files_added) == ("append", 7, 700, 2)
    assert (later.operation, later.rows_added, later.bytes_added, later.files_added) == ("append#1", 0, 0, 0)


def test_a_held_step_is_logged_as_the_schema_change_it_is() -> None:
    entry = held_step_entry(pending(), RECORD, TARGET, from_version=3, version=4, at=1)
    assert (entry.operation, entry.from_version, entry.to_version) == ("add-columns", 3, 4)
    assert entry.rows_added == 0


def test_a_later_steps_marker_keeps_where_the_commit_started(tmp_path: Path) -> None:
    store = SqliteMetaStore(tmp_path / "registry.db")
    p = pending()
    marker = step_marker(store, p, RECORD, TARGET, version=4, first=True, log_key="log/1", at=1)
    assert (marker.from_version, marker.to_version) == (3, 4)
    [item] = store.transact([Put(keys.commit_marker(p.commit_id), marker.encode(), ABSENT)])
    assert item is not None
    p.marker_revision = item.revision
    moved = RECORD.model_copy(update={"current_version": 4})
    later = step_marker(store, p, moved, TARGET, version=5, first=False, log_key="log/2", at=2)
    assert (later.from_version, later.to_version, later.log_key) == (3, 5, "log/2")
