"""Compaction as soon as a table or one of its branches crosses its threshold, whoever wrote it
(the Lake IO manager, a write-audit-publish run, a REST or Flight client, the CLI), under the
policy of its own scope.

``compaction_sensor`` looks every 15 s at the registry's table heads (one registry scan, no
storage I/O) and evaluates the tables whose main version moved since its last tick, plus a few
others round-robin (a policy changed, a branch was written: a branch write does not move main):
each against its effective policy (``compact_enabled``, ``compact_min_fragments``: the table's
own policy, else its namespace's, warehouse's, project's, else the defaults). Main due is
compacted by ``table_compaction``; each live branch of an evaluated table whose head reached the
same threshold by ``branch_compaction`` (``catalog.branch_compaction``). A hot table is compacted
within a tick and a run of crossing its threshold; a table nobody writes costs one registry
record per tick.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import dagster as dg

from lake_platform.defs.maintenance import branch_compaction_job, table_compaction_job
from lake_platform.defs.partitions import tables
from lake_platform.defs.resources import LakeResource
from lake_platform.defs.table_assets import TickTables

if TYPE_CHECKING:
    from lake_platform.catalog.catalog import Catalog

#: Moved tables a tick evaluates (each one manifest read for its fragment count, one more per
#: branch); the rest wait for the next tick, in name order.
EVALUATED_PER_TICK = 50
#: Tables evaluated per tick although main did not move, round-robin.
SWEEP_PER_TICK = 10


def _branch_requests(catalog: Catalog, table: str, threshold: int, reasons: list[str]) -> list[dg.RunRequest]:
    """One request per live branch of ``table`` whose head holds ``threshold`` fragments or more."""
    requests = []
    for info in catalog.branches.list_branches(table):
        head = catalog.branches.open_branch(table, info.branch)
        fragments = len(head.dataset.get_fragments())
        if fragments < threshold:
            continue
        reasons.append(f"{table}@{info.branch}: {fragments} fragments, threshold {threshold}")
        requests.append(
            dg.RunRequest(
                job_name=branch_compaction_job.name,
                partition_key=table,
                run_key=f"compact:{table}@{info.branch}:v{head.version}",
                run_config={"ops": {"compact_branch": {"config": {"branch": info.branch}}}},
                tags={"lake/trigger": "fragment-count", "lake/branch": info.branch},
            )
        )
    return requests


@dg.sensor(
    jobs=[table_compaction_job, branch_compaction_job],
    minimum_interval_seconds=15,
    default_status=dg.DefaultSensorStatus.RUNNING,
    description="Requests compaction of each table (main) and each of its branches whose fragment count "
    "reached the threshold of its scope's policy (table, namespace, warehouse, project): the tables "
    "whose version moved, plus a few others per tick.",
)
def compaction_sensor(context: dg.SensorEvaluationContext, lake: LakeResource) -> dg.SensorResult:
    from lake_platform.errors import TableNotFound
    from lake_platform.maintenance.compaction import due

    requests: list[dg.RunRequest] = []
    reasons: list[str] = []
    with lake.catalog() as catalog:
        tick = TickTables.of(catalog, context.cursor, EVALUATED_PER_TICK, SWEEP_PER_TICK)
        for table in tick.visit():
            try:
                is_due, why, _, threshold = due(catalog, table)
                enabled = catalog.policies.effective_policy(table).policy.compact_enabled
                branch_requests = _branch_requests(catalog, table, threshold, reasons) if enabled else []
            except TableNotFound:
                continue  # dropped since the scan
            reasons.append(f"{table}: {why}")
            if is_due:
                requests.append(
                    dg.RunRequest(
                        job_name=table_compaction_job.name,
                        partition_key=table,
                        run_key=f"compact:{table}:v{tick.version(table)}",
                        tags={"lake/trigger": "table-moved" if table in tick.moved else "fragment-count"},
                    )
                )
            requests += branch_requests
    cursor = tick.cursor()
    if not requests:
        return dg.SensorResult(skip_reason=dg.SkipReason("; ".join(reasons) or "no tables"), cursor=cursor)
    known = set(context.instance.get_dynamic_partitions(tables.name))
    missing = sorted({r.partition_key for r in requests if r.partition_key not in known})
    return dg.SensorResult(
        run_requests=requests,
        dynamic_partitions_requests=[tables.build_add_request(missing)] if missing else [],
        cursor=cursor,
    )
