"""Which handler answers each spec operation, and which operations answer Unsupported.

``HANDLERS`` and ``UNSUPPORTED`` together cover every ``operationId`` of the spec (``rest/spec.py``)
exactly once (``lake_platform_tests/rest/test_spec.py``); ``UNSUPPORTED`` is also the table in
``docs/rest.md`` (the same test compares them).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from lake_platform.errors import Unsupported
from lake_platform.rest.handlers import (
    batch,
    branches,
    columns,
    data,
    history,
    indexes,
    namespaces,
    plans,
    query,
    registration,
    tables,
    tags,
    versions,
)
from lake_platform.rest.request import RestRequest

Handler = Callable[[RestRequest], Any]

HANDLERS: dict[str, Handler] = {
    **namespaces.HANDLERS,
    **tables.HANDLERS,
    **tags.HANDLERS,
    **versions.HANDLERS,
    **batch.HANDLERS,
    **data.HANDLERS,
    **query.HANDLERS,
    **indexes.HANDLERS,
    **columns.HANDLERS,
    **registration.HANDLERS,
    **history.HANDLERS,
    **branches.HANDLERS,
    **plans.HANDLERS,
}

#: operationId -> why the catalog does not back it (the answer's detail).
UNSUPPORTED: dict[str, str] = {
    "AlterTableBackfillColumns": (
        "the catalog has no virtual (UDF) columns to backfill; "
        "computed columns are added whole by AlterTableAddColumns"
    ),
    "CreateMaterializedView": "materialized views are not supported",
    "RefreshMaterializedView": "materialized views are not supported",
}


def handler_for(operation: str) -> Handler:
    if operation in HANDLERS:
        return HANDLERS[operation]
    reason = UNSUPPORTED.get(operation, "not implemented")

    def unsupported(_request: RestRequest) -> Any:
        raise Unsupported(f"{operation} is not supported by this catalog: {reason}")

    return unsupported
