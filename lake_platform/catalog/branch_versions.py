"""A Lance client's staged manifest committed as a branch's next version (REST
CreateTableVersion with ``branch``): main's managed-versioning commit on the branch's own line.

The staged manifest must sit in the branch's dataset (its ``_versions/``, checked by the caller
against the branch record) and reference only files inside the table's folder (issue 44's rule,
``table_files.check_manifest`` with the folder: a branch's manifests name the parent's files
there through a base path); a commit that drops, renames or retypes a column is held to the
catalog's roles for that change. Then, under the branch's lease (``Branches.held``), a namespace
bound to the branch record (``Branches.writer_namespace``) registers it: ONE registry
transaction that compare-and-swaps the branch's head, with its log entry (``detail.branch``)
and commit marker. Main never moves. A batch's entry on the branch (REST BatchCreateTableVersions,
``staged_transaction``) takes the same checks (``staged``, ``require_roles``) and lands with the
batch's other lines in its one registry transaction.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from typing import TYPE_CHECKING

from lake_platform.catalog.branches import Branches
from lake_platform.catalog.context import CatalogContext, check_commit_id
from lake_platform.catalog.engine_commits import EngineCommits
from lake_platform.catalog.idempotency import (
    PROPERTY,
    commit_id_for,
    first_version,
    key_in,
    retry_digest,
    valid_key,
)
from lake_platform.catalog.pending import PendingCommit
from lake_platform.catalog.principals import Principal
from lake_platform.catalog.provenance import UNSTATED, Provenance
from lake_platform.catalog.results import CommitResult
from lake_platform.catalog.staged_schema import require_schema_role, staged_schema
from lake_platform.catalog.table_files import added_files, check_manifest, parent_manifest
from lake_platform.errors import InvalidInput, TableBranchNotFound
from lake_platform.naming import TableName
from lake_platform.registry.records import BranchRecord

if TYPE_CHECKING:
    from lake_platform.engine.transactions import StagedChange


def log_operation(lance_operation: str | None) -> str:
    """The log operation of a client's commit on a branch: Lance's own, hyphenated as the
    catalog's are; ``commit`` when its transaction could not be read."""
    return "commit" if lance_operation is None else lance_operation.replace("_", "-")


