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

from lake_platform.catalog.context import CatalogContext, check_commit_id
from lake_platform.catalog.engine_commits import EngineCommits
from lake_platform.catalog.pending import PendingCommit
from lake_platform.catalog.provenance import UNSTATED, Provenance
from lake_platform.catalog.results import CommitResult
from lake_platform.engine import changes
from lake_platform.engine import lance_engine as engine
from lake_platform.errors import InvalidInput, TableVersionNotFound
from lake_platform.naming import TableName


class Restores:
    def __init__(self, ctx: CatalogContext, commits: EngineCommits) -> None:
        self.ctx = ctx
        self.commits = commits

    def restore_table(self, name: str, version: int, *, by: Provenance = UNSTATED) -> CommitResult:
        # pyarrow loads on use: registry-only commands import catalog without it (cli/test_fast.py)
        from lake_platform.catalog.arrow_io import schema_to_ipc

        who = self.ctx.who(by.principal)
        tname = TableName.parse(name)
        if not isinstance(version, int) or isinstance(version, bool) or version < 1:
            raise InvalidInput(f"version must be a positive integer, got {version!r}")
        self.ctx.require_parent(tname)
        who.require(tname.project, "write", f"restore {tname}")
        commit_id = check_commit_id(by.commit_id)
        replay = self.ctx.replayed(commit_id)
        if replay is not None:
            return replay
        _, versions = self.commits.reads.readable_versions(str(tname), by=Provenance(principal=who))
        if version not in versions:
            raise TableVersionNotFound(f"version {version} of {tname} does not exist (or was cleaned up)")
        record, _ = self.ctx.table(tname)
        old = self.commits.reads.snapshot(tname, record, version)
        pending = PendingCommit(
            commit_id=commit_id,
            operation="restore",
            actor=self.ctx.actor(by.actor, who),
            run_id=by.run_id,
            schema_ipc=schema_to_ipc(old.schema),
            detail={"restored_version": version},
        )
        with self.ctx.gate.hold(record.incarnation) as lease:
            record, revision = self.ctx.table(tname, incarnation=record.incarnation)
            self.commits.manifests.settle(tname, record, pending)
            ns = self.commits.bind(tname, record, revision, pending, lease)
            ds = engine.open_version(
                namespace=ns,
                table_id=tname.parts,
                version=version,
                storage_options=self.ctx.storage(record.location),
            )
            lease.check()
            try:
                self.ctx.at("restore:before-write")  # inside: an injected failure is an engine failure
                changes.restore(ds)
            except Exception as exc:  # noqa: BLE001 - resolved by commit id, never guessed
                self.commits.resolve_failure(pending, ns, exc)
            self.commits.manifests.finalize(record, pending)
        return self.commits.result(pending, str(tname))
