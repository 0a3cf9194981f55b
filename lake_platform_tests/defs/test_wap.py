"""Write-audit-publish on a Dagster instance: a run writes on its branch, its blocking check
reads the branch, main moves only when the publish sensor sees the run succeed.

The instance is in memory: what is asserted is the lake's, and a SQLite instance creates and
migrates an event-log database for every run (0.3 to 0.7 s each). test_wap_publish runs the
publish sensor on SQLite storage."""

from collections.abc import Iterator
from pathlib import Path

import dagster as dg
import pyarrow as pa
import pytest

from lake_platform.catalog.catalog import Catalog
from lake_platform.catalog.provenance import Provenance
from lake_platform.defs.asset_tables import WritePlan
from lake_platform.defs.io_manager import LakeIOManager
from lake_platform.defs.resources import LakeResource
from lake_platform.defs.wap import run_branch, write_on_branch
from lake_platform.settings import load_settings
from lake_platform_tests.defs import wap_project
from lake_platform_tests.defs.wap_sensor import publish
from lake_platform_tests.maintenance.helpers import make_lake

TABLE = "p.w.ns.scores"
#: What the asset writes; a test sets a negative score to fail the audit.
SCORES: list[int] = []


@dg.asset(key=["p", "w", "ns", "scores"], io_manager_key="lake_io", metadata={"write_mode": "append"})
def scores() -> pa.Table:
    return pa.table({"score": pa.array(SCORES, pa.int64())})


@dg.asset_check(asset=scores, blocking=True)
def no_negative_scores(scores: pa.Table) -> dg.AssetCheckResult:
    # Loaded through the IO manager: the branch's version this run wrote, main's rows included.
    values = scores.column("score").to_pylist()
    return dg.AssetCheckResult(passed=min(values) >= 0, metadata={"rows_audited": len(values)})


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    home = tmp_path / "home"
    monkeypatch.setenv("LAKE_HOME", str(home))
    with make_lake(home) as catalog:
        catalog.tables.create_table(TABLE, pa.table({"score": pa.array([1, 2], pa.int64())}).to_reader())
    yield home
    SCORES.clear()


def run(home: Path, instance: dg.DagsterInstance, values: list[int]) -> dg.ExecuteInProcessResult:
    SCORES[:] = values
    lake = LakeResource(home=str(home))
    return dg.materialize(
        [scores, no_negative_scores],
        instance=instance,
        resources={"lake": lake, "lake_io": LakeIOManager(lake=lake, wap=True)},
        raise_on_error=False,
    )


def main_scores(catalog: Catalog) -> list[int]:
    return sorted(catalog.reads.open_table(TABLE).dataset.to_table().column("score").to_pylist())


def test_a_passing_audit_publishes_the_branch_to_main(home: Path) -> None:
    with dg.DagsterInstance.ephemeral() as instance, Catalog(load_settings(home=home)) as catalog:
        result = run(home, instance, [5])
        assert result.success
        branch = run_branch(result.run_id)
        (check,) = result.get_asset_check_evaluations()
        assert check.passed and check.metadata["rows_audited"].value == 3  # read on the branch
        assert main_scores(catalog) == [1, 2]  # audited, not yet published
        assert [b.branch for b in catalog.branches.list_branches(TABLE)] == [branch]

        publish(home, instance, result)
        assert main_scores(catalog) == [1, 2, 5]
        assert catalog.branches.list_branches(TABLE) == []
        assert [e.operation for e in catalog.reads.history(TABLE)][-1] == "publish"
        publish(home, instance, result)  # a sensor tick evaluated again publishes nothing twice
        assert main_scores(catalog) == [1, 2, 5]

        observed = instance.fetch_observations(dg.AssetRecordsFilter(asset_key=scores.key), limit=1).records
        meta = observed[0].asset_observation.metadata
        assert meta["lake/published_from"].value == branch
        assert meta["lake/version"].value == catalog.reads.open_table(TABLE).version


