"""Scalar indexes: build, refresh and drop, each a commit under the table's lease.

An index change is a Lance commit (CreateIndex, or a drop's index-list update), so it goes
through the same door as an append: hold the lease, settle storage with the registry, bind a
namespace to the table incarnation and the pending commit, and let Lance commit *through* the
registry. The version, its commit-log entry (operation ``index create``/``index refresh``/
``index drop``, with the actor and run id) and the commit marker land in one fenced registry
transaction. Which indexes a table should have is policy (``maintenance/indexes``); this
service only does what it is asked.

The checks, the changes to a dataset and the commit itself are module functions over a line
(its lease key and how its head is opened under that lease), so a branch's indexes
(``branch_indexes``) are these same changes on the branch's own line.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from lake_platform.catalog.context import CatalogContext, check_commit_id, first_line
from lake_platform.catalog.engine_commits import EngineCommits
from lake_platform.catalog.lease import Lease
from lake_platform.catalog.pending import PendingCommit
from lake_platform.catalog.principals import Principal
from lake_platform.catalog.provenance import UNSTATED, Provenance
from lake_platform.catalog.reads import Reads
from lake_platform.catalog.results import MaintenanceResult
from lake_platform.engine import indexes as engine_indexes
from lake_platform.engine.indexes import IndexInfo
from lake_platform.errors import (
    InvalidInput,
    TableColumnNotFound,
    TableIndexAlreadyExists,
    TableIndexNotFound,
)
from lake_platform.naming import TableName
from lake_platform.registry.records import TableRecord

if TYPE_CHECKING:
    import pyarrow as pa

#: Under the line's held lease: its record read again, and its head opened through a namespace
#: bound to that record and the pending commit (so Lance's commit is the registry's).
OpenLine = Callable[[Lease, PendingCommit], tuple[TableRecord, Any, Any]]


class Indexes:
    def __init__(self, ctx: CatalogContext, commits: EngineCommits, reads: Reads) -> None:
        self.ctx = ctx
        self.commits = commits
        self.reads = reads

    def list_indexes(self, name: str, *, by: Provenance = UNSTATED) -> list[IndexInfo]:
        """The indexes of the current version, with how many rows each does not cover yet."""
        snap = self.reads.open_table(name, by=by)
        return engine_indexes.list_indexes(snap.dataset)

    def create_index(
        self,
        name: str,
        column: str,
        kind: str = "BTREE",
        *,
        replace: bool = False,
        options: Mapping[str, object] | None = None,
        detail: Mapping[str, object] | None = None,
        by: Provenance = UNSTATED,
    ) -> MaintenanceResult:
        """Build the index of ``column`` (named ``<column>_idx``) over every row of the current
        version, with ``options`` (the full-text index's: ``engine/indexes.FULL_TEXT_OPTIONS``,
        logged in the entry's detail). An index of that name already there is refused unless
        ``replace`` (a rebuild, possibly of another kind). ``detail`` goes into the log entry
        (an idempotent request's digest); ``by.commit_id`` that already landed as this change
        is answered, nothing built."""
        kind = index_kind(kind)
        chosen = chosen_options(kind, options)
        tname, who = index_writer(self.ctx, name, by.principal)
        build = building(str(tname), self.ctx.table(tname)[0], column, kind, replace, chosen)
        logged = {**(detail or {}), **creation_detail(column, kind, chosen)}
        return self._commit(IndexChange(tname, who, "index create", logged, build, by))

    def refresh_indexes(
        self,
        name: str,
        names: Sequence[str] | None = None,
        *,
        by: Provenance = UNSTATED,
    ) -> MaintenanceResult:
        """Fold rows committed since the last build into the lagging indexes among ``names``
        (default: every index). Nothing lags: ``nothing-to-do``, no commit."""
        tname, who = index_writer(self.ctx, name, by.principal)
        current = self.list_indexes(str(tname), by=Provenance(principal=who))
        lagging = lagging_indexes(str(tname), current, names)
        if not lagging:
            version = self.ctx.table(tname)[0].current_version
            return MaintenanceResult(str(tname), "index refresh", "nothing-to-do", version)
        refresh = refreshing(lagging)
        return self._commit(IndexChange(tname, who, "index refresh", {"indexes": lagging}, refresh, by))

    def drop_index(
        self,
        name: str,
        column: str,
        *,
        detail: Mapping[str, object] | None = None,
        by: Provenance = UNSTATED,
    ) -> MaintenanceResult:
        """Drop the index of ``column`` (or the index named ``column``). Older versions keep
        theirs: a drop changes only the versions after it. ``detail`` and ``by.commit_id``: as
        ``create_index``'s."""
        tname, who = index_writer(self.ctx, name, by.principal)
        drop = dropping_index(str(tname), column)
        logged = {**(detail or {}), "column": column}
        return self._commit(IndexChange(tname, who, "index drop", logged, drop, by))

    def _commit(self, change: IndexChange) -> MaintenanceResult:
        tname = change.table

        def main_line() -> tuple[str, OpenLine]:
            record, _ = self.ctx.table(tname)

            def open_main(lease: Lease, pending: PendingCommit) -> tuple[TableRecord, Any, Any]:
                fresh, revision, _ = self.commits.manifests.leased_head(tname, record)
                ns, ds = self.commits.open_bound(tname, fresh, revision, pending, lease)
                return fresh, ns, ds

            return record.incarnation, open_main

        return commit_index_change(self.ctx, self.commits, change, main_line)


# -- the pieces main and a branch share ------------------------------------------------------


@dataclass(frozen=True)
class IndexChange:
    """One index commit asked for: on which table, by whom, what it logs and what it does to
    the dataset opened at the line's head."""

    table: TableName
    who: Principal
    operation: str
    detail: dict[str, object]
    apply: Callable[[Any], None]
    by: Provenance
    #: The branch whose line it changes (its log entry's ``detail.branch``); None: main's.
    branch: str | None = None


def index_kind(kind: str) -> str:
    """The engine's spelling of ``kind``; InvalidInput for a kind it does not build."""
    try:
        return engine_indexes.normalize_kind(kind)
    except ValueError as exc:
        raise InvalidInput(str(exc)) from None


def chosen_options(kind: str, options: Mapping[str, object] | None) -> dict[str, object]:
    """``options`` as Lance takes them for ``kind``; InvalidInput naming an option ``kind`` has
    not, or a value Lance would not take."""
    try:
        return engine_indexes.index_options(kind, options or {})
    except ValueError as exc:
        raise InvalidInput(str(exc)) from None


def creation_detail(column: str, kind: str, options: dict[str, object]) -> dict[str, object]:
    """An ``index create`` entry's detail: the index, its column and kind, and the options asked
    for (when any)."""
    detail: dict[str, object] = {"index": engine_indexes.index_name(column), "column": column, "kind": kind}
    if options:
        detail["options"] = dict(options)
    return detail


def index_writer(ctx: CatalogContext, name: str, principal: Principal | None) -> tuple[TableName, Principal]:
    """The table and the caller, who must hold the write role on its project."""
    who = ctx.who(principal)
    tname = TableName.parse(name)
    ctx.require_parent(tname, who=who)
    who.require(tname.project, "write", f"index {name}")
    return tname, who


def building(
    label: str,
    record: TableRecord,
    column: str,
    kind: str,
    replace: bool,
    options: Mapping[str, object] | None = None,
) -> Callable[[Any], None]:
    """The build of ``column``'s index, with ``options`` (``chosen_options``'), on the line
    ``record`` is the head of (``label`` names it in errors); the column and kind are checked
    now, before any lease."""
    unsuitable = engine_indexes.unsuitable(kind, column_type(label, record, column))
    if unsuitable is not None:
        raise InvalidInput(f"cannot index {label} column {column!r}: {unsuitable}")
    index = engine_indexes.index_name(column)

    def build(ds: Any) -> None:
        existing = {i.name: i for i in engine_indexes.list_indexes(ds)}
        if index in existing and not replace:
            raise TableIndexAlreadyExists(
                f"{label} already has index {index} ({existing[index].kind.lower()} on {column})"
            )
        engine_indexes.create_index(ds, column, kind, index, options)

    return build


def lagging_indexes(label: str, current: list[IndexInfo], names: Sequence[str] | None) -> list[str]:
    """Which of ``names`` (default: every index) lag behind the rows; TableIndexNotFound for a
    name that is not an index of ``current``."""
    found = {i.name: i for i in current}
    wanted = list(found) if names is None else list(dict.fromkeys(names))
    unknown = [n for n in wanted if n not in found]
    if unknown:
        raise TableIndexNotFound(f"{label} has no index {unknown[0]}")
    return [n for n in wanted if found[n].lagging]


def refreshing(lagging: list[str]) -> Callable[[Any], None]:
    return lambda ds: engine_indexes.refresh_indexes(ds, lagging)


def dropping_index(label: str, column: str) -> Callable[[Any], None]:
    """The drop of ``column``'s index (or of the index named ``column``)."""
    if not isinstance(column, str) or not column:
        raise InvalidInput("name the column (or index) whose index to drop")

    def drop(ds: Any) -> None:
        found = {i.name: i for i in engine_indexes.list_indexes(ds)}
        by_column = [i.name for i in found.values() if i.column == column]
        target = column if column in found else engine_indexes.index_name(column)
        if target not in found and len(by_column) == 1:
            target = by_column[0]
        if target not in found:
            raise TableIndexNotFound(f"{label} has no index on {column}")
        engine_indexes.drop_index(ds, target)

    return drop


def column_type(label: str, record: TableRecord, column: str) -> pa.DataType:
    """The type of ``column`` in ``record``'s schema; TableColumnNotFound when it has none."""
    import pyarrow as pa

    from lake_platform.catalog.arrow_io import schema_from_ipc

    if not isinstance(column, str) or not column:
        raise InvalidInput("name the column to index")
    schema = schema_from_ipc(record.schema_ipc) if record.schema_ipc else pa.schema([])
    if column not in schema.names:
        names = ", ".join(schema.names)
        raise TableColumnNotFound(f"{label} has no column {column!r} (columns: {names})")
    return schema.field(column).type


def commit_index_change(
    ctx: CatalogContext,
    commits: EngineCommits,
    change: IndexChange,
    locate: Callable[[], tuple[str, OpenLine]],
    hook: str = "",
) -> MaintenanceResult:
    """``change`` as one commit on a line: a commit id that landed already answers as it did;
    otherwise ``locate`` gives the line's lease key and opener, and under that lease the line
    is opened, the change applied and the versions it landed finalized. ``hook`` prefixes the
    hook points."""
    tname, operation = change.table, change.operation
    commit_id = check_commit_id(change.by.commit_id)

    def landed() -> MaintenanceResult | None:
        replay = ctx.replayed(commit_id, table=str(tname), operation=operation, branch=change.branch)
        if replay is None:
            return None
        return MaintenanceResult(
            str(tname), operation, "committed", replay.to_version or 0, commit_id, {"replayed": True}
        )

    first = landed()
    if first is not None:
        return first
    pending = PendingCommit(
        commit_id=commit_id,
        operation=operation,
        actor=ctx.actor(change.by.actor, change.who),
        run_id=change.by.run_id,
        detail=change.detail,
    )
    chain, open_line = locate()
    with ctx.gate.hold(chain) as lease:
        # it may have landed while this waited (sent twice at once)
        first = landed() if change.by.commit_id is not None else None
        if first is not None:
            return first
        record, ns, ds = open_line(lease, pending)
        lease.check()
        try:
            ctx.at(f"{hook}{operation}:before-write")  # inside: an injected failure is an engine failure
            change.apply(ds)
        except (TableIndexAlreadyExists, TableIndexNotFound):
            raise
        except Exception as exc:  # noqa: BLE001 - every failure is resolved, never guessed
            if not pending.landed and ns.failure is None and isinstance(exc, (ValueError, KeyError)):
                raise InvalidInput(f"cannot {operation} on {tname}: {first_line(exc)}") from None
            commits.resolve_failure(pending, ns, exc)
        commits.manifests.finalize(record, pending)
    if not pending.landed:
        return MaintenanceResult(str(tname), operation, "nothing-to-do", record.current_version)
    return MaintenanceResult(
        str(tname), operation, "committed", pending.landed[-1][0], commit_id, dict(change.detail)
    )
