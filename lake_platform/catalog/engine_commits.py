"""Engine commits: what every change Lance makes through the registry shares. Under the held
lease, bind a namespace to the table incarnation and the pending commit (so whatever Lance
commits lands as a registry compare-and-swap, see ``namespace``), open the registered version
through it, resolve a failed engine call by its commit id (invariant 5: did our commit land?),
and report what landed. Used by the write path (``tables``), ``schemas``, ``alter``,
``indexes`` and ``versions``.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from lake_platform.catalog.commit_ids import answered, landed_by_another, require_same_write
from lake_platform.catalog.context import (
    CatalogContext,
    first_line,
    transient_storage_error,
)
from lake_platform.catalog.lease import Lease
from lake_platform.catalog.manifests import Manifests
from lake_platform.catalog.pending import PendingCommit
from lake_platform.catalog.reads import Reads
from lake_platform.catalog.results import CommitResult
from lake_platform.engine import lance_engine as engine
from lake_platform.errors import (
    Internal,
    LakeError,
    TableSchemaValidationError,
)
from lake_platform.naming import TableName
from lake_platform.registry.records import (
    TableRecord,
)
from lake_platform.registry.store import ABSENT

if TYPE_CHECKING:
    from lake_platform.catalog.namespace import BoundTableNamespace

log = logging.getLogger(__name__)


class EngineCommits:
    def __init__(self, ctx: CatalogContext, manifests: Manifests, reads: Reads) -> None:
        self.ctx = ctx
        self.manifests = manifests
        self.reads = reads

    def open_bound(
        self, tname: TableName, record: TableRecord, revision: int, pending: PendingCommit, lease: Lease
    ) -> tuple[BoundTableNamespace, Any]:
        """Under the held lease: settle the table, bind its namespace to ``pending``, and open the
        registered version through it, so whatever Lance commits on that dataset commits through
        the registry (deletes, index builds, schema changes)."""
        self.manifests.settle(tname, record, pending)
        ns = self.bind(tname, record, revision, pending, lease)
        ds = engine.open_version(
            namespace=ns,
            table_id=tname.parts,
            version=record.current_version,
            storage_options=self.ctx.storage(record.location),
        )
        return ns, ds

    def bind(
        self,
        tname: TableName,
        record: TableRecord,
        revision: int,
        pending: PendingCommit,
        lease: Lease,
        checked_manifest: str | None = None,
    ) -> BoundTableNamespace:
        """``checked_manifest``: a client's staged manifest the caller has checked already
        (``table_files``), which the namespace need not read and check again."""
        # Imported here: lance_namespace is heavy, and registry-only commands never bind a table.
        from lake_platform.catalog.namespace import BoundTableNamespace

        return BoundTableNamespace(
            self.ctx.store,
            tname,
            record,
            revision,
            pending=pending,
            lease=lease,
            storage_options=self.ctx.storage(record.location),
            fault=self.ctx.hook and (lambda p: self.ctx.at(f"{pending.operation}:{p}")),
            fresh=revision != ABSENT,
            tidy_refused=True,
            checked_manifest=checked_manifest,
        )

    def resolve_failure(self, pending: PendingCommit, ns: BoundTableNamespace, exc: BaseException) -> None:
        """After a failed engine call: did our commit land anyway? (invariant 5)"""
        import pyarrow as pa

        marker = None
        try:
            marker = self.ctx.commit_landed(pending.commit_id)
        except LakeError:
            pass
        if marker is not None:
            if landed_by_another(pending, marker):  # the same id sent at once: it is ours if the same write
                require_same_write(pending, marker)
                pending.replayed = True
            if not pending.landed and marker.to_version is not None:
                pending.landed.append((marker.to_version, marker.log_key))
            log.warning(
                "commit %s landed although the engine reported: %s", pending.commit_id, first_line(exc)
            )
            return
        if ns.failure is not None:
            raise ns.failure from None
        if isinstance(exc, LakeError):
            raise exc
        if isinstance(exc, (pa.ArrowInvalid, pa.ArrowTypeError)):
            raise TableSchemaValidationError(f"data does not fit the table: {first_line(exc)}") from None
        if isinstance(exc, (OSError, ValueError)) and "schema" in str(exc).lower():
            raise TableSchemaValidationError(f"data does not fit the table: {first_line(exc)}") from None
        transient = transient_storage_error(exc)
        if transient is not None:
            raise transient from exc
        raise Internal(f"{pending.operation} failed: {first_line(exc)}") from exc

    def result(self, pending: PendingCommit, table: str) -> CommitResult:
        if not pending.landed:
            raise Internal(f"{pending.operation} of {table} committed no version")
        if pending.replayed:
            return answered(self.ctx, pending, table)
        from_version = pending.from_version
        if from_version is None:  # landed but resolved after an ambiguous failure
            marker = self.ctx.commit_landed(pending.commit_id)
            from_version = marker.from_version if marker else None
        rows, nbytes = pending.stream_totals() if pending.stream_totals else (0, 0)
        return CommitResult(
            pending.commit_id,
            table,
            pending.operation,
            from_version,
            pending.landed[-1][0],
            rows_added=rows,
            bytes_added=nbytes,
        )

    def enrich(
        self,
        tname: TableName,
        record: TableRecord,
        pending: PendingCommit,
        extra: dict[str, object] | None = None,
    ) -> None:
        """Add file counts to the commit-log entries once Lance's transaction can be read.

        The entry itself landed atomically with the version; this only completes its figures,
        and a failure here never fails the commit.
        """
        if not pending.landed or pending.operation == "append" or pending.replayed:
            return
        if pending.file_totals is not None and len(pending.landed) == 1 and not extra:
            return  # its entry landed complete (``step_records.count_created_files``)
        try:
            last_version, _ = pending.landed[-1]
            snap = self.reads.snapshot(
                tname, record.model_copy(update={"current_version": last_version}), last_version
            )
            for version, log_key in pending.landed:
                change = engine.change_stats(snap.dataset, version)
                patch: dict[str, object] = {
                    "files_added": change.files_added,
                    "files_removed": change.files_removed,
                    "bytes_added": change.bytes_added,
                    "bytes_removed": change.bytes_removed,
                }
                if extra:
                    patch["detail"] = {**pending.detail, **extra}
                self.ctx.patch_log(log_key, patch)
        except LakeError:
            log.warning("could not complete commit-log figures for %s", tname, exc_info=True)
