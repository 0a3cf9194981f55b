"""Listings of projects, warehouses and namespaces (issue 49's ``lake project list``, ``lake
warehouse list``, ``lake namespace list``): name order, only what the principal may read, and a
typed error, with nothing changed, for a bad or unknown name."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from lake_platform.catalog.catalog import Catalog
from lake_platform.catalog.principals import Principal
from lake_platform.catalog.provenance import Provenance
from lake_platform.errors import InvalidInput, LakeError, NamespaceNotFound
from lake_platform_tests.catalog.conftest import Lake, state

#: An admin of project ``q`` only.
Q_ADMIN = Provenance(principal=Principal("quinn", "user", "q", "admin"))
#: A reader of project ``p`` only.
P_READER = Provenance(principal=Principal("pat", "user", "p", "reader"))


@pytest.fixture
def storage() -> dict[str, Any]:
    """Registry-only calls: the local warehouse is enough (no S3 run of the same)."""
    return {"root": None, "settings": {}}


@pytest.fixture
def two_projects(lake: Lake) -> Catalog:
    """Besides p, p.w, p.w.ns: p.w.ns.sub, p.w2.other and a project q with q.w.ns."""
    c = lake.catalog
    c.containers.create_namespace("p.w.ns.sub")
    c.containers.create_warehouse("p.w2")
    c.containers.create_namespace("p.w2.other")
    c.containers.create_project("q")
    c.containers.create_warehouse("q.w")
    c.containers.create_namespace("q.w.ns")
    return c


def names(records: list[Any]) -> list[str]:
    return [r.name for r in records]


def test_the_local_admin_lists_everything_in_name_order(two_projects: Catalog) -> None:
    c = two_projects
    assert names(c.containers.list_projects()) == ["p", "q"]
    assert names(c.containers.list_warehouses()) == ["p.w", "p.w2", "q.w"]
    assert names(c.containers.list_warehouses("p")) == ["p.w", "p.w2"]
    assert names(c.containers.list_namespaces()) == ["p.w.ns", "p.w.ns.sub", "p.w2.other", "q.w.ns"]
    assert names(c.containers.list_namespaces("p")) == ["p.w.ns", "p.w.ns.sub", "p.w2.other"]
    assert names(c.containers.list_namespaces("p.w")) == ["p.w.ns", "p.w.ns.sub"]
    assert names(c.containers.list_namespaces("p.w.ns")) == ["p.w.ns.sub"]  # under it, not itself
    assert names(c.containers.list_namespaces("p.w.ns.sub")) == []


def test_a_principal_sees_only_its_project(two_projects: Catalog) -> None:
    c = two_projects
    assert names(c.containers.list_projects(by=Q_ADMIN)) == ["q"]
    assert names(c.containers.list_warehouses(by=Q_ADMIN)) == ["q.w"]
    assert names(c.containers.list_namespaces(by=Q_ADMIN)) == ["q.w.ns"]
    assert names(c.containers.list_namespaces(by=P_READER)) == ["p.w.ns", "p.w.ns.sub", "p.w2.other"]
    # Another tenant's project is as one that does not exist: the same error and message.
    for call in (
        lambda: c.containers.list_warehouses("p", by=Q_ADMIN),
        lambda: c.containers.list_namespaces("p.w", by=Q_ADMIN),
    ):
        with pytest.raises(NamespaceNotFound, match="does not exist"):
            call()


@pytest.mark.parametrize(
    ("call", "error"),
    [
        (lambda c: c.containers.list_warehouses("nope"), NamespaceNotFound),
        (lambda c: c.containers.list_warehouses("Bad"), InvalidInput),
        (lambda c: c.containers.list_namespaces("p.nope"), NamespaceNotFound),
        (lambda c: c.containers.list_namespaces("p.w.nope"), NamespaceNotFound),
        (lambda c: c.containers.list_namespaces("p..w"), InvalidInput),
        (lambda c: c.containers.list_namespaces("p.w/../x"), InvalidInput),
    ],
)
def test_bad_or_unknown_names_are_typed_errors_and_change_nothing(
    lake: Lake, call: Callable[[Catalog], Any], error: type[LakeError]
) -> None:
    before = state(lake)
    with pytest.raises(error):
        call(lake.catalog)
    assert state(lake) == before
