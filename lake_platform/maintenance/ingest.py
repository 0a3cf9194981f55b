"""Ingest one batch of inbox files into one table: exactly once, bad files quarantined.

- The commit id is derived from the table and the batch's file identities (key, size, mtime,
  etag) as requested, so a retried or re-requested run of the same batch finds its commit
  already landed and commits nothing (``replayed``); the outcome reports what that commit
  logged (its files, rows and bytes), not the request.
- Each file is checked before the write (readable, header parses, columns fit the table); a
  file that fails, before or while streaming, is moved to ``<inbox>/_quarantine/<key>`` with a
  ``.reason.txt``, and the rest of the batch is written. A failed stream commits nothing (the
  catalog only commits once the stream is drained), so the retry without the bad file is safe.
- A file whose identity changed since it was listed is skipped: the sensor lists it again with
  its new identity. A file already quarantined by an earlier attempt is skipped.
- The run ends in one registry commit whose log entry records the ingested files' identities.
- Each ingested file identity also gets a commit marker of its own (``cid/file-<hash>``) pointing
  at the batch's commit, so a file offered again in a *different* batch (a reset sensor cursor)
  is skipped too. The markers land in the append's own registry transaction: a run stopped
  right after its commit leaves no file ingested but unmarked.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from lake_platform.catalog.provenance import Provenance
from lake_platform.errors import InvalidInput, LakeError, TableSchemaValidationError
from lake_platform.maintenance.inbox import Inbox, InboxFile
from lake_platform.registry.records import CommitMarker

if TYPE_CHECKING:
    from lake_platform.catalog.catalog import Catalog

log = logging.getLogger(__name__)


@dataclass
class IngestOutcome:
    table: str
    commit_id: str
    status: str  # committed | replayed | nothing-to-do
    from_version: int | None = None
    version: int | None = None
    rows: int = 0
    bytes: int = 0
    files: list[dict[str, Any]] = field(default_factory=list)
    quarantined: list[dict[str, str]] = field(default_factory=list)
    skipped: list[dict[str, str]] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def batch_commit_id(table: str, files: list[InboxFile]) -> str:
    ids = sorted((f.key, f.size, f.mtime_ns, f.etag) for f in files)
    digest = hashlib.sha256(json.dumps([table, ids]).encode()).hexdigest()
    return f"ingest-{digest[:40]}"


def file_marker_id(table: str, f: InboxFile) -> str:
    digest = hashlib.sha256(json.dumps([table, f.key, f.size, f.mtime_ns, f.etag]).encode()).hexdigest()
    return f"file-{digest[:40]}"


def _file_markers(table: str, files: list[InboxFile], commit_id: str, incarnation: str) -> list[CommitMarker]:
    """One marker per file, landing in the batch's own commit (never one without the other)."""
    return [
        CommitMarker(
            commit_id=file_marker_id(table, f),
            target=table,
            operation="ingest-file",
            incarnation=incarnation,
            part_of=commit_id,
        )
        for f in files
    ]


def _ingested_at(catalog: Catalog, marker: CommitMarker) -> int | None:
    if marker.to_version is not None or marker.part_of is None:
        return marker.to_version
    batch = catalog.ctx.commit_landed(marker.part_of)
    return batch.to_version if batch is not None else None


