"""Keeps the table partitions in step with the registry."""

import dagster as dg

from lake_platform.defs.partitions import tables
from lake_platform.defs.resources import LakeResource


@dg.sensor(
    minimum_interval_seconds=30,
    default_status=dg.DefaultSensorStatus.RUNNING,
    description="Adds a partition for each newly registered table and removes the partitions of dropped "
    "tables (their run history stays).",
)
def table_partitions_sensor(context: dg.SensorEvaluationContext, lake: LakeResource) -> dg.SensorResult:
    # One registry prefix scan of table records per tick (no storage I/O): O(tables), a few ms
    # per thousand tables on either backend.
    with lake.catalog() as catalog:
        registered = {r.name for r in catalog.reads.list_tables()}
    known = set(context.instance.get_dynamic_partitions(tables.name))
    add, remove = sorted(registered - known), sorted(known - registered)
    requests = []
    if add:
        requests.append(tables.build_add_request(add))
    if remove:
        requests.append(tables.build_delete_request(remove))
    if not requests:
        return dg.SensorResult(skip_reason=dg.SkipReason(f"{len(known)} table partitions, in step"))
    context.log.info("partitions: +%s -%s", add, remove)
    return dg.SensorResult(dynamic_partitions_requests=requests)
