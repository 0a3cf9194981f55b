"""Atomic multi-table commits over REST: ``BatchCreateTableVersions`` and ``BatchCommitTables``.

Each entry (operation) is a table's CreateTableVersion: a manifest the client staged, on main
or, naming a ``branch``, on that branch's line (the manifest in the branch's dataset, as for
CreateTableVersion with ``branch``). All of them land in one registry transaction under every
line's lease (``catalog/staged_transaction``) or none does: a missing table is TableNotFound, a
missing branch TableBranchNotFound, a version someone committed meanwhile is a 409, two entries
on one line of a table, or more tables than the registry takes at once
(``transaction.max_tables``; with a branch's line, what one registry write takes) a 400, each
with nothing committed. Authorization as CreateTableVersion: write on every table's project. An
``Idempotency-Key`` header makes a retry answer the first outcome.

``BatchCommitTables`` takes only ``create_table_version`` operations; a batch naming another
kind (declare, delete versions, deregister) is Unsupported, nothing committed.
"""

from __future__ import annotations

from typing import Any

import lake_platform.rest.handlers.branches as branches
from lake_platform.catalog.staged_transaction import StagedVersions
from lake_platform.errors import InvalidInput, TableNotFound, Unsupported
from lake_platform.rest import ids
from lake_platform.rest.handlers.versions import check_manifest_path
from lake_platform.rest.idempotency import idempotency_key
from lake_platform.rest.request import RestRequest

#: BatchCommitTables' operation kinds; only the first is backed.
_OPERATIONS = ("create_table_version", "declare_table", "delete_table_versions", "deregister_table")


def _entry(request: RestRequest, entry: Any) -> dict[str, Any]:
    """One CreateTableVersion request, its id checked and scoped to the caller's project, its
    ``branch`` (None: main) read."""
    if not isinstance(entry, dict):
        raise InvalidInput(f"each entry is an object, got {entry!r}")
    branch = branches.branch_in(entry)
    ident = ids.check_body_id(entry.get("id"), request.service.delimiter(request.query))
    if len(ident) < 4:
        raise InvalidInput(f"a table id has at least 4 segments, got {ident!r}")
    project = request.principal.project
    if project != "*" and ident[0] != project:  # another tenant's table looks missing
        raise TableNotFound(f"table {'.'.join(ident)} does not exist")
    version, path = entry.get("version"), entry.get("manifest_path")
    if not isinstance(version, int) or isinstance(version, bool) or version < 1:
        raise InvalidInput(f"version must be a positive integer, got {version!r}")
    if not isinstance(path, str) or not path:
        raise InvalidInput("manifest_path is required")
    return {**entry, "id": ident, "branch": branch}


def _commit(request: RestRequest, entries: list[dict[str, Any]]) -> tuple[str, list[dict[str, Any]]]:
    """Every entry committed atomically: the transaction id and each version, in entry order."""
    batch = StagedVersions(request.service.catalog, request.principal, idempotency_key(request))
    for entry in entries:
        path = entry["manifest_path"]
        batch.add(  # the manifest in the line's dataset: the table's, or the branch's
            entry,
            check=lambda record, path=path: check_manifest_path(record.location, path),
            branch=entry["branch"],
        )
    versions = batch.commit_versions()
    return batch.commit_id, [v.to_dict() for v in versions]


def _list(body: dict[str, Any], field: str) -> list[Any]:
    found = body.get(field)
    if not isinstance(found, list) or not found:
        raise InvalidInput(f"{field} must be a non-empty list")
    return found


def batch_create_table_versions(request: RestRequest) -> Any:
    entries = [_entry(request, e) for e in _list(request.body, "entries")]
    transaction_id, versions = _commit(request, entries)
    return {"transaction_id": transaction_id, "versions": versions}


def batch_commit_tables(request: RestRequest) -> Any:
    entries = []
    for op in _list(request.body, "operations"):
        kinds = [k for k in _OPERATIONS if isinstance(op, dict) and op.get(k) is not None]
        if len(kinds) != 1:
            raise InvalidInput(f"each operation names exactly one of {', '.join(_OPERATIONS)}")
        if kinds[0] != "create_table_version":
            raise Unsupported(
                f"BatchCommitTables commits create_table_version operations only, not {kinds[0]}; "
                "nothing was committed"
            )
        entries.append(_entry(request, op["create_table_version"]))
    transaction_id, versions = _commit(request, entries)
    results = [{"create_table_version": {"transaction_id": transaction_id, "version": v}} for v in versions]
    return {"transaction_id": transaction_id, "results": results}


HANDLERS = {
    "BatchCreateTableVersions": batch_create_table_versions,
    "BatchCommitTables": batch_commit_tables,
}
