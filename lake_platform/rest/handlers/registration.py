"""A table's registration over REST: RenameTable moves it to another name (``catalog/rename.py``:
one registry transaction; locations are per incarnation, so no data moves; an
``Idempotency-Key`` makes a retry answer the first rename); RegisterTable adopts
an existing Lance dataset under the warehouse-root rules (``catalog/register.py``; an
``Idempotency-Key`` makes a retry answer the first registration)."""

from __future__ import annotations

from typing import Any

from lake_platform.catalog.pylance_commits import mode_of
from lake_platform.errors import InvalidInput, Unsupported
from lake_platform.naming import TableName, check_segment
from lake_platform.rest import ids
from lake_platform.rest.handlers.common import scoped
from lake_platform.rest.idempotency import Keyed, keyed_body, once
from lake_platform.rest.request import RestRequest


def rename_table(request: RestRequest) -> Any:
    scoped(request, table=True)
    tname = request.table_name()
    new_table = request.body.get("new_table_name")
    if not isinstance(new_table, str) or not new_table:
        raise InvalidInput("new_table_name is required")
    # Each part is checked as one segment before the name is joined: a dot (the catalog's own
    # separator) in one would otherwise name another namespace than the request did.
    check_segment(new_table, "new_table_name")
    namespace = request.body.get("new_namespace_id")
    if namespace is None:
        namespace = tname.parts[:-1]
    if not isinstance(namespace, list) or not all(isinstance(s, str) for s in namespace):
        raise InvalidInput("new_namespace_id must be a namespace id (a list of names)")
    namespace = ids.check_body_id(namespace, request.service.delimiter(request.query))
    target = TableName.from_parts([*namespace, new_table])
    # Logged under the new name (the old one is gone once it landed): the key is looked up there.
    request_key = keyed_body(request, target, "rename", {"rename"}, str(tname))
    if request_key.first is not None:  # the key's rename landed: its answer, not TableNotFound
        return {"transaction_id": request_key.first.commit_id}
    result = request.service.catalog.renames.rename_table(
        str(tname), str(target), detail=request_key.detail, by=request_key.by
    )
    return {"transaction_id": result.commit_id}


def register_table(request: RestRequest) -> Any:
    scoped(request, table=True)
    tname = request.table_name()
    if mode_of(request.body, "mode", ("create", "overwrite"), "create") == "overwrite":
        raise Unsupported("register mode overwrite: drop the table (to the trash) first, then register")
    location = request.body.get("location")
    if not isinstance(location, str) or not location:
        raise InvalidInput("location is required")
    catalog = request.service.catalog

    def register(request_key: Keyed) -> dict[str, Any]:
        result = catalog.registrations.register_table(
            str(tname), location, detail=request_key.detail, by=request_key.by
        )
        return {"transaction_id": result.commit_id, "location": catalog.ctx.table(tname)[0].location}

    # A retry after a lost answer (or the same request sent at once) answers the first
    # registration, not TableAlreadyExists: the location from its log entry (the table may have
    # moved on since, or been dropped).
    return once(
        lambda: keyed_body(request, tname, "register", {"register"}),
        register,
        lambda first: {"transaction_id": first.commit_id, "location": first.detail.get("location")},
    )


HANDLERS = {
    "RegisterTable": register_table,
    "RenameTable": rename_table,
}
