"""A user project whose step process is killed (SIGKILL) right after its commit lands, when
``LAKE_TEST_DIE_AFTER_COMMIT`` is set in the step's environment: the kill -9 a step re-executed
from failure must survive (``test_io_manager_kill.py``). A module of its own so that Dagster's
multiprocess executor can rebuild the job in the step's process."""

import os
import signal

import dagster as dg
import pyarrow as pa

from lake_platform.defs.io_manager import LakeIOManager
from lake_platform.defs.resources import LakeResource

DIE = "LAKE_TEST_DIE_AFTER_COMMIT"


class DyingIOManager(LakeIOManager):
    def handle_output(self, context: dg.OutputContext, obj: object) -> None:
        super().handle_output(context, obj)
        if os.environ.get(DIE):
            os.kill(os.getpid(), signal.SIGKILL)  # before Dagster records the step's success


@dg.asset(key=["p", "w", "ns", "appended"], io_manager_key="lake_io", metadata={"write_mode": "append"})
def appended() -> pa.Table:
    return pa.table({"n": pa.array([1, 2, 3], pa.int64())})


def appended_job() -> dg.JobDefinition:
    """The job, built where it runs (LakeResource reads LAKE_HOME from the environment)."""
    definitions = dg.Definitions(
        assets=[appended],
        jobs=[dg.define_asset_job("appended_job", [appended], executor_def=dg.multiprocess_executor)],
        resources={"lake_io": DyingIOManager(lake=LakeResource())},
    )
    return definitions.resolve_job_def("appended_job")
