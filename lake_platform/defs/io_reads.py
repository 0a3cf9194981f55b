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
from typing import TYPE_CHECKING, Literal

import dagster as dg

from lake_platform.defs.asset_tables import BRANCH, COMMIT_ID, VERSION, column_names
from lake_platform.defs.partition_rows import PartitionRows, context_rows
from lake_platform.errors import InvalidInput, InvalidTableState, TableNotFound

if TYPE_CHECKING:
    import pyarrow as pa

    from lake_platform.catalog.catalog import Catalog

#: Materializations read per page beyond one per partition.
_PAGE = 100
#: Other runs' records an input passes over (beyond one a partition) looking for the latest
#: published one before it gives up: thousands of write-audit-publish runs not published.
MAX_PASSED_OVER = 10_000


#: Where a pinned version is read: on its branch (still there, not published), on main (no
#: branch, or the branch published: main's version was made by the same commit), or nowhere
#: (its branch deleted or expired unpublished: main's version of that number is another commit).
Where = Literal["branch", "main", "gone"]


@dataclass(frozen=True)
class Pin:
    """A version recorded for an asset, the branch it is on (a write-audit-publish or a
    multi-asset step's write) and the commit that made it (``lake/commit_id``)."""

    version: int
    branch: str | None = None
    commit_id: str | None = None


class BranchPins:
    """Where a table's pins on branches are read (``Where``): the table's live branches listed
    once, when first asked about (most reads never are); main's version checked for a pin whose
    branch is gone, one registry read each."""

    def __init__(self, catalog: Catalog, table: str) -> None:
        self.catalog, self.table = catalog, table
        self.names: set[str] | None = None

    def __call__(self, pin: Pin) -> Where:
        if pin.branch is None:
            return "main"
        if self.names is None:
            try:
                self.names = {b.branch for b in self.catalog.branches.list_branches(self.table)}
            except TableNotFound:
                self.names = set()
        if pin.branch in self.names:
            return "branch"
        return "main" if self.on_main(pin) else "gone"

    def on_main(self, pin: Pin) -> bool:
        """Whether main's ``pin.version`` is the pinned commit (its branch was published), not
        another one that took the number after the branch was deleted unpublished. A record
        without its commit id cannot be told apart: never read as main's."""
        if pin.commit_id is None:
            return False
        try:
            return self.catalog.reads.made_by(self.table, pin.version) == pin.commit_id
        except TableNotFound:
            return False


def never_published(key: dg.AssetKey, pin: Pin) -> InvalidTableState:
    return InvalidTableState(
        f"{key.to_user_string()}: the materialization this run reads (version {pin.version} on branch "
        f"{pin.branch}) was never published, and its branch is gone (deleted or expired): main has "
        f"no version {pin.version} made by its commit, and reading another in its place would be "
        "wrong. Materialize the asset again (a new run, not a re-execution of the one that wrote "
        "the branch)"
    )


@dataclass(frozen=True)
class ReadPlan:
    table: str
    version: int | None  # None: nothing recorded, read the registered current version
    branch: str | None  # the branch the version is on (None: main's, its branch published)
    commit_id: str | None  # the commit that made it, when it is on a branch
    columns: list[str] | None
    rows: PartitionRows | None  # the upstream partitions the input reads, by its partition_expr
    partitions: list[str]


