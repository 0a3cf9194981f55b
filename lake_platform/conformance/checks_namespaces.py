"""Namespace operations: create, describe, exists, list (paged), drop, the delimiter, and the
Unauthenticated answer when the kit was given a token."""

from __future__ import annotations

from typing import Any

from lake_platform.conformance.client import NamespaceClient
from lake_platform.conformance.registry import CheckFailed, Kit, Skipped, check, prerequisite
from lake_platform.conformance.verdicts import refused, succeeds

MISSING = "conformance_missing"


@check("CreateNamespace", "success")
def create_namespace(kit: Kit) -> None:
    succeeds(kit.client.call("CreateNamespace", kit.namespace, {}))
    kit.state["namespace"] = kit.namespace


@check("CreateNamespace", "NamespaceAlreadyExists")
def create_namespace_twice(kit: Kit) -> None:
    kit.need("namespace", "CreateNamespace")
    refused(kit.client.call("CreateNamespace", kit.namespace, {}), "NamespaceAlreadyExists")


@check("DescribeNamespace", "success")
def describe_namespace(kit: Kit) -> None:
    kit.need("namespace", "CreateNamespace")
    succeeds(kit.client.call("DescribeNamespace", kit.namespace, {}))


@check("DescribeNamespace", "NamespaceNotFound")
def describe_missing_namespace(kit: Kit) -> None:
    kit.need("namespace", "CreateNamespace")
    refused(kit.client.call("DescribeNamespace", kit.child(MISSING), {}), "NamespaceNotFound")


@check("DescribeNamespace", "Unauthenticated")
def describe_without_token(kit: Kit) -> None:
    kit.need("namespace", "CreateNamespace")
    if not kit.has_token:
        raise Skipped("no --token given: the server is called without credentials")
    anonymous = NamespaceClient(kit.client.url)
    try:
        refused(anonymous.call("DescribeNamespace", kit.namespace, {}), "Unauthenticated")
    finally:
        anonymous.close()


@check("DescribeNamespace", "delimiter")
def describe_with_delimiter(kit: Kit) -> None:
    """The same namespace named with ``.`` joining its segments and ``?delimiter=.``."""
    kit.need("namespace", "CreateNamespace")
    succeeds(kit.client.call("DescribeNamespace", kit.namespace, {}, delimiter="."))


@check("NamespaceExists", "success")
def namespace_exists(kit: Kit) -> None:
    kit.need("namespace", "CreateNamespace")
    succeeds(kit.client.call("NamespaceExists", kit.namespace, {}))


@check("NamespaceExists", "NamespaceNotFound")
def missing_namespace_exists(kit: Kit) -> None:
    kit.need("namespace", "CreateNamespace")
    refused(kit.client.call("NamespaceExists", kit.child(MISSING), {}), "NamespaceNotFound")


@check("ListNamespaces", "success")
def list_namespaces(kit: Kit) -> None:
    kit.need("namespace", "CreateNamespace")
    with prerequisite("child namespaces (CreateNamespace)"):
        for name in ("a", "b"):
            succeeds(kit.client.call("CreateNamespace", kit.child(name), {}))
    kit.state["children"] = ["a", "b"]
    names = succeeds(kit.client.call("ListNamespaces", kit.namespace))["namespaces"]
    if sorted(names) != ["a", "b"]:
        raise CheckFailed(f"expected the children ['a', 'b'], got {names}")


@check("ListNamespaces", "pagination")
def list_namespaces_paged(kit: Kit) -> None:
    kit.need("children", "ListNamespaces:success")
    names = pages(kit, "ListNamespaces", kit.namespace, "namespaces")
    if sorted(names) != ["a", "b"]:
        raise CheckFailed(f"pages of one held {names}, expected a and b once each")


@check("ListNamespaces", "NamespaceNotFound")
def list_missing_namespace(kit: Kit) -> None:
    kit.need("namespace", "CreateNamespace")
    refused(kit.client.call("ListNamespaces", kit.child(MISSING)), "NamespaceNotFound")


@check("DropNamespace", "success")
def drop_namespace(kit: Kit) -> None:
    kit.need("children", "ListNamespaces:success")
    succeeds(kit.client.call("DropNamespace", kit.child("b"), {}))
    kit.state["children"] = ["a"]
    refused(kit.client.call("DescribeNamespace", kit.child("b"), {}), "NamespaceNotFound")


@check("DropNamespace", "NamespaceNotFound")
def drop_missing_namespace(kit: Kit) -> None:
    kit.need("namespace", "CreateNamespace")
    refused(kit.client.call("DropNamespace", kit.child(MISSING), {}), "NamespaceNotFound")


def pages(kit: Kit, operation_id: str, ident: list[str], member: str, *, in_body: bool = False) -> list[Any]:
    """Every item of a list operation read with ``limit=1``: each page holds at most one item and
    says whether more follow; a token never repeats (at most 20 pages). ``limit`` and
    ``page_token`` go in the query string, or in the JSON body for an operation the spec gives
    one (``ListTableIndices``)."""
    items: list[Any] = []
    token: str | None = None
    seen: set[str] = set()
    for _ in range(20):
        query: dict[str, object] = {"limit": 1}
        if token:
            query["page_token"] = token
        if in_body:
            answer = kit.client.call(operation_id, ident, query)
        else:
            answer = kit.client.call(operation_id, ident, query=query)
        page = succeeds(answer)
        got = page[member]
        if len(got) > 1:
            raise CheckFailed(f"limit=1 answered {len(got)} items")
        items.extend(got if isinstance(got, list) else list(got))
        token = page.get("page_token")
        if not token:
            return items
        if token in seen:
            raise CheckFailed(f"page_token {token!r} came back twice")
        seen.add(token)
    raise CheckFailed("more than 20 pages of one item")
