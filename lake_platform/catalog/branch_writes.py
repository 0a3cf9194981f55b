"""Writes to a branch, and publishing a branch into main.

A branch write is the table write path on the branch's own line: under the branch's lease (its
chain id), a namespace bound to the branch record (``head_key``: the branch's registry key) lets
Lance commit through the registry, so each version is a compare-and-swap of the branch's head
and main is never touched. Data files land under the branch's dataset root
(``<folder>/tree/<lance branch>``).

Publishing fast-forwards main to the branch's head in ONE registry transaction (under main's and
the branch's leases): main's new version records point at the branch's manifests, with their
dataset root (``VersionRecord.location``); main's table record now reads and writes at the
branch's root (``TableRecord.location``; ``folder`` keeps the table's folder); the branch
record is consumed. It is refused with BranchDiverged unless main is still at the version the
branch's line descends from. Why this design (and not a Lance commit on main that adopts the
branch's files): docs/governance.md, "Branches".
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from lake_platform.catalog.branches import Branches
from lake_platform.catalog.context import CatalogContext, Log, check_commit_id, input_error
from lake_platform.catalog.engine_commits import EngineCommits
from lake_platform.catalog.pending import PendingCommit
from lake_platform.catalog.provenance import UNSTATED, Provenance
from lake_platform.catalog.results import CommitResult
from lake_platform.catalog.schemas import Schemas
from lake_platform.engine import lance_engine as engine
from lake_platform.errors import (
    BranchDiverged,
    ConcurrentModification,
    ConditionFailed,
    InvalidInput,
    TableSchemaValidationError,
)
from lake_platform.naming import TableName
from lake_platform.registry import keys
from lake_platform.registry.records import BranchRecord, VersionRecord, decode
from lake_platform.registry.store import ABSENT, Delete, Op, Put

if TYPE_CHECKING:
    import pyarrow as pa

#: At most this many of the branch's versions become main's versions on publish (each is one
#: registry item, and DynamoDB takes 100 per transaction); beyond it only the head does.
PUBLISHED_VERSIONS = 80


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
        into the log entry (as ``tables.append``'s: an idempotent request's digest)."""
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

    def _write(
        self,
        name: str,
        branch: str,
        data: pa.RecordBatchReader,
        mode: str,
        by: Provenance,
        detail: dict[str, object] | None = None,
    ) -> CommitResult:
        from lake_platform.catalog.arrow_io import StreamCounter, as_reader, schema_from_ipc, schema_to_ipc
        from lake_platform.catalog.namespace import BoundTableNamespace

        who = self.ctx.who(by.principal)
        tname = TableName.parse(name)
        data = as_reader(data)
        commit_id = check_commit_id(by.commit_id)
        self.ctx.require_parent(tname)
        who.require(tname.project, "write", f"write to {tname}")
        replay = self.ctx.replayed(commit_id) if by.commit_id is not None else None
        if replay is not None:
            return replay
        rec, _ = self.branches.branch(tname, branch)
        target = None
        if mode == "append":
            change = self.schemas.plan_schema(tname, schema_from_ipc(rec.schema_ipc), [data.schema])
            if change:
                raise TableSchemaValidationError(
                    f"the rows do not fit branch {branch} of {tname} as they are; schema changes on a "
                    "branch are made by an overwrite"
                )
            target, schema_ipc = change.target, None
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
        key = keys.branch(tname, branch)
        with self.ctx.gate.hold(rec.incarnation) as lease:
            item = self.ctx.store.get(key)
            fresh = decode(BranchRecord, item.value, item.key) if item is not None else None
            if fresh is None or fresh.incarnation != rec.incarnation or fresh.state != "active":
                raise ConcurrentModification(f"branch {branch} of {tname} was deleted or published meanwhile")
            storage = self.ctx.storage(fresh.location)
            if mode == "overwrite":
                pending.rows_removed = self.branches.reads.snapshot(
                    tname, fresh, fresh.current_version
                ).count_rows()
            ns = BoundTableNamespace(
                self.ctx.store,
                tname,
                fresh,
                item.revision,
                pending=pending,
                lease=lease,
                storage_options=storage,
                fault=self.ctx.hook and (lambda p: self.ctx.at(f"branch-{mode}:{p}")),
                tidy_refused=True,
                head_key=key,
            )
            lease.check()
            try:
                self.ctx.at(f"branch-{mode}:before-write")
                engine.write(stream, namespace=ns, table_id=tname.parts, mode=mode, storage_options=storage)
            except Exception as exc:  # noqa: BLE001 - every failure is resolved, never guessed
                if counter.error is not None and not pending.landed:
                    raise input_error(counter.error) from None
                self.commits.resolve_failure(pending, ns, exc)
            self.commits.manifests.finalize(fresh, pending)
        return self.commits.result(pending, str(tname))

    def publish_branch(self, name: str, branch: str, *, by: Provenance = UNSTATED) -> CommitResult:
        """Fast-forward main to the branch's head: one registry commit, logged ``publish``.
        BranchDiverged (409, ABORTED) when main moved since the branch's line left it; InvalidInput
        when the branch has no commit of its own. The branch is consumed: its line is main's now."""
        who = self.ctx.who(by.principal)
        tname = TableName.parse(name)
        commit_id = check_commit_id(by.commit_id)
        self.ctx.require_parent(tname)
        who.require(tname.project, "write", f"publish to {tname}")
        replay = self.ctx.replayed(commit_id) if by.commit_id is not None else None
        if replay is not None:
            return replay  # a retry of a publish that landed: nothing is published twice
        record, _ = self.ctx.table(tname)
        rec, _ = self.branches.branch(tname, branch)
        with (
            self.ctx.gate.hold(record.incarnation) as main_lease,
            self.ctx.gate.hold(rec.incarnation) as lease,
        ):
            table_item, branch_item = self.ctx.store.get_many([keys.table(tname), keys.branch(tname, branch)])
            record, table_rev = self.ctx.table(tname, incarnation=record.incarnation, item=table_item)
            rec, branch_item = self.branches.branch(tname, branch)
            if record.current_version != rec.main_version:
                raise BranchDiverged(
                    f"main of {tname} moved since branch {branch} was made: the branch's line leaves main "
                    f"at version {rec.main_version}, main is at version {record.current_version} now; "
                    "publishing would drop main's newer commits (no merge). Make a new branch from "
                    "main's head and apply the change there"
                )
            if rec.current_version <= rec.main_version:
                raise InvalidInput(f"branch {branch} of {tname} has no commit of its own to publish")
            own = sorted(
                (
                    decode(VersionRecord, i.value, i.key)
                    for i in self.ctx.store.scan_prefix(keys.versions(rec.incarnation))
                ),
                key=lambda v: v.version,
            )
            own = [v for v in own if v.version > rec.main_version]
            if len(own) > PUBLISHED_VERSIONS:
                own = own[-1:]
            ops: list[Op] = [
                Put(
                    keys.version(record.incarnation, v.version),
                    v.model_copy(
                        update={
                            "incarnation": record.incarnation,
                            "tags": [],
                            "location": v.location or rec.location,
                        }
                    ).encode(),
                    ABSENT,
                )
                for v in own
            ]
            moved = record.model_copy(
                update={
                    "current_version": rec.current_version,
                    "location": rec.location,
                    "folder": record.folder_uri,
                    "schema_ipc_b64": rec.schema_ipc_b64,
                }
            )
            ops += [
                Put(keys.table(tname), moved.encode(), table_rev),
                Delete(branch_item.key, branch_item.revision),
            ]
            detail: dict[str, object] = {
                "branch": branch,
                "lance_branch": rec.lance_branch,
                "versions": [v.version for v in own],
            }
            self.ctx.at("publish:before-commit")
            with main_lease.fenced() as main_fence:
                try:
                    self.ctx.record(
                        Log(
                            str(tname),
                            "publish",
                            self.ctx.actor(by.actor, who),
                            commit_id,
                            by.run_id,
                            record.incarnation,
                            record.current_version,
                            rec.current_version,
                            detail,
                        ),
                        ops=[*ops, main_fence],
                        lease=lease,
                    )
                except ConditionFailed:
                    raise ConcurrentModification(
                        f"{tname} or its branch {branch} changed while publishing; nothing was published"
                    ) from None
        # The chain's own records are main's now (copied above) or superseded: drop them.
        chain = [
            Delete(i.key, i.revision) for i in self.ctx.store.scan_prefix(keys.versions(rec.incarnation))
        ]
        if chain:
            self.ctx.commit(chain, chunked=True)
        return CommitResult(commit_id, str(tname), "publish", record.current_version, rec.current_version)
