"""What the publish sensor takes of a run: for each table, the branch version the run's latest
materialization of it recorded, on a real Dagster instance and a real registry. A re-execution
whose latest write of a table made no branch leaves that table out (never the failed run's stale
rows); a branch written past that version is refused, nothing published; a branch compacted
since publishes; a multi-asset step's own branches are no publish of the sensor's."""

from collections.abc import Iterator
from pathlib import Path

import dagster as dg
import pyarrow as pa
import pytest

from lake_platform.catalog.catalog import Catalog
from lake_platform.catalog.provenance import Provenance
from lake_platform.defs.wap import run_branch
from lake_platform.settings import load_settings
from lake_platform_tests.dagster_storage import sqlite_instance
from lake_platform_tests.defs import wap_project
from lake_platform_tests.defs.wap_sensor import publish
from lake_platform_tests.maintenance.helpers import make_lake

TABLE = "p.w.ns.audited"


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    home = tmp_path / "home"
    monkeypatch.setenv("LAKE_HOME", str(home))
    monkeypatch.delenv(wap_project.PASSES, raising=False)
    with make_lake(home) as catalog:
        catalog.tables.create_table(TABLE, pa.table({"n": pa.array([0], pa.int64())}).to_reader())
    yield home
    wap_project.ROWS[:] = [1, 2, 3]


def failed_audit(instance: dg.DagsterInstance) -> dg.JobExecutionResult:
    """A run appending 1, 2, 3 on its branch, failed by its blocking check."""
    wap_project.ROWS[:] = [1, 2, 3]
    job = dg.reconstructable(wap_project.audited_job)
    first = dg.execute_job(job, instance=instance, raise_on_error=False)
    assert not first.success
    return first


def reexecute(
    instance: dg.DagsterInstance, first: dg.JobExecutionResult, *, everything: bool = False
) -> dg.JobExecutionResult:
    """``first`` re-executed from failure, or every step of it (the asset's step too)."""
    if everything:
        steps = sorted({e.step_key for e in first.all_events if e.step_key})
        options = dg.ReexecutionOptions(parent_run_id=first.run_id, step_selection=steps)
    else:
        options = dg.ReexecutionOptions.from_failure(first.run_id, instance)
    job = dg.reconstructable(wap_project.audited_job)
    again = dg.execute_job(job, instance=instance, raise_on_error=False, reexecution_options=options)
    assert again.success
    return again


def main_rows(home: Path) -> list[int]:
    with Catalog(load_settings(home=home)) as catalog:
        return sorted(catalog.reads.open_table(TABLE).to_reader().read_all().column("n").to_pylist())


