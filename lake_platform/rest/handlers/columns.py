"""Column changes over REST, through the catalog's schema-change commits (``catalog/alter.py``):
each request is one registry commit under the table's lease, all of its columns or none, logged
under the caller's name, with ``lake table alter``'s roles: adding takes write; renaming and
dropping take admin, and dropping is refused on a protected table.

- AlterTableAddColumns: each new column is a SQL expression over the row (Lance computes it);
  virtual (UDF) columns are Unsupported.
- AlterTableAlterColumns: renames; retyping, nullability and virtual columns are Unsupported
  (not catalog schema changes).
- AlterTableDropColumns: metadata only, as ``lake table alter drop-column``.
- UpdateFieldMetadata: columns' field metadata merged (a null value deletes its key) or, with
  ``replace``, replaced; one commit for all columns (``Schemas.update_field_metadata``; write).

Each takes ``branch``: the same change, with the same roles, as one commit on the branch's own
line (``catalog/branch_changes.py``); main never moves. Each honours an ``Idempotency-Key``
(``rest/idempotency.keyed``): a retry whose first attempt landed answers it, nothing committed.
"""

from __future__ import annotations

from typing import Any

import lake_platform.rest.handlers.branches as branches
from lake_platform.catalog.provenance import Provenance
from lake_platform.catalog.schemas import FieldMetadataUpdates, field_metadata_of
from lake_platform.errors import InvalidInput, Unsupported
from lake_platform.naming import TableName
from lake_platform.rest.handlers.common import scoped
from lake_platform.rest.idempotency import Keyed, confirm, keyed_body
from lake_platform.rest.request import RestRequest


def _table_and_branch(request: RestRequest) -> tuple[TableName, str | None]:
    scoped(request, table=True)
    return request.table_name(), branches.branch_of(request)


def _keyed(request: RestRequest, tname: TableName, branch: str | None, kind: str, operation: str) -> Keyed:
    """The change under the request's idempotency key: the body (and the branch) make it this
    request; ``operation`` is what its commit is logged as."""
    return keyed_body(request, tname, kind, {operation}, branch)


def _entries(request: RestRequest, member: str) -> list[dict[str, Any]]:
    entries = request.body.get(member)
    if not isinstance(entries, list) or not entries or not all(isinstance(e, dict) for e in entries):
        raise InvalidInput(f"{member} must be a non-empty list of objects")
    return entries


def add_columns(request: RestRequest) -> Any:
    tname, branch = _table_and_branch(request)
    expressions: dict[str, str] = {}
    for entry in _entries(request, "new_columns"):
        name = entry.get("name")
        if not isinstance(name, str) or not name:
            raise InvalidInput("every new column needs a name")
        if entry.get("virtual_column") is not None:
            raise Unsupported("virtual (UDF) columns are not catalog schema changes")
        expression = entry.get("expression")
        if not isinstance(expression, str) or not expression.strip():
            raise InvalidInput(f"new column {name}: expression is required (a SQL expression over the row)")
        if name in expressions:
            raise InvalidInput(f"column {name} is named twice")
        expressions[name] = expression
    request_key = _keyed(request, tname, branch, "add-columns", "add-columns")
    if request_key.first is not None:
        return {"version": request_key.first.to_version, "transaction_id": request_key.first.commit_id}
    by, detail = request_key.by, request_key.detail
    if branch is None:
        result = request.service.catalog.alter.add_computed_columns(
            str(tname), expressions, detail=detail, by=by
        )
    else:
        result = request.service.catalog.branch_changes.add_computed_columns(
            str(tname), branch, expressions, detail=detail, by=by
        )
    confirm(request, tname, request_key, result.commit_id)
    return {"version": result.to_version, "transaction_id": result.commit_id}


