"""A table's history over REST: RestoreTable commits a new version equal to an older one
(``catalog/restore.py``: one registry commit under the lease, logged ``restore``)."""

from __future__ import annotations

from typing import Any

from lake_platform.catalog.provenance import Provenance
from lake_platform.errors import InvalidInput
from lake_platform.rest.handlers.common import scoped
from lake_platform.rest.request import RestRequest


def restore_table(request: RestRequest) -> Any:
    scoped(request, table=True)
    tname = request.table_name()
    if request.body.get("branch"):
        raise InvalidInput("branches are not registered by the catalog: omit 'branch'")
    version = request.body.get("version")
    if not isinstance(version, int) or isinstance(version, bool) or version < 1:
        raise InvalidInput(f"version must be a positive integer, got {version!r}")
    result = request.service.catalog.restores.restore_table(
        str(tname), version, by=Provenance(principal=request.principal)
    )
    return {"transaction_id": result.commit_id}


HANDLERS = {
    "RestoreTable": restore_table,
}
