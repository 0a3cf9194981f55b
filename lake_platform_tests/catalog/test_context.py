"""``CatalogContext``'s shared guards. Here: another tenant's objects look exactly like missing
ones at every door, writes included (docs/governance.md, "Principals"). The doors check the
parent container before the permission, so a caller of another project used to be told
PermissionDenied where the container exists and NamespaceNotFound where it does not: an admin,
writer or reader of project ``q`` could map project ``p``'s warehouses, namespaces and tables."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import pytest

from lake_platform.catalog.catalog import Catalog
from lake_platform.catalog.principals import Principal
from lake_platform.catalog.provenance import Provenance
from lake_platform.errors import LakeError
from lake_platform_tests.catalog.conftest import Lake, rows, state

Door = Callable[[Catalog, str, Provenance], Any]

#: Each door with (an object of p that exists, its twin that does not); the door is called on
#: each name (project, warehouse, namespace, table or a table to create, as the door takes).
DOORS: dict[str, tuple[Door, str, str]] = {
    "create warehouse": (lambda c, n, by: c.containers.create_warehouse(n + ".w9", by=by), "p", "zz"),
    "drop warehouse": (lambda c, n, by: c.containers.drop_warehouse(n, by=by), "p.w", "zz.w"),
    "create namespace": (
        lambda c, n, by: c.containers.create_namespace(n + ".new", by=by),
        "p.w.ns",
        "p.w.zz",
    ),
    "protect": (lambda c, n, by: c.containers.set_protected(n, by=by), "p.w.ns.t", "p.w.ns.zz"),
    "protect namespace": (lambda c, n, by: c.containers.set_protected(n, by=by), "p.w.ns", "p.w.zz"),
    "drop namespace": (lambda c, n, by: c.cascade.drop_namespace(n + ".x", by=by), "p.w.ns", "p.w.zz"),
    "drop cascade": (lambda c, n, by: c.cascade.drop_namespace(n, cascade=True, by=by), "p.w.ns", "p.w.zz"),
    "create table": (
        lambda c, n, by: c.tables.create_table(n + ".new", rows([1]), by=by),
        "p.w.ns",
        "p.w.zz",
    ),
    "declare table": (lambda c, n, by: c.tables.declare_table(n + ".new", by=by), "p.w.ns", "p.w.zz"),
    "append": (lambda c, n, by: c.tables.append(n, rows([1]), by=by), "p.w.ns.t", "p.w.zz.t"),
    "delete rows": (lambda c, n, by: c.tables.delete_rows(n, "id = 1", by=by), "p.w.ns.t", "p.w.zz.t"),
    "drop table": (lambda c, n, by: c.trash.drop_table(n, by=by), "p.w.ns.t", "p.w.zz.t"),
    "undrop table": (lambda c, n, by: c.trash.undrop_table(n, by=by), "p.w.ns.t", "p.w.zz.t"),
    "rename table": (lambda c, n, by: c.renames.rename_table(n, "p.w.ns.t2", by=by), "p.w.ns.t", "p.w.zz.t"),
    "add column": (lambda c, n, by: c.alter.add_column(n, "c", "int64", by=by), "p.w.ns.t", "p.w.zz.t"),
    "drop columns": (lambda c, n, by: c.alter.drop_columns(n, ["id"], by=by), "p.w.ns.t", "p.w.zz.t"),
    "schema metadata": (
        lambda c, n, by: c.schemas.update_schema_metadata(n, {"k": "v"}, by=by),
        "p.w.ns.t",
        "p.w.zz.t",
    ),
    "update rows": (lambda c, n, by: c.rows.update_rows(n, {"id": "2"}, by=by), "p.w.ns.t", "p.w.zz.t"),
    "create branch": (lambda c, n, by: c.branches.create_branch(n, "b1", by=by), "p.w.ns.t", "p.w.zz.t"),
    "register": (
        lambda c, n, by: c.registrations.register_table(n, "/nowhere", by=by),
        "p.w.ns.t9",
        "p.w.zz.t9",
    ),
    "set policy": (lambda c, n, by: c.policies.set_policy(n, {"retain_versions": 3}, by=by), "p.w", "p.zz"),
    "unset policy": (lambda c, n, by: c.policies.unset_policy(n, ["retention"], by=by), "p.w", "p.zz"),
    "delete policy": (lambda c, n, by: c.policies.delete_policy(n, by=by), "p.w", "p.zz"),
    "add user": (
        lambda c, n, by: c.access.add_user("u9", project=n, role="reader", password="long enough pw", by=by),
        "p",
        "zz",
    ),
    "create token": (
        lambda c, n, by: c.access.create_token("t9", project=n, role="reader", by=by),
        "p",
        "zz",
    ),
}


def answer(call: Callable[[], Any]) -> tuple[str, str]:
    try:
        call()
    except LakeError as exc:
        return type(exc).__name__, str(exc)
    return "no error", ""


def as_if(message: str, missing: str, present: str) -> str:
    """``message`` about ``missing`` with its differing part named as in ``present`` (so that
    "namespace p.w.zz does not exist" reads "namespace p.w.ns does not exist")."""
    was, now = missing.split("."), present.split(".")
    first = next(i for i, (a, b) in enumerate(zip(was, now, strict=False)) if a != b)
    old, new = ".".join(was[: first + 1]), ".".join(now[: first + 1])
    return re.sub(rf"(?<![\w.]){re.escape(old)}(?![\w])", new, message)


@pytest.fixture
def storage() -> dict[str, Any]:
    return {"root": None, "settings": {}}


@pytest.mark.parametrize("role", ["reader", "writer", "admin"])
@pytest.mark.parametrize("door", sorted(DOORS))
def test_another_tenants_objects_answer_as_missing_ones(lake: Lake, door: str, role: str) -> None:
    c = lake.catalog
    c.tables.create_table("p.w.ns.t", rows([1]))
    c.policies.set_policy("p.w", {"retain_versions": 3})
    c.containers.create_project("q")
    call, present, missing = DOORS[door]
    by = Provenance(principal=Principal("eve", "user", "q", role))
    before = state(lake)
    seen = answer(lambda: call(c, present, by))
    # The same door on a name that names nothing: the same error and the same words.
    kind, message = answer(lambda: call(c, missing, by))
    assert seen == (kind, as_if(message, missing, present))
    assert seen[0] != "no error"
    assert state(lake) == before
