"""Projects, warehouses and namespaces: create, list, drop, undrop, and deletion protection."""

from __future__ import annotations

from typing import Any

import click

from lake_platform.cli.app import State, handles_errors, pass_state, text_table, timestamp
from lake_platform.errors import InvalidInput


def _emit_list(state: State, records: list[Any], columns: list[str], kind: str) -> None:
    """Each record's COLUMNS and ``created_at_ms`` (--json), or a table with the time for people."""
    rows = [{**{c: getattr(r, c) for c in columns}, "created_at_ms": r.created_at_ms} for r in records]
    state.emit(
        rows,
        lambda rs: (
            text_table([*columns, "created"], [{**r, "created": timestamp(r["created_at_ms"])} for r in rs])
            if rs
            else f"no {kind}"
        ),
    )


@click.group()
def project() -> None:
    """Projects (tenants)."""


@project.command("create")
@click.argument("name")
@pass_state
@handles_errors
def project_create(state: State, name: str) -> None:
    """Create project NAME."""
    with state.catalog() as catalog:
        record = catalog.containers.create_project(name)
    state.emit(record.model_dump(), lambda r: f"created project {r['name']}")


@project.command("list")
@pass_state
@handles_errors
def project_list(state: State) -> None:
    """List the projects you may read, from the registry."""
    with state.catalog() as catalog:
        records = catalog.containers.list_projects()
    _emit_list(state, records, ["name", "state"], "projects")


@project.command("drop")
@click.argument("name")
@pass_state
@handles_errors
def project_drop(state: State, name: str) -> None:
    """Drop an empty project (there is no cascade for projects)."""
    with state.catalog() as catalog:
        result = catalog.containers.drop_project(name)
    state.emit(result.to_dict(), lambda r: f"dropped project {r['table']}")


@click.group()
def warehouse() -> None:
    """Warehouses: one storage root each (a local folder or s3://bucket/prefix)."""


@warehouse.command("create")
@click.argument("name", metavar="P.W")
@click.option("--root", help="Storage root URI (default: <LAKE_WAREHOUSE_ROOT>/P/W).")
@pass_state
@handles_errors
def warehouse_create(state: State, name: str, root: str | None) -> None:
    """Create warehouse P.W."""
    with state.catalog() as catalog:
        record = catalog.containers.create_warehouse(name, root=root)
    state.emit(record.model_dump(), lambda r: f"created warehouse {r['name']} at {r['root']}")


@warehouse.command("list")
@click.argument("project", required=False)
@pass_state
@handles_errors
def warehouse_list(state: State, project: str | None) -> None:
    """List the warehouses (of PROJECT) you may read, with their storage roots."""
    with state.catalog() as catalog:
        records = catalog.containers.list_warehouses(project)
    _emit_list(state, records, ["name", "root", "protected", "state"], "warehouses")


@warehouse.command("drop")
@click.argument("name", metavar="P.W")
@click.option("--force", is_flag=True, help="Override deletion protection (and nothing else).")
@pass_state
@handles_errors
def warehouse_drop(state: State, name: str, force: bool) -> None:
    """Drop an empty warehouse."""
    with state.catalog() as catalog:
        result = catalog.containers.drop_warehouse(name, force=force)
    state.emit(result.to_dict(), lambda r: f"dropped warehouse {r['table']}")


@click.group()
def namespace() -> None:
    """Namespaces (may nest)."""


@namespace.command("create")
@click.argument("name", metavar="P.W.NS[.SUB...]")
@pass_state
@handles_errors
def namespace_create(state: State, name: str) -> None:
    """Create a namespace."""
    with state.catalog() as catalog:
        record = catalog.containers.create_namespace(name)
    state.emit(record.model_dump(), lambda r: f"created namespace {r['name']}")


@namespace.command("list")
@click.argument("prefix", required=False, default="", metavar="[P[.W[.NS...]]]")
@pass_state
@handles_errors
def namespace_list(state: State, prefix: str) -> None:
    """List the namespaces you may read, nested ones too: all, or those under PREFIX (a
    project, warehouse or namespace; not PREFIX itself)."""
    with state.catalog() as catalog:
        records = catalog.containers.list_namespaces(prefix)
    _emit_list(state, records, ["name", "protected", "state"], "namespaces")


@namespace.command("drop")
@click.argument("name", metavar="P.W.NS[.SUB...]")
@click.option("--cascade", is_flag=True, help="Move everything inside to the trash too.")
@click.option("--force", is_flag=True, help="Override deletion protection (and nothing else).")
@click.option("--purge", is_flag=True, help="With --cascade: destroy the tables' data now.")
@pass_state
@handles_errors
def namespace_drop(state: State, name: str, cascade: bool, force: bool, purge: bool) -> None:
    """Drop a namespace (only when empty, unless --cascade)."""
    if purge and not cascade:
        raise InvalidInput("--purge only applies with --cascade")
    with state.catalog() as catalog:
        result = catalog.cascade.drop_namespace(name, cascade=cascade, force=force, purge=purge)
    state.emit(result.to_dict(), lambda r: f"dropped namespace {r['table']}")


@namespace.command("undrop")
@click.argument("name", metavar="P.W.NS[.SUB...]")
@pass_state
@handles_errors
def namespace_undrop(state: State, name: str) -> None:
    """Rebuild a cascade-dropped namespace and its tables (safe to rerun after an interruption)."""
    with state.catalog() as catalog:
        result = catalog.trash.undrop_namespace(name)
    state.emit(result.to_dict(), lambda r: f"restored namespace {r['table']}")


def add_protect_command(group: click.Group, kind: str, metavar: str) -> None:
    """Give GROUP a ``protect NAME [--off]`` command for objects of KIND."""

    @group.command("protect")
    @click.argument("name", metavar=metavar)
    @click.option("--off", is_flag=True, help="Remove protection.")
    @pass_state
    @handles_errors
    def protect(state: State, name: str, off: bool) -> None:
        """Turn deletion protection on (or --off)."""
        with state.catalog() as catalog:
            catalog.containers.set_protected(name, not off, kind=kind)
        state.emit(
            {"name": name, "protected": not off},
            lambda d: f"{kind} {d['name']} is {'protected' if d['protected'] else 'no longer protected'}",
        )


add_protect_command(namespace, "namespace", "P.W.NS")
add_protect_command(warehouse, "warehouse", "P.W")

COMMANDS: tuple[click.Command, ...] = (project, warehouse, namespace)
