"""The ``Idempotency-Key`` header of a committing request (``catalog/idempotency.py``): the
key itself, or the ``Provenance`` whose commit id it stands for, for the catalog operations
that already replay a commit id (``catalog.tables.create_table``/``append``/``delete_rows``)."""

from __future__ import annotations

from lake_platform.catalog.idempotency import HEADER, commit_id_for, key_in
from lake_platform.catalog.provenance import Provenance
from lake_platform.rest.request import RestRequest


def idempotency_key(request: RestRequest) -> str | None:
    """The request's ``Idempotency-Key`` (None without one); InvalidInput when malformed."""
    return key_in(request.headers, HEADER)


def provenance(request: RestRequest, kind: str) -> Provenance:
    """The caller, with the commit id its idempotency key stands for (``kind``: the kind of
    commit, e.g. ``create`` or ``insert``), if it sent one."""
    key = idempotency_key(request)
    commit_id = None if key is None else commit_id_for(request.principal, key, kind)
    return Provenance(principal=request.principal, commit_id=commit_id)
