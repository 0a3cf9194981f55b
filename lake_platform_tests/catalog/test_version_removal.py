"""The commit-log entry of a version removal, main's (cleanup, delete-versions) and a branch's
(delete-versions): the line's head does not move, so the entry and its commit marker go from the
head to the head, on the line's incarnation, under the removal's commit id, with the caller's
actor and run; the bytes and files removed are patched on once the files are gone."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta

import pytest

from lake_platform.catalog.catalog import Catalog
from lake_platform.catalog.provenance import Provenance
from lake_platform.catalog.results import MaintenanceResult
from lake_platform.naming import TableName
from lake_platform.registry.records import TableRecord
from lake_platform_tests.catalog.conftest import Lake, rows

T = "p.w.ns.t"
BY = Provenance(actor="remover", run_id="run-7")


def main_cleanup(catalog: Catalog) -> tuple[MaintenanceResult, TableRecord]:
    done = catalog.versions.cleanup(T, retention=timedelta(0), by=BY)
    return done, catalog.ctx.table(TableName.parse(T))[0]


def main_deletion(catalog: Catalog) -> tuple[MaintenanceResult, TableRecord]:
    done = catalog.versions.delete_versions(T, [1, 2], by=BY)
    return done, catalog.ctx.table(TableName.parse(T))[0]


def branch_deletion(catalog: Catalog) -> tuple[MaintenanceResult, TableRecord]:
    done = catalog.branch_history.delete_versions(T, "dev", [3, 4], by=BY)
    return done, catalog.branches.branch(TableName.parse(T), "dev")[0]


@pytest.mark.parametrize(
    ("remove", "operation"),
    [(main_cleanup, "cleanup"), (main_deletion, "delete-versions"), (branch_deletion, "delete-versions")],
)
def test_a_removal_is_logged_from_the_lines_head_to_itself(
    lake: Lake,
    remove: Callable[[Catalog], tuple[MaintenanceResult, TableRecord]],
    operation: str,
) -> None:
    """Main at versions 1..3, branch ``dev`` from 3 with versions 4, 5; every superseded version
    old enough to go."""
    lake.catalog.tables.create_table(T, rows([1]))
    for i in (2, 3):
        lake.catalog.tables.append(T, rows([i]))
    lake.catalog.branches.create_branch(T, "dev")
    for i in (4, 5):
        lake.catalog.branch_writes.append(T, "dev", rows([i]))
    quick = lake.settings.model_copy(
        update={"ticket_lifetime_seconds": 0.001, "reader_max_stale_seconds": 0.0}
    )
    catalog = Catalog(quick)
    try:
        done, line = remove(catalog)
    finally:
        catalog.close()
    assert done.status == "committed" and done.detail["versions_removed"]
    [entry] = [e for e in lake.catalog.reads.history(T) if e.commit_id == done.commit_id]
    assert (entry.target, entry.operation, entry.actor, entry.run_id) == (T, operation, "remover", "run-7")
    assert (entry.incarnation, entry.from_version, entry.to_version) == (
        line.incarnation,
        line.current_version,
        line.current_version,
    )
    assert entry.detail == done.detail and entry.bytes_removed == done.detail["bytes_removed"] > 0
    files = done.detail["data_files_removed"] + done.detail.get("other_roots_files_removed", 0)
    assert entry.files_removed == files
    marker = lake.catalog.ctx.commit_landed(done.commit_id)
    assert marker is not None
    assert (marker.target, marker.operation, marker.incarnation, marker.from_version, marker.to_version) == (
        T,
        operation,
        line.incarnation,
        line.current_version,
        line.current_version,
    )
