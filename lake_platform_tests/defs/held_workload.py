"""A code location for the run-queue test: one asset on the platform's table partitions whose
runs hold until the test releases them (a file appears), so the queue's decisions can be seen."""

import os
import time
from pathlib import Path

import dagster as dg

from lake_platform.defs.partitions import tables


@dg.asset(partitions_def=tables)
def held(context: dg.AssetExecutionContext) -> None:
    gate = Path(os.environ["LAKE_TEST_GATE"])
    (gate / f"started-{context.run.run_id}").touch()
    while not (gate / "release").exists():  # the workload: a write that takes a while
        time.sleep(0.05)


# In the run worker's own process: a step process per run would only add a start-up to wait for.
held_job = dg.define_asset_job("held_job", [held], executor_def=dg.in_process_executor)
defs = dg.Definitions(assets=[held], jobs=[held_job])
