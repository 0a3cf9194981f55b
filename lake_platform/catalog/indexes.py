"""Scalar indexes: build, refresh and drop, each a commit under the table's lease.

An index change is a Lance commit (CreateIndex, or a drop's index-list update), so it goes
through the same door as an append: hold the lease, settle storage with the registry, bind a
namespace to the table incarnation and the pending commit, and let Lance commit *through* the
registry. The version, its commit-log entry (operation ``index create``/``index refresh``/
``index drop``, with the actor and run id) and the commit marker land in one fenced registry
transaction. Which indexes a table should have is policy (``maintenance/indexes``); this
service only does what it is asked.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from lake_platform.catalog.context import CatalogContext, check_commit_id, first_line
from lake_platform.catalog.engine_commits import EngineCommits
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

if TYPE_CHECKING:
    import pyarrow as pa


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
        by: Provenance = UNSTATED,
    ) -> MaintenanceResult:
        """Build the index of ``column`` (named ``<column>_idx``) over every row of the current
        version. An index of that name already there is refused unless ``replace`` (a rebuild,
        possibly of another kind)."""
        try:
            kind = engine_indexes.normalize_kind(kind)
        except ValueError as exc:
            raise InvalidInput(str(exc)) from None
        tname, who = self._writer(name, by.principal, f"index {name}")
        unsuitable = engine_indexes.unsuitable(kind, self._require_column(tname, column))
        if unsuitable is not None:
            raise InvalidInput(f"cannot index {tname} column {column!r}: {unsuitable}")
        index = engine_indexes.index_name(column)

        def build(ds: Any) -> None:
            existing = {i.name: i for i in engine_indexes.list_indexes(ds)}
            if index in existing and not replace:
                raise TableIndexAlreadyExists(
                    f"{tname} already has index {index} ({existing[index].kind.lower()} on {column})"
                )
            engine_indexes.create_index(ds, column, kind, index)

        return self._commit(
            tname,
            who,
            "index create",
            {"index": index, "column": column, "kind": kind},
            build,
            actor=by.actor,
            run_id=by.run_id,
            commit_id=by.commit_id,
        )

    def refresh_indexes(
        self,
        name: str,
        names: Sequence[str] | None = None,
        *,
        by: Provenance = UNSTATED,
    ) -> MaintenanceResult:
        """Fold rows committed since the last build into the lagging indexes among ``names``
        (default: every index). Nothing lags: ``nothing-to-do``, no commit."""
        tname, who = self._writer(name, by.principal, f"index {name}")
        current = {i.name: i for i in self.list_indexes(str(tname), by=Provenance(principal=who))}
        wanted = list(current) if names is None else list(dict.fromkeys(names))
        unknown = [n for n in wanted if n not in current]
        if unknown:
            raise TableIndexNotFound(f"{tname} has no index {unknown[0]}")
        lagging = [n for n in wanted if current[n].lagging]
        if not lagging:
            version = self.ctx.table(tname)[0].current_version
            return MaintenanceResult(str(tname), "index refresh", "nothing-to-do", version)
        return self._commit(
            tname,
            who,
            "index refresh",
            {"indexes": lagging},
            lambda ds: engine_indexes.refresh_indexes(ds, lagging),
            actor=by.actor,
            run_id=by.run_id,
            commit_id=by.commit_id,
        )

    def drop_index(
        self,
        name: str,
        column: str,
        *,
        by: Provenance = UNSTATED,
    ) -> MaintenanceResult:
        """Drop the index of ``column`` (or the index named ``column``). Older versions keep
        theirs: a drop changes only the versions after it."""
        tname, who = self._writer(name, by.principal, f"index {name}")
        if not isinstance(column, str) or not column:
            raise InvalidInput("name the column (or index) whose index to drop")

        def drop(ds: Any) -> None:
            found = {i.name: i for i in engine_indexes.list_indexes(ds)}
            by_column = [i.name for i in found.values() if i.column == column]
            target = column if column in found else engine_indexes.index_name(column)
            if target not in found and len(by_column) == 1:
                target = by_column[0]
            if target not in found:
                raise TableIndexNotFound(f"{tname} has no index on {column}")
            engine_indexes.drop_index(ds, target)

        return self._commit(
            tname,
            who,
            "index drop",
            {"column": column},
            drop,
            actor=by.actor,
            run_id=by.run_id,
            commit_id=by.commit_id,
        )

    # -- internals ---------------------------------------------------------------------------

    def _writer(self, name: str, principal: Principal | None, doing: str) -> tuple[TableName, Principal]:
        who = self.ctx.who(principal)
        tname = TableName.parse(name)
        self.ctx.require_parent(tname)
        who.require(tname.project, "write", doing)
        return tname, who

    def _require_column(self, tname: TableName, column: str) -> pa.DataType:
        """The type of ``tname``'s ``column``; TableColumnNotFound when it has none."""
        import pyarrow as pa

        from lake_platform.catalog.arrow_io import schema_from_ipc

        if not isinstance(column, str) or not column:
            raise InvalidInput("name the column to index")
        record, _ = self.ctx.table(tname)
        schema = schema_from_ipc(record.schema_ipc) if record.schema_ipc else pa.schema([])
        if column not in schema.names:
            names = ", ".join(schema.names)
            raise TableColumnNotFound(f"{tname} has no column {column!r} (columns: {names})")
        return schema.field(column).type

    def _commit(
        self,
        tname: TableName,
        who: Principal,
        operation: str,
        detail: dict[str, object],
        change: Callable[[Any], None],
        *,
        actor: str | None,
        run_id: str | None,
        commit_id: str | None,
    ) -> MaintenanceResult:
        commit_id = check_commit_id(commit_id)
        replay = self.ctx.replayed(commit_id)
        if replay is not None:
            if replay.table != str(tname) or replay.operation != operation:
                raise InvalidInput(
                    f"commit id {commit_id} already names {replay.operation} of {replay.table}"
                )
            return MaintenanceResult(
                str(tname), operation, "committed", replay.to_version or 0, commit_id, {"replayed": True}
            )
        record, _ = self.ctx.table(tname)
        pending = PendingCommit(
            commit_id=commit_id,
            operation=operation,
            actor=self.ctx.actor(actor, who),
            run_id=run_id,
            detail=detail,
        )
        with self.ctx.gate.hold(record.incarnation) as lease:
            record, revision = self.ctx.table(tname, incarnation=record.incarnation)
            ns, ds = self.commits.open_bound(tname, record, revision, pending, lease)
            lease.check()
            try:
                self.ctx.at(f"{operation}:before-write")  # inside: an injected failure is an engine failure
                change(ds)
            except (TableIndexAlreadyExists, TableIndexNotFound):
                raise
            except Exception as exc:  # noqa: BLE001 - every failure is resolved, never guessed
                if not pending.landed and ns.failure is None and isinstance(exc, (ValueError, KeyError)):
                    raise InvalidInput(f"cannot {operation} on {tname}: {first_line(exc)}") from None
                self.commits.resolve_failure(pending, ns, exc)
            self.commits.manifests.finalize(record, pending)
        if not pending.landed:
            return MaintenanceResult(str(tname), operation, "nothing-to-do", record.current_version)
        return MaintenanceResult(
            str(tname), operation, "committed", pending.landed[-1][0], commit_id, dict(detail)
        )
