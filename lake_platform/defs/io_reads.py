"""The input side of the Lake IO manager: which version of the upstream table an input reads
(the one its upstream materialization recorded, never "latest"), and the scan with the input's
columns and partitions pushed down to Lance.

Versions are found through Dagster's public instance API (``fetch_materializations``,
``fetch_observations``) from the input's context: a write that landed after the upstream's
materialization was recorded (another run re-materializing it, a writer outside Dagster) is not
seen until Dagster records it as the asset's.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import dagster as dg

from lake_platform.defs.asset_tables import BRANCH, VERSION
from lake_platform.defs.partition_rows import PartitionRows, context_rows
from lake_platform.errors import InvalidInput

if TYPE_CHECKING:
    import pyarrow as pa

#: Materializations read per input beyond one per partition: enough to find this run's own
#: record behind a few concurrent runs' newer ones.
_EXTRA_RECORDS = 20


@dataclass(frozen=True)
class Pin:
    """A version recorded for an asset, and the branch it is on (a write-audit-publish write)."""

    version: int
    branch: str | None = None


@dataclass(frozen=True)
class ReadPlan:
    table: str
    version: int | None  # None: nothing recorded, read the registered current version
    branch: str | None  # the branch the version is on (main once it was published)
    columns: list[str] | None
    rows: PartitionRows | None  # the upstream partitions the input reads, by its partition_expr
    partitions: list[str]


def plan_read(context: dg.InputContext, table: str, unpublished: Callable[[str], bool]) -> ReadPlan:
    """What ``context``'s input reads of ``table``: the pinned version, the columns (input
    metadata ``columns``) and the partitions (the upstream's ``partition_expr`` over the input's
    upstream partition keys). ``unpublished`` tells a write-audit-publish branch still waiting
    for its publish (or refused by its audit): only the run that wrote it reads it."""
    partitions = list(context.asset_partition_keys) if context.has_asset_partitions else []
    upstream_meta = context.upstream_output.definition_metadata if context.upstream_output else {}
    columns = (context.definition_metadata or {}).get("columns")
    pin = recorded_version(context.instance, context.asset_key, partitions, lineage(context), unpublished)
    return ReadPlan(
        table=table,
        version=pin.version if pin else None,
        branch=pin.branch if pin else None,
        columns=list(columns) if columns else None,
        rows=context_rows(context, upstream_meta.get("partition_expr")),
        partitions=partitions,
    )


def lineage(context: dg.InputContext) -> frozenset[str]:
    """The run reading and the runs it re-executes (a re-execution from failure reads what its
    failed run wrote); empty for a context built outside a run."""
    try:
        run = context.step_context.dagster_run
    except Exception:  # noqa: BLE001 - a context built outside a run has none
        return frozenset()
    ids, parent = {run.run_id}, run.parent_run_id
    while parent and parent not in ids:
        ids.add(parent)
        earlier = context.instance.get_run_by_id(parent)
        parent = earlier.parent_run_id if earlier is not None else None
    return frozenset(ids)


def recorded_version(
    instance: dg.DagsterInstance,
    key: dg.AssetKey,
    partitions: Sequence[str],
    own_runs: Collection[str],
    unpublished: Callable[[str], bool] = lambda branch: False,
) -> Pin | None:
    """The table version the asset's materializations recorded: for each partition (or the
    whole asset) the record of one of ``own_runs`` (the reading run's lineage) if there is one,
    else the latest; the highest of those (every partition's rows are in it). Another run's
    record on a branch still ``unpublished`` is passed over: its rows are not main's (yet).
    Without a materialization, the latest observation's (a table observed by
    ``table_assets``); None when neither recorded one."""
    found = instance.fetch_materializations(
        dg.AssetRecordsFilter(asset_key=key, asset_partitions=list(partitions) or None),
        limit=len(partitions) + _EXTRA_RECORDS,
    ).records
    chosen: dict[str | None, tuple[bool, Pin]] = {}
    for rec in found:  # newest first
        event = rec.asset_materialization
        pin = _pin_of(event.metadata) if event is not None else None
        if pin is None:
            continue
        own = rec.run_id in own_runs
        if not own and pin.branch is not None and unpublished(pin.branch):
            continue
        part = rec.partition_key
        if part not in chosen or (own and not chosen[part][0]):
            chosen[part] = (own, pin)
    if chosen:
        return max((p for _, p in chosen.values()), key=lambda p: p.version)
    observed = instance.fetch_observations(dg.AssetRecordsFilter(asset_key=key), limit=1).records
    if observed and observed[0].asset_observation is not None:
        return _pin_of(observed[0].asset_observation.metadata)
    return None


def _pin_of(metadata: dict[str, dg.MetadataValue]) -> Pin | None:
    version, branch = (metadata.get(k) for k in (VERSION, BRANCH))
    raw = version.value if isinstance(version, dg.MetadataValue) else version
    if not isinstance(raw, int):
        return None
    return Pin(raw, str(branch.value) if isinstance(branch, dg.MetadataValue) else None)


def scan_options(plan: ReadPlan, schema: pa.Schema) -> dict[str, object]:
    """Lance scanner arguments: the columns and the partition filter, read by Lance itself; a
    column the table lacks, or one named twice, is refused by name (InvalidInput)."""
    options: dict[str, object] = {}
    if plan.columns:
        for i, column in enumerate(plan.columns):
            if column not in schema.names or column in plan.columns[:i]:
                problem = "is named twice" if column in schema.names else f"is not a column of {plan.table}"
                names = ", ".join(schema.names)
                raise InvalidInput(
                    f"the input's columns metadata: {column!r} {problem} (its columns: {names})"
                )
        options["columns"] = plan.columns
    if plan.rows is not None:
        options["filter"] = plan.rows.predicate(schema)
    return options
