"""A user project writing one table in write-audit-publish mode, its blocking check passing only
while the environment's ``LAKE_TEST_AUDIT_PASSES`` is set: a run failed by its audit, then
re-executed from failure once the check is fixed (``test_wap_reexecution.py``). A module of its
own so that ``dagster.execute_job`` can rebuild the job."""

import os

import dagster as dg
import pyarrow as pa

from lake_platform.defs.io_manager import LakeIOManager
from lake_platform.defs.resources import LakeResource

PASSES = "LAKE_TEST_AUDIT_PASSES"


@dg.asset(key=["p", "w", "ns", "audited"], io_manager_key="lake_io")
def audited() -> pa.Table:
    return pa.table({"n": pa.array([1, 2, 3], pa.int64())})


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