def test_a_failing_blocking_check_leaves_main_and_keeps_the_branch(home: Path) -> None:
    with dg.DagsterInstance.ephemeral() as instance, Catalog(load_settings(home=home)) as catalog:
        before = catalog.reads.open_table(TABLE).version
        result = run(home, instance, [-1])
        assert not result.success
        assert catalog.reads.open_table(TABLE).version == before
        assert main_scores(catalog) == [1, 2]
        branch = run_branch(result.run_id)
        kept = catalog.branches.open_branch(TABLE, branch).dataset.to_table().column("score").to_pylist()
        assert sorted(kept) == [-1, 1, 2]  # inspectable
        refused = publish(home, instance, result, result.get_run_failure_event())
        assert isinstance(refused, dg.SkipReason) and "no_negative_scores" in str(refused.skip_message)
        assert main_scores(catalog) == [1, 2]


@dg.asset(key=["p", "w", "ns", "ranks"], io_manager_key="lake_io", metadata={"write_mode": "overwrite"})
def ranks(scores: pa.Table) -> pa.Table:
    return pa.table({"rank": pa.array(range(1, scores.num_rows + 1), pa.int64())})


def test_a_run_that_wrote_two_tables_publishes_both_in_one_commit(home: Path) -> None:
    with dg.DagsterInstance.ephemeral() as instance, Catalog(load_settings(home=home)) as catalog:
        SCORES[:] = [7]
        lake = LakeResource(home=str(home))
        result = dg.materialize(
            [scores, no_negative_scores, ranks],
            instance=instance,
            resources={"lake": lake, "lake_io": LakeIOManager(lake=lake, wap=True)},
        )
        assert result.success
        publish(home, instance, result)
        assert main_scores(catalog) == [1, 2, 7]
        ranked = catalog.reads.open_table("p.w.ns.ranks")
        assert sorted(ranked.dataset.to_table().column("rank").to_pylist()) == [1, 2, 3]
        # one registry transaction: the two publish entries share the commit id, each head
        # names the other table's (a reader never holds one published and not the other)
        entries = [catalog.reads.history(t)[-1] for t in (TABLE, "p.w.ns.ranks")]
        assert [e.operation for e in entries] == ["publish", "publish"]
        assert entries[0].commit_id.rsplit("-t", 1)[0] == entries[1].commit_id.rsplit("-t", 1)[0]


VISITS, PRICES = "p.w.ns.visits", "p.w.ns.prices"
days = dg.DailyPartitionsDefinition(start_date="2024-01-01", end_date="2024-01-05")
#: What ``visits`` returns for a day.
DAY_VISITS: dict[str, list[int]] = {}


@dg.asset(
    key=["p", "w", "ns", "visits"],
    io_manager_key="lake_io",
    partitions_def=days,
    metadata={"partition_expr": "day"},
)
def visits(context: dg.AssetExecutionContext) -> pa.Table:
    counts = DAY_VISITS[context.partition_key]
    return pa.table({"day": [context.partition_key] * len(counts), "n": pa.array(counts, pa.int64())})


@dg.asset_check(asset=visits, blocking=True)
def no_negative_visits(visits: pa.Table) -> dg.AssetCheckResult:
    # The branch's version this run wrote (an unpartitioned check loads the whole table).
    values = visits.column("n").to_pylist()
    return dg.AssetCheckResult(passed=min(values) >= 0, metadata={"rows_audited": len(values)})


@dg.asset(
    key=["p", "w", "ns", "prices"],
    io_manager_key="lake_io",
    metadata={"write_mode": "merge", "key_columns": ["k"]},
)
def prices() -> pa.Table:
    return pa.table({"k": pa.array([2, 3], pa.int64()), "v": ["B", "C"]})


def contents(catalog: Catalog, table: str, branch: str | None = None) -> list[tuple[object, ...]]:
    snap = catalog.branches.open_branch(table, branch) if branch else catalog.reads.open_table(table)
    return sorted(zip(*snap.dataset.to_table().to_pydict().values(), strict=True))


def partitioned_and_merged_run(
    home: Path, instance: dg.DagsterInstance, day_one: list[int]
) -> dg.ExecuteInProcessResult:
    """One WAP run of a partitioned asset (day one replaced) and a merge asset, on tables main
    already holds: visits (day one: 5; day two: 6) and prices (1 a, 2 b)."""
    with Catalog(load_settings(home=home)) as catalog:
        for table, rows in [
            (VISITS, pa.table({"day": ["2024-01-01", "2024-01-02"], "n": pa.array([5, 6], pa.int64())})),
            (PRICES, pa.table({"k": pa.array([1, 2], pa.int64()), "v": ["a", "b"]})),
        ]:
            catalog.tables.create_table(table, rows.to_reader())
    DAY_VISITS["2024-01-01"] = day_one
    lake = LakeResource(home=str(home))
    return dg.materialize(
        [visits, no_negative_visits, prices],
        partition_key="2024-01-01",
        instance=instance,
        resources={"lake": lake, "lake_io": LakeIOManager(lake=lake, wap=True)},
        raise_on_error=False,
    )


