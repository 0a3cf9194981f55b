"""Data operations: create, insert (append/overwrite), merge-insert (Arrow bodies), update,
delete, count (with a ``predicate``: planned as QueryTable's filter, ``plans.py``). Each write
is one catalog write (``tables.create_table``/``append``/``overwrite``/``delete_rows``,
``rows.update_rows``/``merge_insert``; with ``branch``, ``branch_writes`` and
``branch_changes`` on the branch's own line), so it commits through the registry like a CLI
write, under the caller's name, all of it or nothing. Each write honours an ``Idempotency-Key``
(``rest/idempotency``): a retry whose first attempt landed is answered from that commit's log
entry (its rows or counts), nothing committed."""

from __future__ import annotations

import json
from typing import Any

import pyarrow as pa

import lake_platform.rest.handlers.branches as branches
import lake_platform.rest.handlers.plans as plans
from lake_platform.catalog.provenance import Provenance
from lake_platform.catalog.pylance_commits import mode_of
from lake_platform.catalog.results import CommitResult
from lake_platform.catalog.row_changes import RowChange
from lake_platform.errors import InvalidInput, TableAlreadyExists
from lake_platform.rest.handlers.common import scoped
from lake_platform.rest.idempotency import commit_once, confirm, keyed
from lake_platform.rest.request import Reply, RestRequest


def arrow_reader(request: RestRequest) -> pa.RecordBatchReader:
    """The body as an Arrow IPC stream; a body that does not parse is InvalidInput, before any write."""
    if not request.raw:
        raise InvalidInput("the body must be an Arrow IPC stream (application/vnd.apache.arrow.stream)")
    body = pa.BufferReader(request.raw)
    # An IPC stream aligns its buffers to 8 bytes; read in place, a decimal128 column's values
    # sat where Lance's 16-byte reads panic (a 500). Arrow's type-specific alignment takes 8 as
    # enough for a decimal, so the reader copies each buffer not on 64 bytes (a memcpy of a body
    # already bounded by LAKE_REST_MAX_BODY_BYTES).
    aligned = pa.ipc.IpcReadOptions(ensure_alignment=pa.ipc.Alignment.At64Byte)
    try:
        table = pa.ipc.open_stream(body, options=aligned).read_all()
    except (pa.ArrowInvalid, pa.ArrowException, OSError) as exc:
        raise InvalidInput(f"the body is not a valid Arrow IPC stream: {exc}") from None
    # The reader stops at the stream's end marker: bytes after it (a second stream, say) would be
    # dropped without a word, and their rows with them.
    left = len(request.raw) - body.tell()
    if left:
        raise InvalidInput(f"the body has {left} bytes after the Arrow IPC stream's end; send one stream")
    # Buffered: the body is already in memory (bounded by LAKE_REST_MAX_BODY_BYTES) and a
    # reader that fails halfway through a write would leave data files behind.
    return table.to_reader()


def create_table(request: RestRequest) -> Any:
    scoped(request, table=True)
    tname = request.table_name()
    mode = mode_of(request.body, "mode", ("create", "exist_ok", "overwrite"), "create")
    reader = arrow_reader(request)
    catalog = request.service.catalog

    def commit(by: Provenance, detail: dict[str, object]) -> CommitResult | None:
        try:
            return catalog.tables.create_table(str(tname), reader, detail=detail, by=by)
        except TableAlreadyExists:
            if mode == "create":
                raise
            if mode == "overwrite":
                return catalog.tables.overwrite(str(tname), arrow_reader(request), detail=detail, by=by)
            return None

    payload = mode.encode() + b"\0" + request.raw
    result = commit_once(request, tname, "create", payload, commit, {"create", "overwrite"})
    record = catalog.ctx.table(tname, declared=True)[0]  # exist_ok keeps a declared table too
    return {
        "location": record.location,
        "version": record.current_version if result is None else result.to_version,
        "storage_options": catalog.settings.storage_options(record.location) or None,
        "transaction_id": None if result is None else result.commit_id,
    }


def insert_into_table(request: RestRequest) -> Any:
    """An append or overwrite of main, or of a ``branch`` (``catalog.branch_writes``: a commit
    on the branch's own line; main never moves)."""
    scoped(request, table=True)
    tname = request.table_name()
    branch = branches.branch_of(request)
    mode = mode_of(request.body, "mode", ("append", "overwrite"), "append")
    reader = arrow_reader(request)
    catalog = request.service.catalog

    def commit(by: Provenance, detail: dict[str, object]) -> CommitResult:
        if branch is None:
            write = catalog.tables.append if mode == "append" else catalog.tables.overwrite
            return write(str(tname), reader, detail=detail, by=by)
        on_branch = catalog.branch_writes.append if mode == "append" else catalog.branch_writes.overwrite
        return on_branch(str(tname), branch, reader, detail=detail, by=by)

    # The branch is part of the request: the key reused for main or another branch is 422.
    payload = mode.encode() + b"\0" + (b"" if branch is None else branch.encode() + b"\0") + request.raw
    result = commit_once(request, tname, "insert", payload, commit, {"append", "overwrite"})
    return {
        "transaction_id": result.commit_id,
        "num_inserted_rows": result.rows_added,
        "version": result.to_version,
    }


