"""Writes to a branch: append, overwrite and replace-where (the rows a predicate selects
replaced by new ones, one version).

A branch write is the table write path on the branch's own line: under the branch's lease (its
chain id), a namespace bound to the branch record (``head_key``: the branch's registry key) lets
Lance commit through the registry, so each version is a compare-and-swap of the branch's head
and main is never touched. Data files land under the branch's dataset root
(``<folder>/tree/<lance branch>``).

Publishing a branch into main is ``branch_publish``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from lake_platform.catalog.branches import Branches
from lake_platform.catalog.context import UNREAD, CatalogContext, check_commit_id, first_line, input_error
from lake_platform.catalog.empty_appends import appended_nothing
from lake_platform.catalog.engine_commits import EngineCommits
from lake_platform.catalog.pending import PendingCommit
from lake_platform.catalog.provenance import UNSTATED, Provenance
from lake_platform.catalog.results import CommitResult
from lake_platform.catalog.schemas import Schemas
from lake_platform.engine import changes
from lake_platform.engine import lance_engine as engine
from lake_platform.errors import InvalidInput, TableSchemaValidationError
from lake_platform.naming import SEGMENT, TableName
from lake_platform.registry import keys
from lake_platform.registry.records import BranchRecord

if TYPE_CHECKING:
    import pyarrow as pa


class BranchWrites:
    def __init__(
        self, ctx: CatalogContext, branches: Branches, commits: EngineCommits, schemas: Schemas
    ) -> None:
        self.ctx = ctx
        self.branches = branches
        self.commits = commits
        self.schemas = schemas

    def append(
        self,
        name: str,
        branch: str,
        data: pa.RecordBatchReader,
        *,
        detail: dict[str, object] | None = None,
        by: Provenance = UNSTATED,
    ) -> CommitResult:
        """Append a stream to the branch (columns by name, lossless casts only). ``detail`` goes
        into the log entry (as ``tables.append``'s: an idempotent request's digest). No rows
        commit nothing and answer the branch's current version, as on main (``empty_appends``)."""
        return self._write(name, branch, data, "append", by, detail)

    def overwrite(
        self,
        name: str,
        branch: str,
        data: pa.RecordBatchReader,
        *,
        detail: dict[str, object] | None = None,
        by: Provenance = UNSTATED,
    ) -> CommitResult:
        """Replace the branch's rows (and schema) with the stream."""
        return self._write(name, branch, data, "overwrite", by, detail)

    def replace_where(
        self,
        name: str,
        branch: str,
        predicate: str,
        data: pa.RecordBatchReader,
        *,
        by: Provenance = UNSTATED,
    ) -> CommitResult:
        """Delete the branch's rows ``predicate`` selects and append ``data``, as ONE version of
        the branch (``rows.replace_where`` on the branch's line; logged ``replace``). The rows
        fit the branch's schema as an append's do."""
        from lake_platform.catalog.row_changes import check_predicate

        check_predicate(predicate)
        return self._write(name, branch, data, "replace", by, {"predicate": predicate}, predicate)

    def _write(
        self,
        name: str,
        branch: str,
        data: pa.RecordBatchReader,
        mode: str,
        by: Provenance,
        detail: dict[str, object] | None = None,
        predicate: str | None = None,
    ) -> CommitResult:
        from lake_platform.catalog.arrow_io import (
            StreamCounter,
            as_reader,
            holds_rows,
            schema_from_ipc,
            schema_to_ipc,
        )

        who = self.ctx.who(by.principal)
        tname = TableName.parse(name)
        data = as_reader(data)
        commit_id = check_commit_id(by.commit_id)
        # The parent, the table and the branch in one registry request, not three in a row (a
        # malformed branch name is not read: ``branch`` refuses it after the parent's check).
        wanted = [self.ctx.parent_key(tname), keys.table(tname)]
        if isinstance(branch, str) and SEGMENT.fullmatch(branch):
            wanted.append(keys.branch(tname, branch))
        parent_item, *read = [*self.ctx.store.get_many(wanted), UNREAD]
        self.ctx.require_parent(tname, parent_item, who=who)
        who.require(tname.project, "write", f"write to {tname}")
        replay = None
        if by.commit_id is not None:
            replay = self.ctx.replayed(commit_id, table=str(tname), operation=mode, branch=branch)
        if replay is not None:
            return replay
        rec, _ = self.branches.branch(tname, branch, read=(read[0], read[1]))
        target = None
        if mode != "overwrite":
            change = self.schemas.plan_schema(tname, schema_from_ipc(rec.schema_ipc), [data.schema])
            if change:
                raise TableSchemaValidationError(
                    f"the rows do not fit branch {branch} of {tname} as they are; schema changes on a "
                    "branch are made by an overwrite"
                )
            target, schema_ipc = change.target, None
            if mode == "append":  # no rows: nothing to commit, as on main (``empty_appends``)
                holds, data = holds_rows(data)
                if not holds:
                    return appended_nothing(
                        self.ctx,
                        tname,
                        rec.incarnation,
                        rec.current_version,
                        commit_id,
                        branch=branch,
                        detail=detail,
                        given=by.commit_id is not None,
                    )
        else:
            if len(data.schema) == 0 or len(set(data.schema.names)) != len(data.schema.names):
                raise TableSchemaValidationError(f"invalid schema for {tname}: no or duplicate columns")
            schema_ipc = schema_to_ipc(data.schema)
        counter = StreamCounter()
        stream = counter.wrap(data, target)
        pending = PendingCommit(
            commit_id=commit_id,
            operation=mode,
            actor=self.ctx.actor(by.actor, who),
            run_id=by.run_id,
            schema_ipc=schema_ipc,
            stream_totals=counter.totals,
            detail={**(detail or {}), "branch": branch},
            release_lease=True,
        )
        with self.ctx.gate.hold(rec.incarnation) as lease:
            fresh, item = self.branches.held(tname, branch, rec.incarnation, pending, at=rec.current_version)
            storage = self.ctx.storage(fresh.location)
            if mode == "overwrite":
                pending.rows_removed = self.branches.reads.snapshot(
                    tname, fresh, fresh.current_version
                ).count_rows()
            ns = self.branches.writer_namespace(tname, fresh, item, pending, lease, mode, held=True)
            lease.check()
            try:
                self.ctx.at(f"branch-{mode}:before-write")
                if predicate is None:
                    engine.write(
                        stream, namespace=ns, table_id=tname.parts, mode=mode, storage_options=storage
                    )
                else:
                    self._replace(tname, fresh, ns, pending, predicate, stream)
            except Exception as exc:  # noqa: BLE001 - every failure is resolved, never guessed
                if counter.error is not None and not pending.landed:
                    raise input_error(counter.error) from None
                refused = isinstance(exc, (ValueError, OSError)) and "conflict" not in str(exc).lower()
                if predicate is not None and refused and not pending.landed and ns.failure is None:
                    raise InvalidInput(
                        f"cannot replace rows of branch {branch} of {tname}: {first_line(exc)}"
                    ) from None
                self.commits.resolve_failure(pending, ns, exc)
            self.commits.manifests.finalize(fresh, pending)
        return self.commits.result(pending, str(tname))

    def _replace(
        self,
        tname: TableName,
        fresh: BranchRecord,
        ns: Any,
        pending: PendingCommit,
        predicate: str,
        stream: pa.RecordBatchReader,
    ) -> None:
        storage = self.ctx.storage(fresh.location)
        ds = engine.open_version(
            namespace=ns, table_id=tname.parts, version=fresh.current_version, storage_options=storage
        )
        staged = changes.stage_replace(ds, predicate, stream, storage)
        pending.rows_removed = staged.deleted_rows
        added = pending.stream_totals()[0] if pending.stream_totals else 0  # the stream is drained
        pending.detail.update({"deleted_rows": staged.deleted_rows, "added_rows": added})
        changes.commit_staged(ds, staged, namespace=ns, table_id=tname.parts, storage_options=storage)