class BranchVersions:
    def __init__(self, ctx: CatalogContext, branches: Branches, commits: EngineCommits) -> None:
        self.ctx = ctx
        self.branches = branches
        self.commits = commits

    def create_version(
        self,
        name: str,
        branch: str,
        version: int,
        manifest_path: str,
        *,
        manifest_size: int | None = None,
        e_tag: str | None = None,
        naming_scheme: str | None = None,
        check: Callable[[BranchRecord], None] | None = None,
        idempotency_key: str | None = None,
        by: Provenance = UNSTATED,
    ) -> CommitResult:
        """Register the staged manifest at ``manifest_path`` as ``version`` of the branch (the
        branch's head + 1, else ConcurrentModification). ``check``: called with the branch's
        record before anything is read or written (the REST server checks the path against the
        branch's dataset root). ``by.commit_id`` makes it idempotent (replayed).

        ``idempotency_key`` (the REST header), else the staged transaction's ``idempotency-key``
        property, replays as main's commit does (``idempotency.first_version``): the request
        resent, or a client's retry that staged a new manifest making the same change on the
        same branch, answers the first outcome and commits nothing; another change under the
        key is IdempotencyKeyReused."""
        who = self.ctx.who(by.principal)
        tname = TableName.parse(name)
        if isinstance(version, bool) or not isinstance(version, int) or version < 1:
            raise InvalidInput(f"version must be a positive integer, got {version!r}")
        if not isinstance(manifest_path, str) or not manifest_path:
            raise InvalidInput("manifest_path is required")
        self.ctx.require_parent(tname, who=who)
        who.require(tname.project, "write", f"write to branch {branch} of {tname}")
        commit_id = check_commit_id(by.commit_id)

        def landed(cid: str) -> CommitResult | None:
            # Any operation: the staged manifest says which, and a retry's may be gone.
            return self.ctx.replayed(cid, table=str(tname), operation=None, branch=branch)

        replay = landed(commit_id) if by.commit_id is not None else None
        if replay is not None:
            return replay
        try:
            rec, _ = self.branches.branch(tname, branch)
        except TableBranchNotFound as exc:
            # What a stock client's own branch create sends (lancedb's branches.create commits
            # Lance's clone as the new branch's first version): the registry's branch record,
            # lease and trash come only with CreateTableBranch.
            raise TableBranchNotFound(
                f"{exc}: a version is committed only to an existing branch; make a branch with "
                "CreateTableBranch (`lake branch create`), not by a client's own branch create "
                "(lancedb's branches.create); nothing was recorded"
            ) from None
        if check is not None:
            check(rec)
        key = None if idempotency_key is None else valid_key(idempotency_key)
        # The staged manifest, read once when first needed.
        read_staged = functools.cache(lambda: self.staged(rec, manifest_path))

        def replayed(key: str) -> CommitResult | None:
            def retry() -> tuple[str, str]:
                change = read_staged()[1]
                what = f"{change.operation or 'commit'} of {change.rows_added} rows on branch {branch}"
                return retry_digest(tname, change, branch), what

            key_id = commit_id_for(who, key, "version")
            if first_version(self.ctx, key_id, key, tname, manifest_path, retry, rec.location) is None:
                return None
            return landed(key_id)

        if key is not None and (done := replayed(key)) is not None:
            return done  # before the staged manifest is read: an exact resend's was removed
        staged_ipc, change = read_staged()
        if key is None and (key := key_in(change.properties, PROPERTY)) is not None:
            if (done := replayed(key)) is not None:
                return done
        detail: dict[str, object] = {"client": "pylance", "branch": branch}
        if key is not None:
            commit_id = commit_id_for(who, key, "version")
            detail |= {"idempotency_key": key, "request_digest": retry_digest(tname, change, branch)}
        self.require_roles(who, tname, rec, staged_ipc, change)
        pending = PendingCommit(
            commit_id=commit_id,
            operation=log_operation(change.operation),
            actor=self.ctx.actor(by.actor, who),
            run_id=by.run_id,
            schema_ipc=staged_ipc,
            detail=detail,
            stream_totals=lambda: (change.rows_added, change.bytes_added),
            files_added=change.files_added,
            must_exist=change.added_files,
        )
        request = {
            "id": list(tname.parts),
            "version": version,
            "manifest_path": manifest_path,
            "manifest_size": manifest_size,
            "e_tag": e_tag,
            "naming_scheme": naming_scheme,
        }
        with self.ctx.gate.hold(rec.incarnation) as lease:
            fresh, item = self.branches.held(tname, branch, rec.incarnation, settle=False)
            ns = self.branches.writer_namespace(tname, fresh, item, pending, lease, "version")
            lease.check()
            try:
                ns.create_table_version(request)
            except Exception:
                if ns.failure is not None:
                    raise ns.failure from None
                raise
            self.commits.manifests.finalize(fresh, pending)
        return self.commits.result(pending, str(tname))

    def staged(self, rec: BranchRecord, path: str) -> tuple[bytes, StagedChange]:
        """The staged manifest's schema (IPC bytes) and what it commits, from one read of the
        file, which is refused (InvalidInput) when missing, when Lance cannot open it
        (``staged_schema``) or when it references a file outside the table's folder. Before the
        lease (here, and for a batch's entry on the branch, ``staged_transaction``)."""
        from lake_platform.engine.storage import read_object
        from lake_platform.engine.transactions import StagedChange, staged_change

        storage = self.ctx.storage(rec.location)
        try:
            raw = read_object(rec.location, path, storage)
        except FileNotFoundError:
            raise InvalidInput(f"manifest {path.rpartition('/')[2]} does not exist") from None
        paths = check_manifest(rec.location, path, storage, raw=raw, folder=rec.folder)
        parent = parent_manifest(rec.location, path, rec.current_version, storage)
        schema = staged_schema(rec.location, path, raw, parent, storage)
        try:
            change = staged_change(rec.location, path, storage, raw=raw)
        except (OSError, ValueError):
            change = StagedChange(None)
        return schema.ipc, dataclasses.replace(
            change,
            added_files=added_files(paths, parent),
            renamed_columns=schema.renamed,
            keeps_rows=schema.keeps_rows,
        )

    def require_roles(
        self,
        who: Principal,
        tname: TableName,
        rec: BranchRecord,
        staged_ipc: bytes | None,
        change: StagedChange,
    ) -> None:
        """The schema change a staged manifest makes on the branch held to the catalog's roles
        (``staged_schema.require_schema_role``; main's record says whether the table is protected)."""
        main, _ = self.ctx.table(tname)
        require_schema_role(who, tname, main, rec.schema_ipc, staged_ipc, change)