def delete_from_table(request: RestRequest) -> Any:
    """The rows a predicate selects deleted from main, or from a ``branch``
    (``catalog.branch_changes``: a commit on the branch's own line; main never moves)."""
    scoped(request, table=True)
    tname = request.table_name()
    branch = branches.branch_of(request)
    predicate = request.body.get("predicate")
    if not isinstance(predicate, str) or not predicate.strip():
        raise InvalidInput("predicate is required (a SQL filter of the rows to delete)")
    catalog = request.service.catalog

    def commit(by: Provenance, detail: dict[str, object]) -> CommitResult:
        if branch is None:
            return catalog.tables.delete_rows(str(tname), predicate, detail=detail, by=by)
        return catalog.branch_changes.delete_rows(str(tname), branch, predicate, detail=detail, by=by)

    payload = (b"" if branch is None else branch.encode() + b"\0") + predicate.encode()
    result = commit_once(request, tname, "delete", payload, commit, {"delete"})
    return {"transaction_id": result.commit_id, "version": result.to_version}


def update_table(request: RestRequest) -> Any:
    """Columns set by SQL expressions on the rows a predicate selects: one commit on main
    (``catalog.rows.update_rows``) or on a ``branch`` (``catalog.branch_changes``)."""
    scoped(request, table=True)
    tname = request.table_name()
    branch = branches.branch_of(request)
    pairs = request.body.get("updates")
    if (
        not isinstance(pairs, list)
        or not pairs
        or not all(
            isinstance(p, list) and len(p) == 2 and all(isinstance(x, str) and x for x in p) for p in pairs
        )
    ):
        raise InvalidInput("updates must be a non-empty list of [column, SQL expression] pairs")
    updates = dict(pairs)
    if len(updates) != len(pairs):
        raise InvalidInput("a column is updated twice")
    predicate = request.body.get("predicate")
    payload = json.dumps([branch, pairs, predicate]).encode()
    request_key = keyed(request, tname, "update", payload, {"update"})
    if request_key.first is not None:
        change = RowChange.logged(request_key.first)
    elif branch is None:
        change = request.service.catalog.rows.update_rows(
            str(tname), updates, predicate, detail=request_key.detail, by=request_key.by
        )
    else:
        change = request.service.catalog.branch_changes.update_rows(
            str(tname), branch, updates, predicate, detail=request_key.detail, by=request_key.by
        )
    confirm(request, tname, request_key, change.commit_id)
    return {
        "transaction_id": change.commit_id,
        "updated_rows": change.counts.get("updated_rows", 0),
        "version": change.version,
    }


def _optional_text(request: RestRequest, member: str) -> str | None:
    value = request.body.get(member)
    if value is not None and (not isinstance(value, str) or not value.strip()):
        raise InvalidInput(f"{member} must be a SQL filter")
    return value


def merge_insert_into_table(request: RestRequest) -> Any:
    """Upsert the Arrow body on the key columns ``on`` (comma-separated): one commit on main
    (``catalog.rows.merge_insert``) or on a ``branch`` (``catalog.branch_changes``), all of it
    or nothing."""
    scoped(request, table=True)
    tname = request.table_name()
    body = request.body
    branch = branches.branch_of(request)
    on = body.get("on")
    if isinstance(on, str):
        on = on.split(",")
    if not isinstance(on, list) or not all(isinstance(c, str) for c in on):
        raise InvalidInput("on is required (the key column, or columns separated by commas)")
    keys = [c.strip() for c in on if c.strip()]
    options: dict[str, Any] = {
        "update_matched": bool(body.get("when_matched_update_all")),
        "update_matched_if": _optional_text(request, "when_matched_update_all_filt"),
        "insert_unmatched": bool(body.get("when_not_matched_insert_all")),
        "delete_unmatched_by_source": bool(body.get("when_not_matched_by_source_delete")),
        "delete_unmatched_by_source_if": _optional_text(request, "when_not_matched_by_source_delete_filt"),
    }
    # The options and the rows make the request: the same key with other ones is 422.
    payload = json.dumps([branch, keys, options]).encode() + b"\0" + request.raw
    request_key = keyed(request, tname, "merge", payload, {"merge"})
    if request_key.first is not None:
        change = RowChange.logged(request_key.first)
        return {"transaction_id": change.commit_id, "version": change.version, **change.counts}
    options.update(detail=request_key.detail, by=request_key.by)
    catalog = request.service.catalog
    if branch is None:
        change = catalog.rows.merge_insert(str(tname), arrow_reader(request), keys, **options)
    else:
        change = catalog.branch_changes.merge_insert(
            str(tname), branch, arrow_reader(request), keys, **options
        )
    confirm(request, tname, request_key, change.commit_id)
    return {"transaction_id": change.commit_id, "version": change.version, **change.counts}


def count_table_rows(request: RestRequest) -> Any:
    scoped(request, table=True)
    tname = request.table_name()
    version = request.body.get("version")
    if version is not None and (not isinstance(version, int) or isinstance(version, bool) or version < 1):
        raise InvalidInput(f"version must be a positive integer, got {version!r}")
    branch = branches.branch_of(request)
    predicate = request.body.get("predicate")
    if predicate is not None:
        if not isinstance(predicate, str) or not predicate.strip():
            raise InvalidInput("predicate must be a SQL boolean expression over the table's columns")
        # Planned as QueryTable's filter (parsed by DataFusion, never spliced into SQL).
        return Reply(str(plans.count_matching(request, predicate, version, branch)), "text/plain")
    by = Provenance(principal=request.principal)
    if branch is not None:
        snap = request.service.catalog.branches.open_branch(str(tname), branch, version, by=by)
    else:
        snap = request.service.catalog.reads.open_table(str(tname), version, by=by)
    return Reply(str(snap.count_rows()), "text/plain")


HANDLERS = {
    "CreateTable": create_table,
    "InsertIntoTable": insert_into_table,
    "DeleteFromTable": delete_from_table,
    "CountTableRows": count_table_rows,
    "UpdateTable": update_table,
    "MergeInsertIntoTable": merge_insert_into_table,
}
