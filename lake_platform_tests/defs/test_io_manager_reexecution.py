"""A re-execution writes again what its parent run's step wrote and recorded ("Re-execute all",
or the step selected): a new materialization of the asset, as a new run's is. Only a step that
never succeeded in the run it re-executes (its process died after its commit landed) finds that
commit and writes nothing (``test_io_manager_kill.py``)."""

from pathlib import Path

import dagster as dg
import pyarrow as pa
import pytest

from lake_platform.catalog.catalog import Catalog
from lake_platform.defs.io_manager import LakeIOManager
from lake_platform.defs.resources import LakeResource
from lake_platform.settings import load_settings
from lake_platform_tests.maintenance.helpers import make_lake

TABLE = "p.w.ns.snapshot"
#: What the asset returns: the source it snapshots, changed between runs by the test.
SOURCE: list[int] = []


@dg.asset(key=TABLE.split("."), io_manager_key="lake_io", metadata={"write_mode": "overwrite"})
def snapshot() -> pa.Table:
    return pa.table({"n": pa.array(SOURCE, pa.int64())})


def snapshot_job() -> dg.JobDefinition:
    """The job, built where it runs (LakeResource reads LAKE_HOME from the environment)."""
    return dg.Definitions(
        assets=[snapshot],
        jobs=[dg.define_asset_job("snapshot_job", [snapshot], executor_def=dg.in_process_executor)],
        resources={"lake_io": LakeIOManager(lake=LakeResource())},
    ).resolve_job_def("snapshot_job")


def test_a_succeeded_step_reexecuted_writes_the_assets_new_value(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = tmp_path / "home"
    monkeypatch.setenv("LAKE_HOME", str(home))
    make_lake(home).close()
    job = dg.reconstructable(snapshot_job)
    with dg.DagsterInstance.ephemeral() as instance:
        SOURCE[:] = [1, 2]
        first = dg.execute_job(job, instance=instance)
        SOURCE[:] = [7]  # the source changed: the user re-executes the run to snapshot it again
        all_steps = dg.ReexecutionOptions(parent_run_id=first.run_id, step_selection=["p__w__ns__snapshot"])
        again = dg.execute_job(job, instance=instance, reexecution_options=all_steps)
    assert first.success and again.success
    (event,) = again.get_asset_materialization_events()
    meta = event.materialization.metadata
    assert (meta["lake/replayed"].value, meta["lake/rows_written"].value) == (False, 1)
    with Catalog(load_settings(home=home)) as catalog:
        table = catalog.reads.open_table(TABLE)
        assert table.dataset.to_table()["n"].to_pylist() == [7]
        assert meta["lake/version"].value == table.version
        assert [e.operation for e in catalog.reads.history(TABLE)] == ["create", "overwrite"]
