"""Declaring a table: a name and a unique location reserved with no version yet (the Lance
Namespace ``declare_table``); the first commit through the namespace makes it a table. And
where a table's incarnation lives, for a declare and a create alike."""

from __future__ import annotations

from lake_platform.catalog.context import CatalogContext, Log, check_commit_id
from lake_platform.catalog.provenance import UNSTATED, Provenance
from lake_platform.errors import ConditionFailed, NamespaceNotFound, TableAlreadyExists
from lake_platform.naming import TableName
from lake_platform.registry import keys
from lake_platform.registry.records import TableRecord, new_id
from lake_platform.registry.store import ABSENT, Check, Put


def declare_table(ctx: CatalogContext, name: str, *, by: Provenance = UNSTATED) -> TableRecord:
    who = ctx.who(by.principal)
    tname = TableName.parse(name)
    ns_item = ctx.require_parent(tname, who=who)
    who.require(tname.project, "write", f"create tables in {tname.namespace_name}")
    if ctx.store.get(keys.table(tname)) is not None:
        raise TableAlreadyExists(f"table {tname} already exists")
    incarnation = new_id()
    record = TableRecord(
        name=str(tname),
        incarnation=incarnation,
        location=table_location(ctx.warehouse(tname.warehouse_name).root, tname, incarnation),
        current_version=0,
        created_by=ctx.actor(by.actor, who),
    )
    try:
        ctx.commit(
            [Put(keys.table(tname), record.encode(), ABSENT), Check(ns_item.key, ns_item.revision)],
            log=Log(
                str(tname),
                "declare",
                ctx.actor(by.actor, who),
                commit_id=check_commit_id(by.commit_id),
                incarnation=incarnation,
            ),
        )
    except ConditionFailed as exc:
        if exc.key == keys.table(tname):
            raise TableAlreadyExists(f"table {tname} already exists") from None
        raise NamespaceNotFound(f"namespace {tname.namespace_name} was dropped concurrently") from None
    return record


def table_location(root: str, tname: TableName, incarnation: str) -> str:
    return f"{root.rstrip('/')}/{'/'.join(tname.namespace)}/{tname.table}-{incarnation}.lance"