def ingest_batch(
    catalog: Catalog,
    inbox: Inbox,
    table: str,
    files: list[InboxFile],
    *,
    actor: str | None = None,
    run_id: str | None = None,
) -> IngestOutcome:
    from lake_platform.catalog.arrow_io import schema_from_ipc
    from lake_platform.maintenance import sources

    if not files:
        raise InvalidInput("an ingest batch needs at least one file")
    seen: set[str] = set()
    for f in files:
        if f.table != table:
            raise InvalidInput(f"{f.key} is not in the inbox folder of {table}")
        if f.key in seen:  # its rows would be streamed twice into the one commit
            raise InvalidInput(f"{f.key} is listed twice in the batch of files to ingest")
        seen.add(f.key)
    commit_id = batch_commit_id(table, files)
    outcome = IngestOutcome(table, commit_id, "nothing-to-do")
    marker = catalog.ctx.commit_landed(commit_id)
    if marker is not None:
        outcome.status, outcome.from_version, outcome.version = (
            "replayed",
            marker.from_version,
            marker.to_version,
        )
        return _as_committed(catalog, outcome)

    pending: list[InboxFile] = []
    for f in files:
        now = inbox.stat(f.key)
        if now is None:
            reason = "quarantined earlier" if inbox.in_quarantine(f.key) else "gone from the inbox"
            outcome.skipped.append({"key": f.key, "reason": reason})
        elif (now.size, now.mtime_ns, now.etag) != (f.size, f.mtime_ns, f.etag):
            outcome.skipped.append(
                {"key": f.key, "reason": "changed since it was listed; it will be listed again"}
            )
        elif (earlier := catalog.ctx.commit_landed(file_marker_id(table, f))) is not None:
            outcome.skipped.append(
                {"key": f.key, "reason": f"already ingested (version {_ingested_at(catalog, earlier)})"}
            )
        else:
            pending.append(f)

    record = catalog.reads.open_table(table).record
    types = schema_from_ipc(record.schema_ipc)  # how text formats read the table's columns
    with ExitStack() as stack:
        paths: dict[str, Path] = {}
        for f in list(pending):
            try:
                paths[f.key] = stack.enter_context(inbox.local_copy(f))
            except LakeError as exc:  # a link out of the folder: refused by name, the rest goes on
                _quarantine(inbox, f, exc, outcome)
                pending.remove(f)
        while True:
            opened: list[tuple[InboxFile, sources.Source, pa.RecordBatchReader]] = []
            for f in list(pending):
                try:
                    src = sources.describe(paths[f.key], name=f.name)
                    opened.append((f, src, sources.open_source(src, types)))
                except LakeError as exc:
                    _quarantine(inbox, f, exc, outcome)
                    pending.remove(f)
            # The table's schema_evolution policy, file by file: a file it refuses (a narrowing,
            # a string where numbers are, a new column under ``strict``) is quarantined with the
            # reason; the others may add or widen columns together, in the batch's one commit.
            accepted: list[tuple[InboxFile, sources.Source, pa.RecordBatchReader]] = []
            for f, src, reader in opened:
                try:
                    catalog.schemas.plan_input(
                        table,
                        [r.schema for _, _, r in accepted] + [reader.schema],
                        labels=[s.label for _, s, _ in accepted] + [src.label],
                    )
                    accepted.append((f, src, reader))
                except TableSchemaValidationError as exc:
                    _quarantine(inbox, f, exc, outcome)
                    pending.remove(f)
            if not accepted:
                return outcome
            change = catalog.schemas.plan_input(table, [r.schema for _, _, r in accepted])
            target = change.target
            readers: list[tuple[InboxFile, pa.RecordBatchReader]] = []
            for f, src, reader in accepted:
                try:
                    readers.append((f, sources.chain([src], [reader], target, change.optional)))
                except LakeError as exc:
                    _quarantine(inbox, f, exc, outcome)
                    pending.remove(f)
            if not readers:
                return outcome
            state: dict[str, Any] = {}
            stream = pa.RecordBatchReader.from_batches(target, _chain(readers, state))
            try:
                result = catalog.tables.append(
                    table,
                    stream,
                    by=Provenance(actor=actor, run_id=run_id, commit_id=commit_id),
                    detail={
                        "inbox": inbox.location,
                        "files": [f.identity() for f, _ in readers],
                        "quarantined": [q["key"] for q in outcome.quarantined],
                        # Conformed per file above, so the append sees no column missing.
                        **({"filled_columns": list(change.filled)} if change.filled else {}),
                    },
                    markers=_file_markers(table, [f for f, _ in readers], commit_id, record.incarnation),
                )
            except (InvalidInput, TableSchemaValidationError) as exc:
                bad = state.get("failed")
                if bad is None or catalog.ctx.commit_landed(commit_id) is not None:
                    raise
                _quarantine(inbox, bad, exc, outcome)
                pending.remove(bad)
                continue
            outcome.from_version, outcome.version = result.from_version, result.to_version
            if result.replayed:  # another run of this batch committed it meanwhile
                outcome.status, outcome.quarantined = "replayed", []
                return _as_committed(catalog, outcome)
            outcome.status = "committed"
            outcome.rows, outcome.bytes = result.rows_added, result.bytes_added
            outcome.files = [f.identity() for f, _ in readers]
            return outcome


def _as_committed(catalog: Catalog, outcome: IngestOutcome) -> IngestOutcome:
    """A replayed batch told as its commit logged it: the files it ingested (not all those
    requested: some were gone or quarantined then), its rows and bytes (none are read now)."""
    entry = catalog.reads.commit(outcome.table, outcome.commit_id)
    if entry is not None:
        outcome.files = [dict(f) for f in entry.detail.get("files", [])]
        outcome.rows, outcome.bytes = entry.rows_added, entry.bytes_added
        outcome.quarantined = [
            {"key": key, "reason": "quarantined when the batch was committed"}
            for key in entry.detail.get("quarantined", [])
        ]
    return outcome


def _chain(
    readers: list[tuple[InboxFile, pa.RecordBatchReader]], state: dict[str, Any]
) -> Iterator[pa.RecordBatch]:
    for f, reader in readers:
        state["current"] = f
        try:
            yield from reader
        except Exception:
            state["failed"] = f
            raise


def _quarantine(inbox: Inbox, f: InboxFile, exc: BaseException, outcome: IngestOutcome) -> None:
    reason = f"{type(exc).__name__}: {exc}"
    moved = inbox.quarantine(f, f"{f.key}\n{reason}")
    log.warning("quarantined %s: %s", f.key, reason)
    outcome.quarantined.append({"key": f.key, "reason": reason, "moved_to": moved})