def test_a_partitioned_and_a_merge_asset_are_audited_on_the_branch_and_published_together(home: Path) -> None:
    with dg.DagsterInstance.ephemeral() as instance, Catalog(load_settings(home=home)) as catalog:
        result = partitioned_and_merged_run(home, instance, [1, 1])
        assert result.success
        branch = run_branch(result.run_id)
        (check,) = result.get_asset_check_evaluations()
        assert check.passed and check.metadata["rows_audited"].value == 3  # 1, 1 and day two's 6
        assert contents(catalog, VISITS) == [("2024-01-01", 5), ("2024-01-02", 6)]  # not yet published
        assert contents(catalog, PRICES) == [(1, "a"), (2, "b")]
        # on the branch: the partition replaced exactly (both identical rows), the merge applied
        assert contents(catalog, VISITS, branch) == [("2024-01-01", 1), ("2024-01-01", 1), ("2024-01-02", 6)]
        assert contents(catalog, PRICES, branch) == [(1, "a"), (2, "B"), (3, "C")]

        publish(home, instance, result)
        assert contents(catalog, VISITS) == [("2024-01-01", 1), ("2024-01-01", 1), ("2024-01-02", 6)]
        assert contents(catalog, PRICES) == [(1, "a"), (2, "B"), (3, "C")]
        entries = [catalog.reads.history(t)[-1] for t in (VISITS, PRICES)]
        assert [e.operation for e in entries] == ["publish", "publish"]
        assert entries[0].commit_id.rsplit("-t", 1)[0] == entries[1].commit_id.rsplit("-t", 1)[0]
        written = [e.operation for t in (VISITS, PRICES) for e in catalog.reads.history(t)]
        assert "replace" in written and "merge" in written


def test_a_failing_check_of_a_partitioned_asset_leaves_both_mains_and_keeps_the_branch(home: Path) -> None:
    with dg.DagsterInstance.ephemeral() as instance, Catalog(load_settings(home=home)) as catalog:
        result = partitioned_and_merged_run(home, instance, [-1])
        assert not result.success
        before = {t: catalog.reads.open_table(t).version for t in (VISITS, PRICES)}
        assert before == {VISITS: 1, PRICES: 1}
        refused = publish(home, instance, result, result.get_run_failure_event())
        assert isinstance(refused, dg.SkipReason) and "no_negative_visits" in str(refused.skip_message)
        assert {t: catalog.reads.open_table(t).version for t in (VISITS, PRICES)} == before
        assert contents(catalog, VISITS) == [("2024-01-01", 5), ("2024-01-02", 6)]
        branch = run_branch(result.run_id)
        assert contents(catalog, VISITS, branch) == [("2024-01-01", -1), ("2024-01-02", 6)]  # inspectable


