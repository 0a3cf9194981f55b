"""Control-plane routes beside the spec's: projects and warehouses (their own objects, not
namespaces, in the catalog), the trash (a dropped object's deadline) and undrop.

| route | what |
| --- | --- |
| ``GET /v1/projects`` | projects the caller can see (its own) |
| ``GET /v1/projects/{id}`` | one project |
| ``GET /v1/warehouses`` | warehouses of the caller's project |
| ``POST /v1/warehouses/{id}/create`` | create ``[project, warehouse]`` (body ``{"root": ...}`` optional) |
| ``GET /v1/warehouses/{id}`` | one warehouse (its storage root) |
| ``POST /v1/warehouses/{id}/drop`` | drop an empty warehouse |
| ``GET /v1/trash`` / ``GET /v1/trash/{id}`` | dropped objects (under ``id``) and their purge deadlines |
| ``POST /v1/table/{id}/undrop`` | restore a dropped table (body ``{"as": [...]}`` optional) |
| ``POST /v1/namespace/{id}/undrop`` | restore a dropped namespace and what a cascade took with it |
| ``POST /v1/table/{id}/branches/publish`` | fast-forward main to branch ``name``'s head (one commit) |
| ``POST /v1/table/{id}/branches/undrop`` | restore deleted branch ``name`` from the trash |
| ``GET /v1/results/{handle}/{n}`` | segment ``n`` of a spooled QueryTable result (Arrow IPC file) |
"""

from __future__ import annotations

from typing import Any

import lake_platform.rest.handlers.branches as branches
import lake_platform.rest.handlers.query as query
from lake_platform.catalog.provenance import Provenance
from lake_platform.catalog.results import CommitResult
from lake_platform.errors import InvalidInput, NamespaceNotFound
from lake_platform.naming import ProjectName, TableName, WarehouseName
from lake_platform.rest import ids
from lake_platform.rest.handlers.common import paging, scoped
from lake_platform.rest.idempotency import Keyed, keyed_body, once
from lake_platform.rest.request import RestRequest


def list_projects(request: RestRequest) -> Any:
    asked = paging(request.body)
    who = request.principal
    names = request.service.catalog.inventory.projects()
    found, token = asked.of([n for n in names if who.can(n, "read")])
    return {"projects": found, "page_token": token}


def describe_project(request: RestRequest) -> Any:
    scoped(request, table=False)
    ident = request.ids
    if len(ident) != 1:
        raise InvalidInput("a project id has exactly one segment")
    record = request.service.catalog.inventory.project(ProjectName.parse(ident[0]))
    if record is None:
        raise NamespaceNotFound(f"project {ident[0]} does not exist")
    return {"id": ident, "name": record.name, "protected": bool(getattr(record, "protected", False))}


def list_warehouses(request: RestRequest) -> Any:
    asked = paging(request.body)
    who = request.principal
    inventory = request.service.catalog.inventory
    projects = [who.project] if who.project != "*" else inventory.projects()
    names = [n for p in projects for n in inventory.warehouses(p)]
    delimiter = request.service.delimiter(request.query)
    found, token = asked.of([delimiter.join(n.split(".")) for n in names])
    return {"warehouses": found, "page_token": token}


def _warehouse(request: RestRequest) -> WarehouseName:
    scoped(request, table=False)
    if len(request.ids) != 2:
        raise InvalidInput("a warehouse id has exactly two segments (project, warehouse)")
    return WarehouseName.parse(".".join(request.ids))


def describe_warehouse(request: RestRequest) -> Any:
    wname = _warehouse(request)
    if not request.principal.can(wname.project, "read"):
        raise NamespaceNotFound(f"warehouse {wname} does not exist")
    record = request.service.catalog.ctx.warehouse(wname)
    return {"id": request.ids, "name": record.name, "root": record.root}


def create_warehouse(request: RestRequest) -> Any:
    """An ``Idempotency-Key`` makes a retry answer the first create (its root, from its log
    entry) instead of NamespaceAlreadyExists."""
    wname = _warehouse(request)
    root = request.body.get("root")
    if root is not None and not isinstance(root, str):
        raise InvalidInput("root must be a string (a folder or s3://bucket/prefix)")

    def create(request_key: Keyed) -> dict[str, Any]:
        record = request.service.catalog.containers.create_warehouse(
            str(wname), root=root, detail=request_key.detail, by=request_key.by
        )
        return {"id": request.ids, "name": record.name, "root": record.root}

    return once(
        lambda: keyed_body(request, str(wname), "warehouse-create", {"create warehouse"}),
        create,
        lambda first: {"id": request.ids, "name": first.target, "root": first.detail.get("root")},
    )