def plan_read(context: dg.InputContext, table: str, where: Callable[[Pin], Where]) -> ReadPlan:
    """What ``context``'s input reads of ``table``: the pinned version, the columns (input
    metadata ``columns``) and the partitions (the upstream's ``partition_expr`` over the input's
    upstream partition keys). ``where`` tells a pin on a branch still waiting for its publish
    (or refused by its audit: only the run that wrote it reads it) from a published one, and
    from one whose branch was deleted unpublished (read by no one)."""
    partitions = list(context.asset_partition_keys) if context.has_asset_partitions else []
    upstream_meta = context.upstream_output.definition_metadata if context.upstream_output else {}
    columns = column_names((context.definition_metadata or {}).get("columns"), "the input's columns")
    pin = recorded_version(context.instance, context.asset_key, partitions, lineage(context), where)
    return ReadPlan(
        table=table,
        version=pin.version if pin else None,
        branch=pin.branch if pin else None,
        commit_id=pin.commit_id if pin else None,
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
    where: Callable[[Pin], Where] = lambda pin: "main",
    max_passed_over: int = MAX_PASSED_OVER,
) -> Pin | None:
    """The table version the asset's materializations recorded: for each partition (or the
    whole asset) the newest record of one of ``own_runs`` (the reading run's lineage) if there is
    one, else the latest other; the highest of those (every partition's rows are in it). Another
    run's record on a branch not published (``where``: still there, or deleted) is passed over:
    its rows are not main's. An own run's record on a branch deleted unpublished is refused
    (InvalidTableState): main's version of its number is another commit, and an older record is
    not what the run wrote. A pin on a published branch is answered as main's (branch None).
    Without a materialization, the latest observation's (a table observed by
    ``table_assets``); None when neither recorded one.

    However many records other runs left since: the own runs' are read by run id, and the latest
    publishable page by page, for the partitions still without one. Bounded: the own runs'
    materializations (all of them, by run id), and beyond one record per partition at most
    ``max_passed_over`` newer ones passed over; a partition whose published record lies deeper
    is refused (InvalidTableState), never read at another version."""
    wanted = list(partitions) or [None]
    chosen = {
        part: _resolved(key, pin, where)
        for part, pin in _own_records(instance, key, partitions, own_runs).items()
    }
    missing = [part for part in wanted if part not in chosen]
    if missing:
        chosen |= _latest_publishable(instance, key, missing, where, len(missing) + max_passed_over)
    if chosen:
        return max(chosen.values(), key=lambda p: p.version)
    observed = instance.fetch_observations(dg.AssetRecordsFilter(asset_key=key), limit=1).records
    if observed and observed[0].asset_observation is not None:
        return _pin_of(observed[0].asset_observation.metadata)
    return None


def _resolved(key: dg.AssetKey, pin: Pin, where: Callable[[Pin], Where]) -> Pin:
    """An own run's ``pin`` as it is read: on its branch, or main's once published."""
    if pin.branch is None:
        return pin
    found = where(pin)
    if found == "gone":
        raise never_published(key, pin)
    return pin if found == "branch" else Pin(pin.version, None, pin.commit_id)


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
    where: Callable[[Pin], Where],
    budget: int,
) -> dict[str | None, Pin]:
    """Per partition of ``missing`` (``[None]``: the whole asset) the newest pin read on main
    (``where``: no branch, or its branch published), newest first page by page, each page asking
    only for the partitions still without one; at most ``budget`` records are read."""
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
                "(each is on a write-audit-publish branch not published yet or deleted unpublished, or "
                "records no lake/version): "
                "publish or delete those branches, or materialize the asset again"
            )
        read, before = read + len(page), page[-1].storage_id
        for rec in page:  # newest first
            event = rec.asset_materialization
            pin = _pin_of(event.metadata) if event is not None else None
            part = None if None in left else rec.partition_key
            if pin is None or part not in left or where(pin) != "main":
                continue
            found[part] = Pin(pin.version, None, pin.commit_id)
            left.discard(part)
    return found


def _pin_of(metadata: dict[str, dg.MetadataValue]) -> Pin | None:
    version, branch, commit = (metadata.get(k) for k in (VERSION, BRANCH, COMMIT_ID))
    raw = version.value if isinstance(version, dg.MetadataValue) else version
    if not isinstance(raw, int):
        return None
    if not isinstance(branch, dg.MetadataValue):
        return Pin(raw)
    return Pin(raw, str(branch.value), str(commit.value) if isinstance(commit, dg.MetadataValue) else None)


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
