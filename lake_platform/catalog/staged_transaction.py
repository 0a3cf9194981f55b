"""Several tables' client-staged manifests committed atomically (REST ``BatchCreateTableVersions``
and ``BatchCommitTables``): what ``CreateTableVersion`` does for one table (``pylance_commits``),
made one multi-table ``Transaction`` (``transaction``).

Each entry is a CreateTableVersion request: a manifest a Lance client wrote in the table's
``_versions/`` and names by path and version. Before any lease, every table is checked (parent,
write permission, the manifest's path and files, the schema rules); under every table's lease
(sorted order), each manifest goes through the table's bound namespace, which holds its version
back; then the transaction's one registry commit makes every version visible together, and each
manifest is published at its canonical path. A version someone else committed meanwhile is a
ConcurrentModification and nothing lands.

An entry may name a branch: its manifest is then the branch's next version, staged in the
branch's dataset, and the transaction moves the branch's line (its record's head, under its
lease; ``branch_versions``' checks) with main's lines of the other entries, in the same one
registry write. Two entries on one line of a table are refused; main's and a branch's line of
one table are two lines. A transaction with a branch's line commits in one registry write only
(``transaction_ops.too_large_with_branch``).

An idempotency key becomes the transaction's commit id: a retry answers the first outcome's
versions. As for CreateTableVersion, a retry that staged new manifests must make the same change
on each table (operation and rows); the key reused for another request (other tables, other
rows) is IdempotencyKeyReused.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, cast

from lance_namespace_urllib3_client.models import TableVersion

from lake_platform.catalog import branch_versions
from lake_platform.catalog.branches import MAIN
from lake_platform.catalog.idempotency import commit_id_for, reused, valid_key
from lake_platform.catalog.namespace import table_version
from lake_platform.catalog.pending import PendingCommit
from lake_platform.catalog.provenance import Provenance
from lake_platform.catalog.pylance_commits import VersionCommits, log_operation, retry_digest, table_name
from lake_platform.catalog.replays import Wanted
from lake_platform.catalog.table_write import TableWrite
from lake_platform.catalog.transaction import Transaction
from lake_platform.catalog.transaction_ops import OPS_PER_TABLE, too_large_with_branch
from lake_platform.engine import lance_engine as engine
from lake_platform.errors import ConcurrentModification, InvalidTableState
from lake_platform.registry import keys
from lake_platform.registry.records import CommitLogEntry, TableRecord, VersionRecord, decode
from lake_platform.registry.store import Item

if TYPE_CHECKING:
    from lake_platform.catalog.catalog import Catalog
    from lake_platform.catalog.principals import Principal

#: The mode of a write whose data a client staged itself.
STAGED = "staged"


class StagedVersions(Transaction):
    """``add`` each table's CreateTableVersion request, then ``commit_versions``."""

    def __init__(
        self,
        catalog: Catalog,
        principal: Principal,
        idempotency_key: str | None = None,
        *,
        max_ops: int | None = None,
    ) -> None:
        """``max_ops``: registry operations per registry write, as ``Transaction``'s."""
        self.key = None if idempotency_key is None else valid_key(idempotency_key)
        commit_id = None if self.key is None else commit_id_for(principal, self.key, "batch-versions")
        by = Provenance(principal=principal, commit_id=commit_id)
        super().__init__(catalog.tables, by, max_ops=max_ops)
        self._versions = VersionCommits(catalog, principal)
        self._branch_versions = catalog.branch_versions
        # By line (``TableWrite.line``): the table's name, or ``<name>@<branch>``.
        self._requests: dict[str, dict[str, Any]] = {}
        self._checks: dict[str, Callable[[TableRecord], None]] = {}
        self._order: list[str] = []

    def add(
        self,
        request: dict[str, Any],
        check: Callable[[TableRecord], None] | None = None,
        branch: str | None = None,
    ) -> None:
        """Record one line's staged version (reads nothing); ``check``: called with the line's
        record (the table's, or the branch's) before anything is written (the REST server checks
        the manifest path); ``branch``: the version is that branch's next, not main's."""
        import pyarrow as pa

        branch = None if branch in ("", MAIN) else branch  # main's own line
        # No data: it is in the manifest.
        w = self._add(str(table_name(request)), pa.table({}), STAGED, None, branch)
        lines = len(self._writes)
        if any(x.branch for x in self._writes.values()) and lines * OPS_PER_TABLE > self._limit:
            del self._writes[w.line]
            raise too_large_with_branch(self._ctx.store, lines, self._limit)
        self._requests[w.line] = request
        if check is not None:
            self._checks[w.line] = check
        self._order.append(w.line)

    def commit_versions(self) -> list[TableVersion]:
        """Commit every version atomically; their records in the order they were added."""
        results = self.commit()
        if all(r.replayed for r in results):
            tables = sorted(str(self._writes[n].name) for n in self._order)
            if sorted(r.table for r in results) != tables:
                raise reused(
                    str(self.key),
                    "a batch of " + ", ".join(sorted(r.table for r in results)),
                    "a batch of " + ", ".join(tables),
                )
            return [self._landed(self._writes[n]) for n in self._order]
        return [self._committed(self._writes[n]) for n in self._order]

    def _wanted(self, w: TableWrite) -> Wanted:
        """As a transaction's, for any operation (the manifest's; ``_landed`` compares the
        change); the key reused for another table or line is IdempotencyKeyReused."""
        return Wanted(
            w.commit_id,
            str(w.name),
            None,
            w.branch,
            refuse=lambda named: reused(str(self.key), named, f"a batch writing {w.line}"),
        )

    def _committed(self, w: TableWrite) -> TableVersion:
        assert w.pending is not None
        version = w.pending.landed[-1][0]
        return table_version(w.pending.versions[version][0])

    def _landed(self, w: TableWrite) -> TableVersion:
        """The version the first request under the key landed for ``w``'s table. The same
        request resent names the manifest it committed; a client's retry staged a new one,
        which must make the same change (operation and rows), else IdempotencyKeyReused; its
        staging manifest is removed (nothing will ever register it)."""
        marker = self._ctx.commit_landed(w.commit_id)
        item = None
        if marker is not None and marker.incarnation is not None and marker.to_version is not None:
            item = self._ctx.store.get(keys.version(marker.incarnation, marker.to_version))
        if marker is None or item is None:
            raise InvalidTableState(
                f"the batch committed under idempotency key {self.key!r} made a version of {w.name} "
                "that no longer exists (cleaned up or the table was replaced)"
            )
        ver = decode(VersionRecord, item.value, item.key)
        path = str(self._requests[w.line]["manifest_path"])
        first_staged = {p.rpartition("/")[2] for p in (ver.manifest_path, ver.staged_from) if p}
        if path.rpartition("/")[2] not in first_staged:
            if w.branch is not None:
                record = self._branch_versions.branches.branch(w.name, w.branch)[0]
                change = self._branch_versions.staged(record, path)[1]
            else:
                record, _ = self._ctx.table(w.name, declared=True)
                change = self._versions._staged(record, self._requests[w.line])[1]
            entry = self._ctx.store.get(marker.log_key)
            digest = decode(CommitLogEntry, entry.value).detail.get("request_digest") if entry else None
            if digest != retry_digest(w.name, change, w.branch):
                raise reused(
                    str(self.key),
                    f"version {ver.version} of {w.name}",
                    f"{change.operation or 'commit'} of {change.rows_added} rows",
                )
            if engine.is_staging_manifest(path):
                engine.remove_files(record.location, [path], self._ctx.storage(record.location))
        return table_version(ver)

    def _plan(self, w: TableWrite, who: Principal, parent_item: Item | None, table_item: Item | None) -> None:
        """Parent, permission, the manifest and the schema rules, before any lease is taken; a
        branch's line: the branch (TableBranchNotFound) and ``branch_versions``' checks."""
        self._ctx.require_parent(w.name, parent_item, who=who)
        on = "" if w.branch is None else f"branch {w.branch} of "
        who.require(w.name.project, "write", f"write to {on}{w.name}")
        request = self._requests[w.line]
        check = self._checks.get(w.line)
        if w.branch is not None:
            branch, _ = self._branch_versions.branches.branch(w.name, w.branch)
            w.record = branch
            if check is not None:
                check(branch)
            staged_ipc, change = self._branch_versions.staged(branch, str(request["manifest_path"]))
            self._branch_versions.require_roles(who, w.name, branch, staged_ipc, change)
            w.detail |= {"branch": w.branch}
        else:
            record, _ = self._ctx.table(w.name, item=table_item, declared=True)
            w.record = record
            if check is not None:
                check(record)
            staged_ipc, change = self._versions._staged(record, request)
            self._versions._govern_schema_change(w.name, record, staged_ipc, change)
        w.detail |= {"client": "pylance", "staged": (staged_ipc, change)}
        if self.key is not None:
            digest = retry_digest(w.name, change, w.branch)
            w.detail |= {"idempotency_key": self.key, "request_digest": digest}

    def _stage(
        self, w: TableWrite, who: Principal, table_item: Item | None, version_item: Item | None
    ) -> None:
        """Under the lease: the client's manifest through the bound namespace (the table's, or
        the branch's: its record is the head), held back."""
        assert w.record is not None and w.lease is not None
        staged_ipc, change = cast(tuple[bytes | None, Any], w.detail.pop("staged"))
        if w.branch is not None:
            record, item = self._branch_versions.branches.held(
                w.name, w.branch, w.record.incarnation, settle=False
            )
            operation = branch_versions.log_operation(change.operation)
        else:
            record, revision = self._ctx.table(
                w.name, incarnation=w.record.incarnation, item=table_item, declared=True
            )
            operation = log_operation(change.operation, record.current_version)
        w.record = record
        pending = PendingCommit(
            commit_id=w.commit_id,
            operation=operation,
            actor=self._ctx.actor(None, who),
            detail=w.detail,
            schema_ipc=staged_ipc,
            stream_totals=lambda: (change.rows_added, change.bytes_added),
            files_added=change.files_added,
            must_exist=change.added_files,
            hold=[operation],
        )
        w.pending = pending
        request = self._requests[w.line]
        if w.branch is not None:  # hook points ``branch-batch:<point>``
            ns = self._branch_versions.branches.writer_namespace(
                w.name, record, item, pending, w.lease, "batch"
            )
        else:
            # The manifest was read and checked by ``_plan`` (``_staged``): not read again.
            checked = str(request["manifest_path"])
            ns = self._tables.commits.bind(w.name, record, revision, pending, w.lease, checked)
        w.ns = ns
        w.lease.check()
        try:
            ns.create_table_version(request)
        except Exception:
            if ns.failure is not None:
                raise ns.failure from None
            raise
        if len(pending.held) != 1:
            raise ConcurrentModification(f"the version of {w.line} was not staged; nothing was committed")
        # Not w.staged: the client's manifest is theirs to retry with until it is registered.


__all__ = ["StagedVersions"]