def drop_warehouse(request: RestRequest) -> Any:
    """An ``Idempotency-Key`` makes a retry answer the first drop instead of NamespaceNotFound."""
    wname = _warehouse(request)

    def drop(request_key: Keyed) -> dict[str, Any]:
        containers = request.service.catalog.containers
        containers.drop_warehouse(str(wname), detail=request_key.detail, by=request_key.by)
        return {"id": request.ids}

    return once(
        lambda: keyed_body(request, str(wname), "warehouse-drop", {"drop warehouse"}),
        drop,
        lambda _first: {"id": request.ids},
    )


def list_trash(request: RestRequest) -> Any:
    scoped(request, table=False)
    prefix = ".".join(request.ids)
    records = request.service.catalog.trash.list_trash(prefix, by=Provenance(principal=request.principal))
    delimiter = request.service.delimiter(request.query)
    return {
        "dropped": [
            {
                "kind": r.kind,
                "id": r.target.split("."),
                "name": delimiter.join(r.target.split(".")),
                "incarnation": r.table.incarnation if r.table is not None else None,
                "dropped_at_ms": r.dropped_at_ms,
                "expires_at_ms": r.expires_at_ms,
                "dropped_by": r.dropped_by,
                "state": r.state,
            }
            for r in records
        ]
    }


def undrop_table(request: RestRequest) -> Any:
    scoped(request, table=True)
    tname = request.table_name()
    as_id = request.body.get("as")
    as_name = None
    if as_id is not None:
        if not isinstance(as_id, list):
            raise InvalidInput("'as' must be a table id (a list of names)")
        # each part one segment: a dot in one would name another namespace than the id does
        as_id = ids.check_body_id(as_id, request.service.delimiter(request.query))
        as_name = str(TableName.from_parts(as_id))
        if as_id[0] != tname.project:
            raise InvalidInput("a table is undropped within its own project")
    incarnation = request.body.get("incarnation")
    if incarnation is not None and not isinstance(incarnation, str):
        raise InvalidInput("incarnation must be a string")
    trash = request.service.catalog.trash

    def undrop(request_key: Keyed) -> dict[str, object]:
        return trash.undrop_table(
            str(tname), as_name=as_name, incarnation=incarnation, detail=request_key.detail, by=request_key.by
        ).to_dict()

    # Logged under the name it comes back as, where the key is looked up; a retry answers the
    # first undrop instead of TableNotFound (nothing in the trash) or TableAlreadyExists.
    return once(
        lambda: keyed_body(request, TableName.parse(as_name or str(tname)), "undrop", {"undrop"}, str(tname)),
        undrop,
        lambda first: CommitResult(first.commit_id, first.target, "undrop", None, first.to_version).to_dict(),
    )


def undrop_namespace(request: RestRequest) -> Any:
    """An ``Idempotency-Key`` makes a retry answer the first undrop (its last commit, the trash
    record's removal) instead of NamespaceNotFound; an undrop interrupted part way is
    continued by the retry."""
    scoped(request, table=False)
    nname = request.namespace_name()
    trash = request.service.catalog.trash
    return once(
        lambda: keyed_body(request, str(nname), "undrop-namespace", {"undrop namespace cascade"}),
        lambda request_key: trash.undrop_namespace(
            str(nname), detail=request_key.detail, by=request_key.by
        ).to_dict(),
        lambda first: CommitResult(first.commit_id, first.target, "undrop namespace", None, None).to_dict(),
    )


#: (name, method, path, handler, query parameters)
ROUTES: list[tuple[str, str, str, Any, tuple[str, ...]]] = [
    ("ListProjects", "GET", "/v1/projects", list_projects, ("page_token", "limit")),
    ("DescribeProject", "GET", "/v1/projects/{id}", describe_project, ()),
    ("ListWarehouses", "GET", "/v1/warehouses", list_warehouses, ("page_token", "limit")),
    ("DescribeWarehouse", "GET", "/v1/warehouses/{id}", describe_warehouse, ()),
    ("CreateWarehouse", "POST", "/v1/warehouses/{id}/create", create_warehouse, ()),
    ("DropWarehouse", "POST", "/v1/warehouses/{id}/drop", drop_warehouse, ()),
    ("ListTrash", "GET", "/v1/trash", list_trash, ()),
    ("DescribeTrash", "GET", "/v1/trash/{id}", list_trash, ()),
    ("UndropTable", "POST", "/v1/table/{id}/undrop", undrop_table, ()),
    ("UndropNamespace", "POST", "/v1/namespace/{id}/undrop", undrop_namespace, ()),
    ("PublishTableBranch", "POST", "/v1/table/{id}/branches/publish", branches.publish_table_branch, ()),
    ("UndropTableBranch", "POST", "/v1/table/{id}/branches/undrop", branches.undrop_table_branch, ()),
    ("FetchResult", "GET", "/v1/results/{handle}/{segment}", query.result_segment, ()),
]
