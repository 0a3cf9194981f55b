"""Bringing dropped tables back from the trash (``Trash.undrop_table`` and
``undrop_namespace``): one table's restore commit, and the check that an undropped namespace's
tables can all come back under their names. Out of ``trash.py`` (which files, lists and
expires trash records) to keep each module to one job."""

from __future__ import annotations

from lake_platform.catalog import branch_moves
from lake_platform.catalog.context import CatalogContext, Log
from lake_platform.catalog.policies import Policies
from lake_platform.catalog.principals import Principal
from lake_platform.catalog.results import CommitResult
from lake_platform.errors import (
    ConcurrentModification,
    ConditionFailed,
    NamespaceNotFound,
    TableAlreadyExists,
    TableNotFound,
)
from lake_platform.naming import NamespaceName, TableName
from lake_platform.registry import keys
from lake_platform.registry.records import TrashRecord, decode, new_id
from lake_platform.registry.store import ABSENT, Check, Delete, Item, Op, Put


def restore(
    ctx: CatalogContext,
    policies: Policies,
    item: Item,
    trash: TrashRecord,
    target: TableName,
    parent: Item,
    who: Principal,
    commit: tuple[str, dict[str, object]] | None = None,
) -> CommitResult:
    """The table ``trash`` (read as ``item``) registered again as ``target`` in ``parent``, with
    its policies and (under another name) its branches, in one commit logged ``undrop``; each
    refusal (the name taken, the namespace or a branch changed, the record gone) typed and
    changing nothing. ``commit``: its commit id and what its log entry's detail adds (an
    idempotent request's key and digest)."""
    assert trash.table is not None
    restored = trash.table.model_copy(update={"name": str(target)})
    commit_id, detail = commit if commit is not None else (new_id(), {})
    source = TableName.parse(trash.target)
    # Under another name, its branches come along (their records are keyed by the name).
    moved = [] if source == target else branch_moves.move_ops(ctx.store, source, target, restored.incarnation)
    ops: list[Op] = [
        Delete(item.key, item.revision),
        Put(keys.table(target), restored.encode(), ABSENT),
        Check(parent.key, parent.revision),
        *policies.restore(trash.policies, trash.target, str(target)),
        *moved,
    ]
    entry = Log(
        str(target),
        "undrop",
        ctx.actor(None, who),
        commit_id=commit_id,
        incarnation=restored.incarnation,
        to_version=restored.current_version,
        detail={**detail, "from": trash.target, "dropped_at_ms": trash.dropped_at_ms},
    )
    try:
        ctx.commit(ops, log=entry)
    except ConditionFailed as exc:
        if exc.key == keys.table(target):
            raise TableAlreadyExists(f"table {target} already exists") from None
        if exc.key == parent.key:
            raise NamespaceNotFound(f"namespace {target.namespace_name} changed during the undrop") from None
        if exc.key.startswith(keys.branches_of(source)) or exc.key.startswith(keys.branches_of(target)):
            raise ConcurrentModification(
                f"a branch of {trash.target} changed during the undrop; nothing was undropped"
            ) from None
        raise TableNotFound(
            f"the trash record of {trash.target} was purged or restored concurrently"
        ) from None
    return CommitResult(commit_id, str(target), "undrop", None, restored.current_version)


def refuse_taken(ctx: CatalogContext, nname: NamespaceName, record: TrashRecord) -> None:
    """TableAlreadyExists, before anything is restored, when a table the undrop would bring
    back has its name taken by a newer table (the undrop would otherwise finish without it,
    its undo list gone)."""
    taken = []
    for trash_key in record.table_trash_keys:
        trash_item = ctx.store.get(trash_key)
        trash = decode(TrashRecord, trash_item.value, trash_key) if trash_item is not None else None
        if trash is None or trash.state != "trashed" or trash.table is None:
            continue  # restored by an earlier run, purged or being purged
        if ctx.store.get(keys.table(TableName.parse(trash.target))) is not None:
            taken.append(trash.target)
    if taken:
        raise TableAlreadyExists(
            f"namespace {nname} cannot be undropped: {', '.join(taken)} taken by newer tables; "
            "drop or rename those, or undrop each dropped table alone with --as"
        )
