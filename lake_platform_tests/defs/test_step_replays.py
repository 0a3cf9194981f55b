"""A retried step's commit id replays only the commit it made: the IO manager's write on main and
write-audit-publish's write on a run's branch refuse an id that landed for another table or line,
instead of answering "written" for a write that never happened; a replayed step shows the rows
its commit wrote."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import dagster as dg
import pyarrow as pa
import pytest

from lake_platform.catalog.catalog import Catalog
from lake_platform.catalog.provenance import Provenance
from lake_platform.defs.asset_tables import WritePlan
from lake_platform.defs.io_manager import LakeIOManager, write
from lake_platform.defs.resources import LakeResource
from lake_platform.defs.wap import write_on_branch
from lake_platform.errors import InvalidInput
from lake_platform_tests.maintenance.helpers import make_lake

APPEND = WritePlan("append")


def rows(*ids: int) -> pa.RecordBatchReader:
    return pa.table({"id": pa.array(ids, pa.int64())}).to_reader()


@pytest.fixture
def catalog(tmp_path: Path) -> Iterator[Catalog]:
    with make_lake(tmp_path / "home") as catalog:
        catalog.tables.create_table("p.w.ns.a", rows(1))
        catalog.tables.create_table("p.w.ns.b", rows(1))
        yield catalog


def heads(catalog: Catalog) -> dict[str, int]:
    return {t: catalog.reads.describe_table(f"p.w.ns.{t}", with_stats=False).current_version for t in "ab"}


def test_the_io_managers_retry_replays_its_own_commit(catalog: Catalog) -> None:
    by = Provenance(actor="dagster", commit_id="step-commit-0001")
    first = write(catalog, "p.w.ns.a", rows(2), APPEND, by)
    again = write(catalog, "p.w.ns.a", rows(2), APPEND, by)
    assert (first.replayed, again.replayed, again.version) == (False, True, first.version)
    assert heads(catalog) == {"a": 2, "b": 1}


def test_the_io_manager_refuses_an_id_another_tables_commit_landed_under(catalog: Catalog) -> None:
    by = Provenance(actor="dagster", commit_id="step-commit-0002")
    write(catalog, "p.w.ns.a", rows(2), APPEND, by)
    with pytest.raises(InvalidInput, match="already names append of p.w.ns.a on main"):
        write(catalog, "p.w.ns.b", rows(3), APPEND, by)
    assert heads(catalog) == {"a": 2, "b": 1}


def test_a_wap_write_refuses_an_id_mains_commit_landed_under(catalog: Catalog) -> None:
    by = Provenance(actor="dagster", commit_id="step-commit-0003")
    write(catalog, "p.w.ns.a", rows(2), APPEND, by)
    with pytest.raises(InvalidInput, match="already names append of p.w.ns.a on main"):
        write_on_branch(catalog, "p.w.ns.a", "run_1", rows(3), APPEND, by)
    assert heads(catalog) == {"a": 2, "b": 1}
    on_branch = Provenance(actor="dagster", commit_id="step-commit-0004")
    again = write_on_branch(catalog, "p.w.ns.a", "run_1", rows(3), APPEND, on_branch)
    assert not again.replayed
    replay = write_on_branch(catalog, "p.w.ns.a", "run_1", rows(3), APPEND, on_branch)
    assert (replay.replayed, replay.version) == (True, again.version)


@dg.asset(
    key=["p", "w", "ns", "days"],
    io_manager_key="lake_io",
    partitions_def=dg.DailyPartitionsDefinition(start_date="2024-01-01"),
    metadata={"partition_expr": "day"},
)
def days(context) -> pa.Table:  # unannotated: this module's annotations are strings
    return pa.table({"day": [context.partition_key] * 3, "n": [1, 2, 3]})


def test_a_replayed_step_records_the_rows_its_commit_wrote(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A step executed again under its run id (its process died after the commit) writes
    nothing, and its materialization still shows the rows and bytes the commit wrote: the
    partition's row count in the UI is the partition's, not 0."""
    home = tmp_path / "home"
    monkeypatch.setenv("LAKE_HOME", str(home))
    make_lake(home).close()

    lake = LakeResource(home=str(home))
    job = dg.Definitions(
        assets=[days],
        jobs=[dg.define_asset_job("days_job", [days])],
        resources={"lake": lake, "lake_io": LakeIOManager(lake=lake)},
    ).resolve_job_def("days_job")
    run_id = str(uuid.uuid4())
    shown = []
    for _ in range(2):
        with dg.DagsterInstance.ephemeral() as instance:
            result = job.execute_in_process(instance=instance, partition_key="2024-01-02", run_id=run_id)
            (event,) = result.get_asset_materialization_events()
            meta = event.materialization.metadata
            keys = ("lake/replayed", "dagster/partition_row_count", "lake/rows_written", "lake/bytes_written")
            shown.append(tuple(meta[k].value if k in meta else None for k in keys))
    assert shown[0][:3] == (False, 3, 3) and shown[0][3] > 0
    assert shown[1] == (True, 3, 3, None)  # the commit's rows; no bytes read by this attempt
