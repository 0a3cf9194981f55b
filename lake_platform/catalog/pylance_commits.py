"""pylance's commits through the catalog (``LakeNamespace.create_table_version``): the staged
manifest's schema and change read before the lease, the schema rules a Lance client's commit is
held to, one registry commit through a ``BoundTableNamespace`` (under a free lease when it can,
else an acquired one), and the versions published remembered (the catalog's
``PublishedVersions``) so a listing need not check their files again (one whose file is missing
is published if just committed, else refused typed: ``ensure_published``)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import lance_namespace.errors as ns_errors
from lance_namespace_urllib3_client.models import (
    CreateTableVersionResponse,
)

from lake_platform.catalog.idempotency import (
    PROPERTY,
    commit_id_for,
    first_version,
    key_in,
    retry_digest,
    valid_key,
)
from lake_platform.catalog.lease import LeaseRaced
from lake_platform.catalog.namespace import BoundTableNamespace, int_field, request_field, table_version
from lake_platform.catalog.pending import PendingCommit
from lake_platform.catalog.principals import Principal
from lake_platform.catalog.staged_schema import require_schema_role, staged_schema
from lake_platform.catalog.table_files import added_files, check_manifest, parent_manifest
from lake_platform.engine.transactions import StagedChange, staged_change
from lake_platform.errors import InvalidInput
from lake_platform.naming import TableName
from lake_platform.registry.records import (
    TableRecord,
    VersionRecord,
    new_id,
)

if TYPE_CHECKING:
    from lake_platform.catalog.catalog import Catalog

#: How long after its commit a version registered at its canonical path may still be waiting
#: for its file (its writer links it right after the transaction): a listing publishes it
#: meanwhile; after it, the writer was stopped and readers refuse the version, typed, until the
#: next writer, ``finish_versions`` or ``lake table repair`` publishes it.
_PUBLISHING_MS = 60_000


def ensure_published(
    catalog: Catalog, tname: TableName, record: TableRecord, ver: VersionRecord, revision: int
) -> None:
    """A Lance client is about to open the canonical manifest of ``ver`` (registered there by
    its commit, at registry ``revision``), whose file this process has not seen yet: its writer
    links it right after the registry commit. Within ``_PUBLISHING_MS`` of that commit a
    missing file is published here from its staging copy (its writer may be linking it now, or
    was stopped; a client about to build on it must find it). Later, its writer was stopped:
    the version is refused, typed (``Manifests.unreadable``), as ``Reads.open_table`` refuses
    it, writing nothing, until the next writer or ``lake table repair`` publishes it (Lance
    would answer a bare file-not-found). A file found is remembered: one check per version and
    process."""
    location, storage = record.location, catalog.ctx.storage(record.location)
    published = catalog.published_versions
    present = published.exists(location, ver.manifest_path, storage)
    if not present and catalog.clock.wall_ms() - ver.committed_at_ms < _PUBLISHING_MS:
        present = catalog.manifests.finish_version(record, ver, revision, present=False) or published.exists(
            location, ver.manifest_path, storage
        )  # linked meanwhile
    if not present:
        raise catalog.manifests.unreadable(tname, record, ver.version, ver)
    published.remember(location, ver.version)


class VersionCommits:
    """The commits of one ``LakeNamespace`` (its catalog and principal)."""

    def __init__(self, catalog: Catalog, principal: Principal) -> None:
        self.catalog = catalog
        self.principal = principal

    def create(
        self,
        request: Any,
        check: Callable[[TableRecord], None] | None = None,
        idempotency_key: str | None = None,
    ) -> CreateTableVersionResponse:
        """``check``: called with the table's record before anything is written (the REST server
        checks the client's manifest path against its location). The commit is conditional on
        that record's revision, so the incarnation, and so the location, cannot change under it:
        under an acquired lease the record is read again, under a free one (one commit that
        releases it) a changed record fails the commit and it is made again under an acquired
        lease.

        ``idempotency_key`` (the REST header), else the staged transaction's ``idempotency-key``
        property: a commit that already landed under that key is answered as it was the first
        time, and nothing is committed (``idempotency``)."""
        tname = table_name(request)
        self.principal.require(tname.project, "write", f"write to {tname}")
        record, revision = self.catalog.ctx.table(tname, declared=True)
        if check is not None:  # before the lease: a refused request writes nothing, not even it
            check(record)
        key = None if idempotency_key is None else valid_key(idempotency_key)
        if key is not None:
            # Before the staged manifest is read: an exact resend's was published and removed.
            replay = self._replay(tname, record, request, key, None)
            if replay is not None:
                return replay
        # The schema and what the commit adds ride in the version's own transaction: read
        # from the staged manifest now, before the lease (schema None: read it back after
        # the commit).
        staged_ipc, change = self._staged(record, request)
        if key is None:
            key = key_in(change.properties, PROPERTY)
            replay = None if key is None else self._replay(tname, record, request, key, change)
            if replay is not None:
                return replay
        self._govern_schema_change(tname, record, staged_ipc, change)
        detail: dict[str, object] = {"client": "pylance"}
        if key is not None:
            detail |= {"idempotency_key": key, "request_digest": retry_digest(tname, change)}
        pending = PendingCommit(
            commit_id=new_id() if key is None else commit_id_for(self.principal, key, "version"),
            operation=log_operation(change.operation, record.current_version),
            actor=self.catalog.ctx.actor(None, self.principal),
            detail=detail,
            schema_ipc=staged_ipc,
            stream_totals=lambda: (change.rows_added, change.bytes_added),
            files_added=change.files_added,
            must_exist=change.added_files,
            release_lease=True,  # the request's one registry commit also releases the lease
        )
        gate = self.catalog.gate
        # One commit that releases the lease: a free lease need not be acquired first; if
        # someone took it meanwhile (nothing landed), once more under an acquired lease.
        if pending.release_lease:
            try:
                return self._commit_version(
                    tname, record.incarnation, pending, request, gate.hold_for_commit, (record, revision)
                )
            except LeaseRaced:
                # Raced by a request with the same key, perhaps: then its outcome is the answer.
                replay = None if key is None else self._replay(tname, record, request, key, change)
                if replay is not None:
                    return replay
        return self._commit_version(tname, record.incarnation, pending, request, gate.hold)

    def _replay(
        self, tname: TableName, record: TableRecord, request: Any, key: str, change: StagedChange | None
    ) -> CreateTableVersionResponse | None:
        """The first outcome of the commit made under ``key``, or None if none landed
        (``idempotency.first_version``: a client's retry must make the same change)."""

        def retry() -> tuple[str, str]:
            staged = change if change is not None else self._staged(record, request)[1]
            return retry_digest(tname, staged), f"{staged.operation or 'commit'} of {staged.rows_added} rows"

        ver = first_version(
            self.catalog.ctx,
            commit_id_for(self.principal, key, "version"),
            key,
            tname,
            str(request_field(request, "manifest_path")),
            retry,
            record.location,
        )
        return None if ver is None else CreateTableVersionResponse(version=table_version(ver))

    def _commit_version(
        self,
        tname: TableName,
        incarnation: str,
        pending: PendingCommit,
        request: Any,
        holding: Callable[[str], Any],
        read: tuple[TableRecord, int] | None = None,
    ) -> CreateTableVersionResponse:
        """One attempt at the commit, under ``holding`` (the gate's hold or hold_for_commit).
        ``read``: the table's record and revision as read before; used as they are when the
        lease is not acquired (its one commit is conditional on that revision; a change since
        fails it as LeaseRaced, with nothing landed), read again under an acquired lease."""
        ctx = self.catalog.ctx
        with holding(incarnation) as lease:
            if read is not None and lease.optimistic:
                record, revision = read  # a registry round trip fewer per commit
            else:
                record, revision = self.catalog.ctx.table(tname, incarnation=incarnation, declared=True)
            storage = self.catalog.settings.storage_options(record.location)
            bound = BoundTableNamespace(
                self.catalog.store,
                tname,
                record,
                revision,
                pending=pending,
                lease=lease,
                storage_options=storage,
                checked_manifest=str(request_field(request, "manifest_path")),  # by ``_staged``
                fault=ctx.hook and (lambda point: ctx.at(f"{pending.operation}:{point}")),
            )
            try:
                response = bound.create_table_version(request)
            except Exception:
                if bound.failure is not None:
                    raise bound.failure from None
                raise
        # The version is published at its canonical path: remove the client's staging manifest,
        # as a CLI commit does (safe without the lease; a failure only leaves the file for the
        # next writer or finish_versions).
        self.catalog.manifests.finalize(bound.record, pending)
        for version, _ in pending.landed:
            if version not in bound.publisher.unpublished:
                self.catalog.published_versions.remember(bound.record.location, version)
        return response

    def _govern_schema_change(
        self, tname: TableName, record: TableRecord, staged_ipc: bytes, change: StagedChange
    ) -> None:
        """The schema change a staged manifest makes held to the catalog's role for it
        (``staged_schema.require_schema_role``). Before the lease: a refused commit writes
        nothing."""
        require_schema_role(self.principal, tname, record, record.schema_ipc, staged_ipc, change)

    def _staged(self, record: TableRecord, request: Any) -> tuple[bytes, StagedChange]:
        """The staged manifest's schema (IPC bytes) and what it commits, from one read of the
        file, which is also checked to reference only files inside the table (``table_files``:
        InvalidInput otherwise, and for a missing file); the change names the files it
        adds (``added_files``), checked under the lease. pylance declares without a schema and
        may change it with any commit; the change (Lance's transaction) feeds the commit log and
        the schema rules (one that cannot be read is unknown: operation None). The schema is
        Lance's own decode of the manifest (``staged_schema``): one Lance cannot open is refused
        (InvalidInput)."""
        from lake_platform.engine.storage import read_object

        path = str(request_field(request, "manifest_path"))
        storage = self.catalog.settings.storage_options(record.location)
        try:
            raw = read_object(record.location, path, storage)
        except FileNotFoundError:
            raise InvalidInput(f"manifest {path.rpartition('/')[2]} does not exist") from None
        paths = check_manifest(record.location, path, storage, raw=raw, version=int_field(request, "version"))
        parent = parent_manifest(record.location, path, record.current_version, storage)
        schema = staged_schema(record.location, path, raw, parent, storage)
        try:
            change = staged_change(record.location, path, storage, raw=raw)
        except (OSError, ValueError):
            change = StagedChange(None)
        return schema.ipc, dataclasses.replace(
            change,
            added_files=added_files(paths, parent),
            renamed_columns=schema.renamed,
            keeps_rows=schema.keeps_rows,
        )


def log_operation(lance_operation: str | None, current_version: int) -> str:
    """The commit-log operation of a Lance client's commit: Lance's own name, hyphenated as the
    catalog's are (``append``, ``overwrite``, ``delete``, ``create-index``, ...); the first data
    of a declared table (Lance's overwrite onto version 0) is a ``create``, as from the CLI;
    ``commit`` when the transaction could not be read."""
    if lance_operation is None:
        return "commit"
    if lance_operation == "overwrite" and current_version == 0:
        return "create"
    return lance_operation.replace("_", "-")


def request_ids(request: Any) -> list[str]:
    ident = request_field(request, "id")
    if ident is None:
        return []
    if not isinstance(ident, (list, tuple)) or not all(isinstance(p, str) for p in ident):
        raise ns_errors.InvalidInputError(f"invalid id {ident!r}: expected a list of names")
    return list(ident)


def table_name(request: Any) -> TableName:
    return TableName.from_parts(request_ids(request))


def mode_of(request: Any, member: str, allowed: tuple[str, ...], default: str) -> str:
    """The request's ``member`` (a mode or behavior) as one of ``allowed`` (snake_case),
    ``default`` when absent. The spec reads these case insensitively in PascalCase or
    snake_case, so ``ExistOk``, ``EXIST_OK`` and ``exist_ok`` are one value; anything else is
    InvalidInput. ``request``: a REST body or a pylance request model (``request_field``)."""
    value = request_field(request, member)
    if value is None or value == "":
        return default
    if isinstance(value, str):
        folded = value.replace("_", "").lower()
        for name in allowed:
            if name.replace("_", "") == folded:
                return name
    raise InvalidInput(f"{member} must be one of {', '.join(allowed)}, got {value!r}")
