"""The write-audit-publish sensor evaluated for one run, as the Dagster daemon does when the run
ends: what the tests of publishing call instead of running a daemon."""

from __future__ import annotations

from pathlib import Path

import dagster as dg

from lake_platform.defs.resources import LakeResource
from lake_platform.defs.wap import wap_publish_sensor


def publish(
    home: Path,
    instance: dg.DagsterInstance,
    result: dg.ExecuteInProcessResult | dg.JobExecutionResult,
    event: object = None,
) -> object:
    """The sensor's answer for ``result``'s run (``event``: its success event unless given)."""
    context = dg.build_run_status_sensor_context(
        sensor_name=wap_publish_sensor.name,
        dagster_event=event or result.get_run_success_event(),
        dagster_instance=instance,
        dagster_run=result.dagster_run,
        resources={"lake": LakeResource(home=str(home))},
    )
    return wap_publish_sensor(context)