def test_a_reexecution_appending_nothing_leaves_the_failed_runs_rows_unpublished(
    home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The audit refused 1, 2, 3; the user re-runs every step and the asset now appends nothing:
    the successful run wrote no branch, so nothing is published (not the refused rows)."""
    with sqlite_instance() as instance:
        first = failed_audit(instance)
        monkeypatch.setenv(wap_project.PASSES, "1")
        wap_project.ROWS[:] = []
        again = reexecute(instance, first, everything=True)
        (event,) = again.get_asset_materialization_events()
        assert "lake/branch" not in event.materialization.metadata
        skipped = publish(home, instance, again)
        assert isinstance(skipped, dg.SkipReason)
    assert main_rows(home) == [0]
    with Catalog(load_settings(home=home)) as catalog:  # the refused branch stays, to inspect
        assert [b.branch for b in catalog.branches.list_branches(TABLE)] == [run_branch(first.run_id)]


def test_a_branch_written_past_the_recorded_version_is_refused_and_nothing_published(
    home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Rows appended by hand on the failed run's branch after its write: the check re-executed
    from failure audits the version the run recorded, and the publish refuses the branch's head
    (never audited) with InvalidTableState naming it; main stays."""
    with sqlite_instance() as instance:
        first = failed_audit(instance)
        branch = run_branch(first.run_id)
        with Catalog(load_settings(home=home)) as catalog:
            extra = pa.table({"n": pa.array([-99], pa.int64())}).to_reader()
            catalog.branch_writes.append(TABLE, branch, extra, by=Provenance(actor="someone"))
        monkeypatch.setenv(wap_project.PASSES, "1")
        again = reexecute(instance, first)
        with pytest.raises(dg.Failure, match=f"InvalidTableState.*{branch}.*version 2"):
            publish(home, instance, again)
    assert main_rows(home) == [0]
    with Catalog(load_settings(home=home)) as catalog:
        assert [b.branch for b in catalog.branches.list_branches(TABLE)] == [branch]


def test_a_branch_compacted_since_the_write_publishes(home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Compaction (the maintenance sensor compacts live branches) rewrites files, not rows: the
    branch's head past the recorded version by compactions alone is published."""
    with sqlite_instance() as instance:
        first = failed_audit(instance)
        branch = run_branch(first.run_id)
        with Catalog(load_settings(home=home)) as catalog:
            compacted = catalog.branch_compaction.compact_branch(TABLE, branch)
            assert compacted.status == "committed"
        monkeypatch.setenv(wap_project.PASSES, "1")
        again = reexecute(instance, first)
        assert publish(home, instance, again) is None
    assert main_rows(home) == [0, 1, 2, 3]


@dg.multi_asset(
    outs={
        "left": dg.AssetOut(key=["p", "w", "ns", "left"], io_manager_key="lake_io"),
        "right": dg.AssetOut(key=["p", "w", "ns", "right"], io_manager_key="lake_io"),
    }
)
def pair() -> Iterator[dg.Output[pa.Table]]:
    for name in ("left", "right"):
        yield dg.Output(pa.table({"id": pa.array([1], pa.int64())}), name)


def test_a_multi_asset_steps_own_branch_is_no_publish_of_the_sensor(home: Path) -> None:
    """A multi-asset step (no write-audit-publish) published its step branch itself; its
    materializations record that branch, and the sensor passes over them (it failed its tick
    with TableBranchNotFound: the branch was consumed)."""
    from lake_platform.defs.io_manager import LakeIOManager
    from lake_platform.defs.resources import LakeResource

    lake = LakeResource(home=str(home))
    with sqlite_instance() as instance:
        result = dg.materialize([pair], instance=instance, resources={"lake_io": LakeIOManager(lake=lake)})
        events = result.get_asset_materialization_events()
        assert all("lake/branch" in e.materialization.metadata for e in events)
        assert isinstance(publish(home, instance, result), dg.SkipReason)


def test_a_refused_branch_of_the_failed_run_publishes_nothing_of_the_reexecution(
    home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The failed run's ``audited`` branch and the re-execution's ``summary`` branch publish in
    turn: the first refused (written past its recorded version), the other is not published
    either, whichever comes first."""
    monkeypatch.setenv(wap_project.PASSES, "1")
    monkeypatch.setenv(wap_project.SUMMARY_FAILS, "1")
    job = dg.reconstructable(wap_project.summary_job)
    with sqlite_instance() as instance:
        first = dg.execute_job(job, instance=instance, raise_on_error=False)
        assert not first.success
        with Catalog(load_settings(home=home)) as catalog:
            extra = pa.table({"n": pa.array([-99], pa.int64())}).to_reader()
            catalog.branch_writes.append(
                TABLE, run_branch(first.run_id), extra, by=Provenance(actor="someone")
            )
        monkeypatch.delenv(wap_project.SUMMARY_FAILS)
        options = dg.ReexecutionOptions.from_failure(first.run_id, instance)
        again = dg.execute_job(job, instance=instance, raise_on_error=False, reexecution_options=options)
        assert again.success
        with pytest.raises(dg.Failure, match="InvalidTableState"):
            publish(home, instance, again)
    assert main_rows(home) == [0]
    with Catalog(load_settings(home=home)) as catalog:
        assert catalog.reads.open_table("p.w.ns.summary").count_rows() == 0  # created empty, unpublished
        assert [b.branch for b in catalog.branches.list_branches("p.w.ns.summary")] == [
            run_branch(again.run_id)
        ]
