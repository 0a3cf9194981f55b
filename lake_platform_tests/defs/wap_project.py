"""A user project writing one table in write-audit-publish mode, its blocking check passing only
while the environment's ``LAKE_TEST_AUDIT_PASSES`` is set: a run failed by its audit, then
re-executed from failure once the check is fixed (``test_wap.py``, ``test_wap_publish.py``). A
module of its own so that ``dagster.execute_job`` can rebuild the job."""

import os

import dagster as dg
import pyarrow as pa

from lake_platform.defs.io_manager import LakeIOManager
from lake_platform.defs.resources import LakeResource

PASSES = "LAKE_TEST_AUDIT_PASSES"
#: What the asset appends (a test changes it between a run and its re-execution; the job runs
#: in process).
ROWS: list[int] = [1, 2, 3]


@dg.asset(key=["p", "w", "ns", "audited"], io_manager_key="lake_io")
def audited() -> pa.Table:
    return pa.table({"n": pa.array(ROWS, pa.int64())})


@dg.asset_check(asset=audited, blocking=True)
def audit_passes(audited: pa.Table) -> dg.AssetCheckResult:
    return dg.AssetCheckResult(passed=bool(os.environ.get(PASSES)), metadata={"rows": audited.num_rows})


def audited_job() -> dg.JobDefinition:
    """The job, built where it runs (LakeResource reads LAKE_HOME from the environment)."""
    lake = LakeResource()
    definitions = dg.Definitions(
        assets=[audited],
        asset_checks=[audit_passes],
        jobs=[dg.define_asset_job("audited_job", [audited], executor_def=dg.in_process_executor)],
        resources={"lake": lake, "lake_io": LakeIOManager(lake=lake, wap=True)},
    )
    return definitions.resolve_job_def("audited_job")


#: Set: ``summary`` fails (a downstream step failing the run after ``audited`` wrote its branch).
SUMMARY_FAILS = "LAKE_TEST_SUMMARY_FAILS"


@dg.asset(key=["p", "w", "ns", "summary"], io_manager_key="lake_io")
def summary(audited: pa.Table) -> pa.Table:
    if os.environ.get(SUMMARY_FAILS):
        raise RuntimeError("summary failed")
    return pa.table({"rows": pa.array([audited.num_rows], pa.int64())})


def summary_job() -> dg.JobDefinition:
    """``audited`` (its check passing while ``PASSES`` is set) and ``summary`` downstream of it."""
    lake = LakeResource()
    definitions = dg.Definitions(
        assets=[audited, summary],
        asset_checks=[audit_passes],
        jobs=[dg.define_asset_job("summary_job", [audited, summary], executor_def=dg.in_process_executor)],
        resources={"lake": lake, "lake_io": LakeIOManager(lake=lake, wap=True)},
    )
    return definitions.resolve_job_def("summary_job")
