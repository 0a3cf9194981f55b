"""Compaction in three pieces: a plan, tasks that each run with their own catalog (as a step on
another machine would), and one commit that replays when repeated."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest

from lake_platform.catalog.catalog import Catalog
from lake_platform.errors import InvalidInput
from lake_platform.maintenance import compaction, orphans
from lake_platform.maintenance.compaction import compact_table, due
from lake_platform_tests.maintenance.helpers import age_tree, make_lake, rows

TABLE = "p.w.ns.frag"
TWO_DAYS = 2 * 86400


def fragmented(home: Path) -> Catalog:
    catalog = make_lake(home)
    catalog.tables.create_table(TABLE, rows(0, 10).to_reader())
    for i in range(1, 6):
        catalog.tables.append(TABLE, rows(10 * i, 10).to_reader())
    catalog.policies.set_policy(TABLE, {"compact_min_fragments": 4, "target_rows_per_fragment": 20})
    return catalog


def test_tasks_run_on_their_own_catalogs_and_commit_once(tmp_path: Path) -> None:
    catalog = fragmented(tmp_path / "home")
    try:
        assert due(catalog, TABLE)[0]
        before = catalog.reads.open_table(TABLE)
        planned = compaction.plan(catalog, TABLE)
        assert planned.status == "planned" and len(planned.tasks) >= 2 and planned.commit_id
        results = []
        for task in planned.tasks:
            worker = Catalog(catalog.settings, heartbeat=False)  # what a step elsewhere opens
            try:
                results.append(compaction.run_task(worker, planned, task))
            finally:
                worker.close()
        assert catalog.reads.open_table(TABLE).version == before.version  # tasks commit nothing
        outcome = compaction.commit(catalog, planned, results, actor="test")
        assert outcome.status == "committed", outcome
        assert outcome.tasks == len(planned.tasks)
        assert outcome.fragments_before == 6 and outcome.fragments_after == 3
        after = catalog.reads.open_table(TABLE)
        assert after.count_rows() == 60 and after.version == outcome.version > before.version
        assert sorted(after.to_reader().read_all().column("id").to_pylist()) == list(range(60))
        # The same commit again (a retried step) replays: still exactly one compaction.
        again = compaction.commit(catalog, planned, results, actor="test")
        assert again.status == "committed" and again.version == outcome.version
        assert again.commit_id == outcome.commit_id
        assert [e.operation for e in catalog.reads.history(TABLE)].count("compact") == 1
        assert not due(catalog, TABLE)[0]
        assert compact_table(catalog, TABLE).status == "nothing-to-do"
    finally:
        catalog.close()


def test_a_plan_with_missing_results_or_foreign_tasks_changes_nothing(tmp_path: Path) -> None:
    catalog = fragmented(tmp_path / "home")
    try:
        planned = compaction.plan(catalog, TABLE)
        version = catalog.reads.open_table(TABLE).version
        first = compaction.run_task(catalog, planned, planned.tasks[0])
        with pytest.raises(InvalidInput, match="task results for"):
            compaction.commit(catalog, planned, [first])
        with pytest.raises(InvalidInput, match="not part of the compaction plan"):
            compaction.run_task(catalog, planned, '{"not": "a task"}')
        assert catalog.reads.open_table(TABLE).version == version
        assert "compact" not in [e.operation for e in catalog.reads.history(TABLE)]
    finally:
        catalog.close()


def test_compact_table_runs_everything_here(tmp_path: Path) -> None:
    catalog = fragmented(tmp_path / "home")
    try:
        outcome = compact_table(catalog, TABLE, actor="test")
        assert outcome.status == "committed" and outcome.fragments_after == 3
        assert compact_table(catalog, TABLE).status == "nothing-to-do"
    finally:
        catalog.close()


def test_a_commit_whose_task_output_an_orphan_reclaim_took_commits_nothing(tmp_path: Path) -> None:
    """Tasks write their fragments without the table's lease and commit later; a reclaim in
    between, past the age gate, takes those files for orphans (nothing registered names them).
    The commit then checks, under the lease, that every file it adds is there: the plan ends
    skipped-stale naming the missing file, nothing is committed, every row still reads, and the
    next plan compacts. Before, the version was registered without its data file: the table's
    current version failed to read (Lance: Not found)."""
    catalog = fragmented(tmp_path / "home")
    try:
        before = catalog.reads.open_table(TABLE)
        planned = compaction.plan(catalog, TABLE)
        results = [compaction.run_task(catalog, planned, task) for task in planned.tasks]
        age_tree(before.record.folder_uri.removeprefix("file://"), TWO_DAYS)
        reclaimed = orphans.reclaim(catalog, TABLE, timedelta(hours=1))
        assert reclaimed.deleted, "the tasks' output was not reclaimed: nothing to show"
        outcome = compaction.commit(catalog, planned, results, actor="test")
        assert outcome.status == "skipped-stale" and "is gone" in outcome.detail["reason"], outcome
        after = catalog.reads.open_table(TABLE)
        assert after.version == before.version
        assert sorted(after.to_reader().read_all().column("id").to_pylist()) == list(range(60))
        assert compact_table(catalog, TABLE, actor="test").status == "committed"
        assert sorted(
            catalog.reads.open_table(TABLE).to_reader().read_all().column("id").to_pylist()
        ) == list(range(60))
    finally:
        catalog.close()


def test_a_version_cleanup_between_the_tasks_and_their_commit_keeps_their_output(tmp_path: Path) -> None:
    """The tasks' fragments are referenced by no manifest until the commit, as an in-flight
    pylance write's are; a version cleanup (under the lease the tasks never take) removing every
    older version in between must leave them: the commit then lands and every row reads."""
    catalog = make_lake(tmp_path / "home", ticket_lifetime_seconds=0.001, reader_max_stale_seconds=0)
    try:
        catalog.tables.create_table(TABLE, rows(0, 10).to_reader())
        for i in range(1, 6):
            catalog.tables.append(TABLE, rows(10 * i, 10).to_reader())
        catalog.policies.set_policy(TABLE, {"compact_min_fragments": 4, "target_rows_per_fragment": 20})
        planned = compaction.plan(catalog, TABLE)
        results = [compaction.run_task(catalog, planned, task) for task in planned.tasks]
        cleaned = catalog.versions.cleanup(TABLE, retention=timedelta(0), retain_versions=1)
        assert cleaned.detail["versions_removed"], cleaned
        outcome = compaction.commit(catalog, planned, results, actor="test")
        assert outcome.status == "committed", outcome
        after = catalog.reads.open_table(TABLE)
        assert sorted(after.to_reader().read_all().column("id").to_pylist()) == list(range(60))
    finally:
        catalog.close()