def test_a_failed_audit_reexecuted_from_failure_publishes_the_first_runs_branch(
    home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The check is fixed and the run re-executed from failure: only the check runs again, on
    the branch the failed run wrote, and the publish sensor publishes that branch."""
    with Catalog(load_settings(home=home)) as catalog:
        catalog.tables.create_table("p.w.ns.audited", pa.table({"n": pa.array([0], pa.int64())}).to_reader())
    job = dg.reconstructable(wap_project.audited_job)
    with dg.DagsterInstance.ephemeral() as instance:
        first = dg.execute_job(job, instance=instance, raise_on_error=False)
        assert not first.success  # the audit failed: main untouched
        monkeypatch.setenv(wap_project.PASSES, "1")
        options = dg.ReexecutionOptions.from_failure(first.run_id, instance)
        again = dg.execute_job(job, instance=instance, raise_on_error=False, reexecution_options=options)
        assert again.success
        assert not again.get_asset_materialization_events()  # the asset step did not run again
        assert publish(home, instance, again) is None
    with Catalog(load_settings(home=home)) as catalog:
        rows = catalog.reads.open_table("p.w.ns.audited").to_reader().read_all().column("n").to_pylist()
        assert sorted(rows) == [0, 1, 2, 3]
        assert catalog.branches.list_branches("p.w.ns.audited") == []
        assert [e.operation for e in catalog.reads.history("p.w.ns.audited")][-1] == "publish"


@dg.asset(
    key=["p", "w", "ns", "fresh"],
    io_manager_key="lake_io",
    partitions_def=dg.DailyPartitionsDefinition(start_date="2024-01-01"),
    metadata={"partition_expr": "day"},
)
def fresh() -> pa.Table:
    return pa.table({"day": ["2024-01-09"], "v": [1]})  # not the partition the run writes


@dg.asset(key=["p", "w", "ns", "scores"], io_manager_key="lake_io")
def scores_as_text() -> pa.Table:
    return pa.table({"score": ["high"]})  # the table's score is an int64


def test_an_output_refused_by_its_rows_or_schema_creates_no_table_and_no_branch(home: Path) -> None:
    lake = LakeResource(home=str(home))
    resources = {"lake": lake, "lake_io": LakeIOManager(lake=lake, wap=True)}
    with dg.DagsterInstance.ephemeral() as instance, Catalog(load_settings(home=home)) as catalog:
        for asset, key in [(fresh, "2024-01-02"), (scores_as_text, None)]:
            result = dg.materialize(
                [asset], partition_key=key, instance=instance, resources=resources, raise_on_error=False
            )
            (failure,) = result.get_step_failure_events()
            assert "InvalidInput" in str(
                failure.event_specific_data.error
            ) or "TableSchemaValidationError" in str(failure.event_specific_data.error)
        assert [t.name for t in catalog.reads.list_tables()] == [TABLE]  # fresh was never created
        assert catalog.branches.list_branches(TABLE) == []
        assert [e.operation for e in catalog.reads.history(TABLE)] == ["create"]


def test_another_runs_read_never_sees_a_branch_its_audit_refused(home: Path) -> None:
    """A run whose audit failed recorded its materialization on its branch; a later run reading
    the asset (not writing it) reads main, never the refused rows, until a run publishes."""
    lake = LakeResource(home=str(home))
    plain = {"lake": lake, "lake_io": LakeIOManager(lake=lake)}
    with dg.DagsterInstance.ephemeral() as instance, Catalog(load_settings(home=home)) as catalog:
        assert not run(home, instance, [-1]).success
        later = dg.materialize([scores, ranks], selection=[ranks.key], instance=instance, resources=plain)
        assert later.success
        ranked = catalog.reads.open_table("p.w.ns.ranks").dataset.to_table().column("rank").to_pylist()
        assert ranked == [1, 2]  # main's two scores, not the branch's three
        passed = run(home, instance, [5])
        publish(home, instance, passed)
        dg.materialize([scores, ranks], selection=[ranks.key], instance=instance, resources=plain)
        ranked = catalog.reads.open_table("p.w.ns.ranks").dataset.to_table().column("rank").to_pylist()
        assert ranked == [1, 2, 3]  # the published branch: main's 1, 2 and 5


def test_two_runs_creating_one_new_table_both_write_on_their_branches(tmp_path: Path) -> None:
    """Run b finds no table, and run a creates it (and writes on its branch) while b's create is
    under way, past its check (the catalog's hook point): b branches from the table a made and
    writes, where its create failed TableAlreadyExists."""
    new = "p.w.ns.fresh"

    def ids(*values: int) -> pa.RecordBatchReader:
        return pa.table({"id": pa.array(values, pa.int64())}).to_reader()

    def by(run: str) -> Provenance:
        return Provenance(actor="dagster", run_id=run, commit_id=f"step-{run}-0001")

    with make_lake(tmp_path / "home") as a:
        raced: list[object] = []

        def a_creates_it(point: str) -> None:
            if point == "create:before-write" and not raced:
                raced.append(write_on_branch(a, new, "run_a", ids(1), WritePlan("append"), by("a")))

        with Catalog(a.settings, hook=a_creates_it) as b:
            written = write_on_branch(b, new, "run_b", ids(2, 3), WritePlan("append"), by("b"))
        assert raced and not written.replayed
        assert a.reads.describe_table(new, with_stats=False).current_version == 1  # a's empty create
        on_branch = {
            r: a.branches.open_branch(new, r).to_reader().read_all()["id"].to_pylist()
            for r in ("run_a", "run_b")
        }
        assert on_branch == {"run_a": [1], "run_b": [2, 3]}
