"""Restoring a table to an older version: a new version whose content (data, schema, indexes)
is that version's, committed like any write (``RestoreTable``).

Lance's restore is a commit on the old version's dataset, opened through the namespace bound to
the pending commit, so it lands as one registry transaction under the table's lease: the new
version, the old version's schema in the table record, and a commit-log entry ``restore`` naming
the version restored. Nothing older is removed; the versions in between stay readable (time
travel) until cleanup. Write role, like an overwrite; only a version the registry still records
can be restored.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from lake_platform.catalog.context import CatalogContext, check_commit_id
from lake_platform.catalog.engine_commits import EngineCommits
from lake_platform.catalog.pending import PendingCommit
from lake_platform.catalog.provenance import UNSTATED, Provenance
from lake_platform.catalog.results import CommitResult
from lake_platform.engine import changes
from lake_platform.engine import lance_engine as engine
from lake_platform.errors import InvalidInput, TableVersionNotFound
from lake_platform.naming import TableName
from lake_platform.registry import keys

if TYPE_CHECKING:
    from lake_platform.catalog.lease import Lease
    from lake_platform.catalog.namespace import BoundTableNamespace
    from lake_platform.catalog.principals import Principal
    from lake_platform.registry.records import TableRecord


@dataclass(frozen=True)
class RestoreRequest:
    """A restore's checked request, main's or a branch's: who asks, the table, the version to
    restore, the commit id, and the earlier outcome when that commit id already landed; the
    branch restored (None: main) and whether the caller named the commit id (then it may land
    meanwhile: sent twice at once)."""

    who: Principal
    table: TableName
    version: int
    commit_id: str
    replay: CommitResult | None
    branch: str | None = None
    named_id: bool = False


def restore_request(
    ctx: CatalogContext, name: str, version: int, by: Provenance, branch: str | None = None
) -> RestoreRequest:
    """Checks a restore of ``name`` (or of its ``branch``) to ``version``: a positive integer
    version, the table's parent, the write role; InvalidInput or AccessDenied otherwise."""
    who = ctx.who(by.principal)
    tname = TableName.parse(name)
    if not keys.valid_version(version):
        raise InvalidInput(f"version must be a positive integer below 2**63, got {version!r}")
    ctx.require_parent(tname, who=who)
    what = f"restore {tname}" if branch is None else f"restore branch {branch} of {tname}"
    who.require(tname.project, "write", what)
    commit_id = check_commit_id(by.commit_id)
    replay = ctx.replayed(commit_id, table=str(tname), operation="restore", branch=branch)
    return RestoreRequest(who, tname, version, commit_id, replay, branch, by.commit_id is not None)


def restore_pending(
    ctx: CatalogContext,
    request: RestoreRequest,
    by: Provenance,
    schema: object,
    detail: dict[str, object],
    *,
    release_lease: bool = False,
) -> PendingCommit:
    """The pending commit of a restore whose content has ``schema`` (the restored version's)."""
    # pyarrow loads on use: registry-only commands import catalog without it (cli/test_fast.py)
    from lake_platform.catalog.arrow_io import schema_to_ipc

    return PendingCommit(
        commit_id=request.commit_id,
        operation="restore",
        actor=ctx.actor(by.actor, request.who),
        run_id=by.run_id,
        schema_ipc=schema_to_ipc(schema),
        detail=detail,
        release_lease=release_lease,
    )


def restore_line(
    commits: EngineCommits,
    request: RestoreRequest,
    pending: PendingCommit,
    bind: Callable[[Lease], tuple[TableRecord, BoundTableNamespace]],
    *,
    chain: str,
    point: str,
) -> CommitResult:
    """Commits ``pending``, the restore of ``request.version``, on one line, main's or a
    branch's: under the line's lease (``chain``), ``bind`` reads the line's head again and gives
    the namespace Lance commits through; ``point`` is the failure hook just before the write."""
    ctx = commits.ctx
    with ctx.gate.hold(chain) as lease:
        if request.named_id:  # it may have landed while this waited (sent twice at once)
            replay = ctx.replayed(
                request.commit_id, table=str(request.table), operation="restore", branch=request.branch
            )
            if replay is not None:
                return replay
        record, ns = bind(lease)
        ds = engine.open_version(
            namespace=ns,
            table_id=request.table.parts,
            version=request.version,
            storage_options=ctx.storage(record.location),
        )
        lease.check()
        try:
            ctx.at(point)  # inside: an injected failure is an engine failure
            changes.restore(ds)
        except Exception as exc:  # noqa: BLE001 - resolved by commit id, never guessed
            commits.resolve_failure(pending, ns, exc)
        commits.manifests.finalize(record, pending)
    return commits.result(pending, str(request.table))


class Restores:
    def __init__(self, ctx: CatalogContext, commits: EngineCommits) -> None:
        self.ctx = ctx
        self.commits = commits

    def restore_table(
        self, name: str, version: int, *, detail: dict[str, object] | None = None, by: Provenance = UNSTATED
    ) -> CommitResult:
        """A new version of ``name`` equal to its ``version``; ``detail`` goes into the log entry
        (an idempotent request's digest)."""
        request = restore_request(self.ctx, name, version, by)
        if request.replay is not None:
            return request.replay
        tname = request.table
        _, versions = self.commits.reads.readable_versions(str(tname), by=Provenance(principal=request.who))
        if version not in versions:
            raise TableVersionNotFound(f"version {version} of {tname} does not exist (or was cleaned up)")
        record, _ = self.ctx.table(tname)
        old = self.commits.reads.snapshot(tname, record, version)
        logged = {**(detail or {}), "restored_version": version}
        pending = restore_pending(self.ctx, request, by, old.schema, logged)

        def bind(lease: Lease) -> tuple[TableRecord, BoundTableNamespace]:
            fresh, revision = self.ctx.table(tname, incarnation=record.incarnation)
            self.commits.manifests.settle(tname, fresh, pending)
            return fresh, self.commits.bind(tname, fresh, revision, pending, lease)

        return restore_line(
            self.commits, request, pending, bind, chain=record.incarnation, point="restore:before-write"
        )
