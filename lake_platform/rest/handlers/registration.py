"""A table's registration over REST: RenameTable moves it to another name (``catalog/rename.py``:
one registry transaction; locations are per incarnation, so no data moves)."""

from __future__ import annotations

from typing import Any

from lake_platform.catalog.provenance import Provenance
from lake_platform.errors import InvalidInput
from lake_platform.naming import TableName
from lake_platform.rest.handlers.common import scoped
from lake_platform.rest.request import RestRequest


def rename_table(request: RestRequest) -> Any:
    scoped(request, table=True)
    tname = request.table_name()
    new_table = request.body.get("new_table_name")
    if not isinstance(new_table, str) or not new_table:
        raise InvalidInput("new_table_name is required")
    namespace = request.body.get("new_namespace_id")
    if namespace is None:
        namespace = tname.parts[:-1]
    if not isinstance(namespace, list) or not all(isinstance(s, str) for s in namespace):
        raise InvalidInput("new_namespace_id must be a namespace id (a list of names)")
    target = TableName.from_parts([*namespace, new_table])
    result = request.service.catalog.renames.rename_table(
        str(tname), str(target), by=Provenance(principal=request.principal)
    )
    return {"transaction_id": result.commit_id}


HANDLERS = {
    "RenameTable": rename_table,
}
