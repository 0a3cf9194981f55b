"""The input side of the Lake IO manager: which version of the upstream table an input reads
(the one its upstream materialization recorded, never "latest"), and the scan with the input's
columns and partitions pushed down to Lance.

Versions are found through Dagster's public instance API (``get_records_for_run``,
``fetch_materializations``, ``fetch_observations``) from the input's context: a write that
landed after the upstream's materialization was recorded (another run re-materializing it, a
writer outside Dagster) is not seen until Dagster records it as the asset's.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import dagster as dg

from lake_platform.defs.asset_tables import BRANCH, VERSION, column_names
from lake_platform.defs.partition_rows import PartitionRows, context_rows
from lake_platform.errors import InvalidInput, InvalidTableState

if TYPE_CHECKING:
    import pyarrow as pa

#: Materializations read per page beyond one per partition.
_PAGE = 100
#: Other runs' records an input passes over (beyond one a partition) looking for the latest
#: published one before it gives up: thousands of write-audit-publish runs not published.
MAX_PASSED_OVER = 10_000


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
    columns = column_names((context.definition_metadata or {}).get("columns"), "the input's columns")
    pin = recorded_version(context.instance, context.asset_key, partitions, lineage(context), unpublished)
    return ReadPlan(
        table=table,
        version=pin.version if pin else None,
        branch=pin.branch if pin else None,
        columns=columns or None,
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
    max_passed_over: int = MAX_PASSED_OVER,
) -> Pin | None:
    """The table version the asset's materializations recorded: for each partition (or the
    whole asset) the newest record of one of ``own_runs`` (the reading run's lineage) if there is
    one, else the latest other; the highest of those (every partition's rows are in it). Another
    run's record on a branch still ``unpublished`` is passed over: its rows are not main's (yet).
    Without a materialization, the latest observation's (a table observed by
    ``table_assets``); None when neither recorded one.

    However many records other runs left since: the own runs' are read by run id, and the latest
    publishable page by page, for the partitions still without one. Bounded: the own runs'
    materializations (all of them, by run id), and beyond one record per partition at most
    ``max_passed_over`` newer ones passed over; a partition whose published record lies deeper
    is refused (InvalidTableState), never read at another version."""
    wanted = list(partitions) or [None]
    chosen = _own_records(instance, key, partitions, own_runs)
    missing = [part for part in wanted if part not in chosen]
    if missing:
        chosen |= _latest_publishable(instance, key, missing, unpublished, len(missing) + max_passed_over)
    if chosen:
        return max(chosen.values(), key=lambda p: p.version)
    observed = instance.fetch_observations(dg.AssetRecordsFilter(asset_key=key), limit=1).records
    if observed and observed[0].asset_observation is not None:
        return _pin_of(observed[0].asset_observation.metadata)
    return None


def _own_records(
    instance: dg.DagsterInstance, key: dg.AssetKey, partitions: Sequence[str], own_runs: Collection[str]
) -> dict[str | None, Pin]:
    """Per partition (None: the whole asset) the newest pin the ``own_runs`` recorded for ``key``,
    read by run id: other runs' records, however many, are never in the way."""
    newest: dict[str | None, tuple[int, Pin]] = {}
    for run_id in own_runs:
        cursor, more = None, True
        while more:
            page = instance.get_records_for_run(
                run_id, cursor, of_type=dg.DagsterEventType.ASSET_MATERIALIZATION, limit=_PAGE
            )
            cursor, more = page.cursor, page.has_more and bool(page.records)
            for rec in page.records:
                event = rec.asset_materialization
                pin = _pin_of(event.metadata) if event is not None and rec.asset_key == key else None
                part = rec.partition_key if partitions else None
                if pin is None or (partitions and part not in partitions):
                    continue
                if part not in newest or newest[part][0] < rec.storage_id:
                    newest[part] = (rec.storage_id, pin)
    return {part: pin for part, (_, pin) in newest.items()}


def _latest_publishable(
    instance: dg.DagsterInstance,
    key: dg.AssetKey,
    missing: list[str | None],
    unpublished: Callable[[str], bool],
    budget: int,
) -> dict[str | None, Pin]:
    """Per partition of ``missing`` (``[None]``: the whole asset) the newest pin not on an
    ``unpublished`` branch, newest first page by page, each page asking only for the partitions
    still without one; at most ``budget`` records are read."""
    found: dict[str | None, Pin] = {}
    left, before, read = set(missing), None, 0
    while left:
        limit = min(len(left) + _PAGE, budget - read)
        page = instance.fetch_materializations(
            dg.AssetRecordsFilter(
                asset_key=key,
                asset_partitions=None if None in left else sorted(str(part) for part in left),
                before_storage_id=before,
            ),
            limit=max(limit, 1),  # past the budget: one more record tells whether any is left
        ).records
        if not page:
            break
        if limit < 1:
            names = ", ".join(sorted(str(part) for part in left)[:10])
            where = "" if None in left else f" partition {names}"
            raise InvalidTableState(
                f"{key.to_user_string()}{where}: none of its newest {read} materializations is published "
                "(each is on a write-audit-publish branch not published yet, or records no lake/version): "
                "publish or delete those branches, or materialize the asset again"
            )
        read, before = read + len(page), page[-1].storage_id
        for rec in page:  # newest first
            event = rec.asset_materialization
            pin = _pin_of(event.metadata) if event is not None else None
            part = None if None in left else rec.partition_key
            if pin is None or part not in left or (pin.branch is not None and unpublished(pin.branch)):
                continue
            found[part] = pin
            left.discard(part)
    return found


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
