"""Namespace operations, over the catalog's Lance Namespace (projects, warehouses and namespaces
are all namespaces on the wire: ``[p]``, ``[p, w]``, ``[p, w, ns, ...]``)."""

from __future__ import annotations

from typing import Any

import lance_namespace.errors as ns_errors
from lance_namespace import CreateNamespaceResponse, DropNamespaceResponse

from lake_platform.catalog.provenance import Provenance
from lake_platform.catalog.pylance_commits import mode_of
from lake_platform.errors import NamespaceNotFound, PermissionDenied
from lake_platform.rest.handlers.common import lake_namespace, paging, scoped, to_json
from lake_platform.rest.idempotency import Keyed, keyed_body, once
from lake_platform.rest.request import RestRequest


def _body(request: RestRequest) -> dict[str, Any]:
    return {**request.body, "id": request.ids}


def list_namespaces(request: RestRequest) -> Any:
    asked = paging(request.body)
    scoped(request, table=False)
    if len(request.ids) < 2:  # projects, or one project's warehouses: few
        answer = lake_namespace(request).list_namespaces(_body(request))  # paged by it
        return {"namespaces": list(answer.namespaces), "page_token": answer.page_token}
    lake_namespace(request).namespace_exists(_body(request))  # NamespaceNotFound, as before
    children = request.service.catalog.reads.namespaces_in(  # one page read from the registry
        ".".join(request.ids),
        after=asked.after,
        limit=asked.read_limit,
        by=Provenance(principal=request.principal),
    )
    names, token = asked.of(children)
    return {"namespaces": names, "page_token": token}


def describe_namespace(request: RestRequest) -> Any:
    scoped(request, table=False)
    return to_json(lake_namespace(request).describe_namespace(_body(request)))


#: The log operations a CreateNamespace / DropNamespace commits, by the id's length.
CREATES = {"create project", "create warehouse", "create namespace"}
DROPS = {"drop project", "drop warehouse", "drop namespace"}


def create_namespace(request: RestRequest) -> Any:
    """``mode`` ExistOk answers an existing namespace as created (once the caller may create it:
    the catalog checks permission before existence); Overwrite would drop what the namespace
    holds, so it is refused rather than done or ignored. An ``Idempotency-Key`` makes a retry
    answer as the first create did (mode Create: not NamespaceAlreadyExists)."""
    mode_of(request.body, "mode", ("create", "exist_ok", "overwrite"), "create")  # a bad one: 400 first
    if len(request.ids) == 1 and request.principal.project != "*":
        raise PermissionDenied("projects are created by an operator (POST /v1/projects as the local admin)")
    scoped(request, table=False)
    return once(
        lambda: keyed_body(request, ".".join(request.ids), "namespace-create", CREATES),
        lambda request_key: to_json(lake_namespace(request, request_key).create_namespace(_body(request))),
        lambda _first: to_json(CreateNamespaceResponse(properties={})),
    )


def drop_namespace(request: RestRequest) -> Any:
    """``behavior`` Restrict (default) or Cascade; ``mode`` Skip answers a namespace that does
    not exist (or is another tenant's) as dropped, Fail (default) with NamespaceNotFound. An
    ``Idempotency-Key`` makes a retry answer as the first drop did (mode Fail: not
    NamespaceNotFound), also once the name was made again (the new namespace is left alone)."""
    mode = mode_of(request.body, "mode", ("fail", "skip"), "fail")
    behavior = mode_of(request.body, "behavior", ("restrict", "cascade"), "restrict")

    def drop(request_key: Keyed) -> Any:
        body = {**_body(request), "behavior": behavior}
        try:
            scoped(request, table=False)
            return to_json(lake_namespace(request, request_key).drop_namespace(body))
        except (NamespaceNotFound, ns_errors.NamespaceNotFoundError):
            if mode == "skip":
                return {}
            raise

    return once(
        lambda: keyed_body(request, ".".join(request.ids), "namespace-drop", DROPS),
        drop,
        lambda _first: to_json(DropNamespaceResponse(properties={})),
    )


def namespace_exists(request: RestRequest) -> Any:
    scoped(request, table=False)
    lake_namespace(request).namespace_exists(_body(request))
    return None


HANDLERS = {
    "ListNamespaces": list_namespaces,
    "DescribeNamespace": describe_namespace,
    "CreateNamespace": create_namespace,
    "DropNamespace": drop_namespace,
    "NamespaceExists": namespace_exists,
}
