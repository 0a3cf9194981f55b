"""Helpers shared by the handlers: the catalog-backed namespace for the caller, tenant scoping,
paging and turning the client package's models into JSON."""

from __future__ import annotations

from typing import Any

from lake_platform.catalog.listings import page_of
from lake_platform.catalog.pylance_namespace import LakeNamespace
from lake_platform.errors import NamespaceNotFound, TableNotFound
from lake_platform.rest.idempotency import Keyed
from lake_platform.rest.request import RestRequest


def lake_namespace(request: RestRequest, request_key: Keyed | None = None) -> LakeNamespace:
    """The caller's namespace; ``request_key``: the container create or drop it makes is that
    commit (the request's idempotency key, ``rest/idempotency.py``)."""
    principal = request.principal
    credentials = request.service.credentials
    keyed = request_key is not None and request_key.by.commit_id is not None
    return LakeNamespace(
        request.service.catalog,
        principal,
        vend=lambda project, location: credentials.options_for(principal, project, location),
        commit=(str(request_key.by.commit_id), request_key.detail) if keyed and request_key else None,
    )


def scoped(request: RestRequest, *, table: bool) -> None:
    """Tenant scoping as on Flight: another project's objects look exactly like missing ones."""
    ident = request.ids
    project = request.principal.project
    if ident and project != "*" and ident[0] != project:
        what = ".".join(ident)
        if table:
            raise TableNotFound(f"table {what} does not exist")
        raise NamespaceNotFound(f"namespace {what} does not exist")


def to_json(model: Any) -> Any:
    if model is None:
        return None
    if hasattr(model, "to_dict"):
        return model.to_dict()
    return model


def page(names: list[str], body: dict[str, Any]) -> tuple[list[str], str | None]:
    """Sorted names after ``page_token`` (the last name of the previous page), ``limit`` of them
    (``catalog.listings.page_of``, which LakeNamespace's listings share)."""
    return page_of(names, body.get("limit"), body.get("page_token"))


def page_read(body: dict[str, Any]) -> tuple[str | None, int | None]:
    """(after, how many) to read from the registry for one page of ``body``'s listing: the names
    after ``page_token``, one more than ``limit`` (is there a next page?); all of them without a
    valid limit (``page`` then refuses a bad one)."""
    limit, after = body.get("limit"), body.get("page_token")
    wanted = limit + 1 if isinstance(limit, int) and not isinstance(limit, bool) and limit > 0 else None
    return (str(after) if after else None), wanted
