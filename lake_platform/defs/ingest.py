"""Inbox ingest: a sensor that requests one run per table with the batch of new files, and the
partitioned asset that streams them into the table through the catalog (exactly once)."""

import json
from typing import TYPE_CHECKING

import dagster as dg

from lake_platform.defs.errors import RETRY, lake_errors
from lake_platform.defs.partitions import tables
from lake_platform.defs.resources import ACTOR, InboxResource, LakeResource
from lake_platform.errors import InvalidInput

if TYPE_CHECKING:
    pass


class InboxFileConfig(dg.Config):
    key: str
    size: int
    mtime_ns: int = 0
    etag: str = ""


class IngestConfig(dg.Config):
    files: list[InboxFileConfig] = []  # noqa: RUF012 - a pydantic field: each instance gets a copy


@dg.asset(
    partitions_def=tables,
    group_name="lake",
    kinds={"lance"},
    retry_policy=RETRY,
    description="Files landed in the table's inbox folder, appended through the catalog in one commit "
    "per run (exactly once; unreadable files are quarantined).",
)
def ingested(
    context: dg.AssetExecutionContext, config: IngestConfig, lake: LakeResource, inbox: InboxResource
) -> dg.MaterializeResult:
    from lake_platform.maintenance.inbox import InboxFile
    from lake_platform.maintenance.ingest import ingest_batch

    table = context.partition_key
    if not config.files:
        return dg.MaterializeResult(metadata={"table": table, "status": "nothing to do", "files": 0})
    files = [InboxFile(f.key, f.size, f.mtime_ns, f.etag) for f in config.files]
    with lake_errors(), lake.catalog() as catalog:
        # A file named twice is refused, and a replay told as its commit logged it, by ingest_batch.
        outcome = ingest_batch(catalog, inbox.open(), table, files, actor=ACTOR, run_id=context.run.run_id)
        info = catalog.reads.describe_table(table)
    context.log.info("ingest of %s: %s, version %s", table, outcome.status, outcome.version)
    return dg.MaterializeResult(
        metadata={
            "table": table,
            "status": outcome.status,
            "version": outcome.version if outcome.version is not None else info.current_version,
            "rows": outcome.rows,
            "bytes": outcome.bytes,
            "files": len(outcome.files),
            "commit_id": outcome.commit_id,
            "fragments": info.fragments or 0,
            "ingested_files": dg.MetadataValue.json(outcome.files),
            "quarantined": dg.MetadataValue.json(outcome.quarantined),
            "skipped": dg.MetadataValue.json(outcome.skipped),
        }
    )


#: What an operator does about a cursor the sensor refuses.
RESET = (
    "Clear the cursor (the sensor's page in the UI) to list every inbox folder again; "
    "files already ingested are skipped"
)


def read_cursor(raw: str | None) -> tuple[dict[str, str | None], str]:
    """The inbox sensor's cursor as it writes it: ``{"tables": {table: cursor}, "last": table}``
    (the per-table listing cursors and the table served last). Anything else (an operator's
    edit in the UI) is refused by name, before any listing; a table's cursor its inbox cannot
    parse is refused when that table is listed. Either way the tick requests nothing."""
    if not raw:
        return {}, ""
    try:
        state = json.loads(raw)
    except json.JSONDecodeError:
        state = None
    tables = state.get("tables", {}) if isinstance(state, dict) else None
    last = state.get("last", "") if isinstance(state, dict) else None
    if (
        not isinstance(tables, dict)
        or not isinstance(last, str)
        or not all(isinstance(v, str) or v is None for v in tables.values())
    ):
        raise InvalidInput(
            "the inbox sensor's cursor is not one it wrote "
            f'({{"tables": {{table: cursor}}, "last": table}}): {raw[:200]!r}. {RESET}'
        )
    return tables, last


@dg.sensor(
    target=[ingested],
    minimum_interval_seconds=30,
    default_status=dg.DefaultSensorStatus.RUNNING,
    description="Lists each registered table's inbox folder after a per-table cursor and requests one "
    "ingest run per table and batch of new files.",
)
def inbox_sensor(
    context: dg.SensorEvaluationContext, lake: LakeResource, inbox: InboxResource
) -> dg.SensorResult | dg.SkipReason:
    from lake_platform.maintenance.ingest import batch_commit_id

    cursors, last = read_cursor(context.cursor)
    with lake.catalog() as catalog:
        names = sorted(r.name for r in catalog.reads.list_tables())
    box = inbox.open()
    # Round-robin: start after the table served last, so a busy table cannot starve the others.
    order = [n for n in names if n > last] + [n for n in names if n <= last]
    budget = inbox.files_per_tick
    requests: list[dg.RunRequest] = []
    served = last
    for table in order:
        if budget <= 0:
            break
        try:
            files, cursor = box.list_new(table, cursors.get(table), budget)
        except ValueError as exc:  # a cursor the inbox cannot parse: never one it wrote
            raise InvalidInput(
                f"the inbox sensor's cursor of {table} is not one it wrote: {exc}. {RESET}"
            ) from None
        cursors[table] = cursor
        served = table
        budget -= len(files)
        for start in range(0, len(files), inbox.files_per_run):
            chunk = files[start : start + inbox.files_per_run]
            cid = batch_commit_id(table, chunk)
            requests.append(
                dg.RunRequest(
                    partition_key=table,
                    run_key=cid,
                    tags={"lake/trigger": "inbox"},
                    run_config=dg.RunConfig(
                        ops={
                            "ingested": IngestConfig(
                                files=[
                                    InboxFileConfig(key=f.key, size=f.size, mtime_ns=f.mtime_ns, etag=f.etag)
                                    for f in chunk
                                ]
                            )
                        }
                    ),
                )
            )
    new_state = {"tables": {n: cursors.get(n) for n in names if cursors.get(n)}, "last": served}
    known = set(context.instance.get_dynamic_partitions(tables.name))
    missing = sorted({r.partition_key for r in requests if r.partition_key not in known})
    if not requests:
        return dg.SensorResult(
            skip_reason=dg.SkipReason("no new files in the inbox"), cursor=json.dumps(new_state)
        )
    return dg.SensorResult(
        run_requests=requests,
        dynamic_partitions_requests=[tables.build_add_request(missing)] if missing else [],
        cursor=json.dumps(new_state),
    )