def alter_columns(request: RestRequest) -> Any:
    tname, branch = _table_and_branch(request)
    renames: dict[str, str] = {}
    for entry in _entries(request, "alterations"):
        path = entry.get("path")
        if not isinstance(path, str) or not path:
            raise InvalidInput("every alteration needs the column's path")
        for member, why in (
            ("data_type", "retyping a column"),
            ("nullable", "changing a column's nullability"),
            ("virtual_column", "a virtual (UDF) column"),
        ):
            if entry.get(member) is not None:
                raise Unsupported(f"{why} is not a catalog schema change; renames are")
        rename = entry.get("rename")
        if not isinstance(rename, str) or not rename:
            raise InvalidInput(
                f"alteration of {path}: rename is required (the only change the catalog makes)"
            )
        if path in renames:
            raise InvalidInput(f"column {path} is altered twice")
        renames[path] = rename
    request_key = _keyed(request, tname, branch, "alter-columns", "rename-column")
    if request_key.first is not None:
        return {"version": request_key.first.to_version, "transaction_id": request_key.first.commit_id}
    by, detail = request_key.by, request_key.detail
    if branch is None:
        result = request.service.catalog.alter.rename_columns(str(tname), renames, detail=detail, by=by)
    else:
        result = request.service.catalog.branch_changes.rename_columns(
            str(tname), branch, renames, detail=detail, by=by
        )
    confirm(request, tname, request_key, result.commit_id)
    return {"version": result.to_version, "transaction_id": result.commit_id}


def drop_columns(request: RestRequest) -> Any:
    tname, branch = _table_and_branch(request)
    columns = request.body.get("columns")
    if not isinstance(columns, list) or not columns or not all(isinstance(c, str) and c for c in columns):
        raise InvalidInput("columns must be a non-empty list of column names")
    request_key = _keyed(request, tname, branch, "drop-columns", "drop-column")
    if request_key.first is not None:
        return {"version": request_key.first.to_version, "transaction_id": request_key.first.commit_id}
    by, detail = request_key.by, request_key.detail
    if branch is None:
        result = request.service.catalog.alter.drop_columns(str(tname), columns, detail=detail, by=by)
    else:
        result = request.service.catalog.branch_changes.drop_columns(
            str(tname), branch, columns, detail=detail, by=by
        )
    confirm(request, tname, request_key, result.commit_id)
    return {"version": result.to_version, "transaction_id": result.commit_id}


def update_field_metadata(request: RestRequest) -> Any:
    tname, branch = _table_and_branch(request)
    updates: FieldMetadataUpdates = {}
    for entry in _entries(request, "updates"):
        path, values, replace = entry.get("path"), entry.get("metadata"), entry.get("replace")
        if not isinstance(path, str) or not path:
            raise InvalidInput("every update needs the column's path")
        if "." in path:
            raise InvalidInput(f"{path}: only top-level columns' metadata is changed")
        if not isinstance(values, dict):
            raise InvalidInput(f"{path}: metadata must be a map of keys to strings (or null to delete a key)")
        if replace is not None and not isinstance(replace, bool):
            raise InvalidInput(f"{path}: replace must be a boolean")
        if path in updates:
            raise InvalidInput(f"column {path} is updated twice")
        updates[path] = (values, bool(replace))
    catalog = request.service.catalog
    request_key = _keyed(request, tname, branch, "field-metadata", "field-metadata")
    if request_key.first is not None:  # the columns' metadata as the first commit left it
        version, reader = request_key.first.to_version, Provenance(principal=request.principal)
        if branch is None:
            schema = catalog.reads.open_table(str(tname), version, by=reader).schema
        else:
            schema = catalog.branches.open_branch(str(tname), branch, version, by=reader).schema
        return {"version": version, "fields": field_metadata_of(schema, list(updates))}
    by, detail = request_key.by, request_key.detail
    if branch is None:
        result, fields = catalog.schemas.update_field_metadata(str(tname), updates, detail=detail, by=by)
    else:
        result, fields = catalog.branch_changes.update_field_metadata(
            str(tname), branch, updates, detail=detail, by=by
        )
    confirm(request, tname, request_key, result.commit_id)
    return {"version": result.to_version, "fields": fields}


HANDLERS = {
    "UpdateFieldMetadata": update_field_metadata,
    "AlterTableAddColumns": add_columns,
    "AlterTableAlterColumns": alter_columns,
    "AlterTableDropColumns": drop_columns,
}
