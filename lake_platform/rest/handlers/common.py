"""Helpers shared by the handlers: the catalog-backed namespace for the caller, tenant scoping,
paging and turning the client package's models into JSON."""

from __future__ import annotations

from typing import Any

from lake_platform.catalog.listings import Paging
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


def paging(body: dict[str, Any]) -> Paging:
    """The page ``body`` asks for (``limit``, ``page_token``): each listing takes it first, so a
    bad one is InvalidInput naming it before the registry is read (``catalog.listings``, which
    LakeNamespace's listings share)."""
    return Paging.asked(body.get("limit"), body.get("page_token"))
