"""A code location for the run-queue test: one asset on the platform's table partitions whose
runs hold until the test releases them (a file appears in the folder the run's tag names), so
the queue's decisions can be seen."""

import time
from pathlib import Path

import dagster as dg

from lake_platform.defs.partitions import tables

#: The run tag naming the test's gate folder: one code server serves the tests of both storages.
GATE_TAG = "lake_test/gate"


@dg.asset(partitions_def=tables)
def held(context: dg.AssetExecutionContext) -> None:
    gate = Path(context.run.tags[GATE_TAG])
    (gate / f"started-{context.run.run_id}").touch()
    while not (gate / "release").exists():  # the workload: a write that takes a while
        time.sleep(0.05)


# In the run worker's own process: a step process per run would only add a start-up to wait for.
held_job = dg.define_asset_job("held_job", [held], executor_def=dg.in_process_executor)
defs = dg.Definitions(assets=[held], jobs=[held_job])
