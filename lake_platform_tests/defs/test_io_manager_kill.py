"""A step killed with SIGKILL after its commit landed, re-executed from failure in a new run:
the commit applies once (its id derives from the root run of the re-execution)."""

from pathlib import Path

import dagster as dg
import pyarrow as pa
import pytest

from lake_platform.catalog.catalog import Catalog
from lake_platform.settings import load_settings
from lake_platform_tests.dagster_storage import sqlite_instance
from lake_platform_tests.defs import dying_project
from lake_platform_tests.maintenance.helpers import make_lake

TABLE = "p.w.ns.appended"


@pytest.mark.slow
def test_a_step_killed_after_its_commit_applies_once_when_reexecuted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = tmp_path / "home"
    monkeypatch.setenv("LAKE_HOME", str(home))
    with make_lake(home) as catalog:
        catalog.tables.create_table(TABLE, pa.table({"n": pa.array([0], pa.int64())}).to_reader())
    job = dg.reconstructable(dying_project.appended_job)
    with sqlite_instance() as instance:
        monkeypatch.setenv(dying_project.DIE, "1")
        first = dg.execute_job(job, instance=instance, raise_on_error=False)
        monkeypatch.delenv(dying_project.DIE)
        assert not first.success  # the step's process died
        with Catalog(load_settings(home=home)) as catalog:
            assert catalog.reads.open_table(TABLE).count_rows() == 4  # ... after its commit landed

        again = dg.execute_job(
            job,
            instance=instance,
            reexecution_options=dg.ReexecutionOptions.from_failure(first.run_id, instance),
        )
        assert again.success
        (event,) = again.get_asset_materialization_events()
        assert event.materialization.metadata["lake/replayed"].value is True
    with Catalog(load_settings(home=home)) as catalog:
        assert catalog.reads.open_table(TABLE).count_rows() == 4
        assert [e.operation for e in catalog.reads.history(TABLE)] == ["create", "append"]
