"""Bringing dropped tables back from the trash (``Trash.undrop_table`` and
``undrop_namespace``): one table's restore commit, a cascade-dropped namespace's undrop, and
the check that its tables can all come back under their names. Out of ``trash.py`` (which
files, lists and expires trash records) to keep each module to one job.

A namespace's undrop claims its trash record first ("restoring"), as expiry claims a table's
("purging"): expiry claims a cascade's table only together with a check that the namespace's
record is unchanged, and leaves a claimed namespace record (and its tables) to the undrop, so
each table of the cascade is either restored by the undrop or purged by expiry, never both, and
an undrop that finds one claimed by expiry changes nothing. The claim is held under a lease named
by the cascade: a claim whose undrop died is continued by a rerun, or taken back by expiry past
the deadline (``release_abandoned``), never kept for ever."""

from __future__ import annotations

import logging

from lake_platform.catalog import branch_moves
from lake_platform.catalog.context import CatalogContext, Log
from lake_platform.catalog.policies import Policies
from lake_platform.catalog.principals import Principal
from lake_platform.catalog.results import CommitResult
from lake_platform.errors import (
    ConcurrentModification,
    ConditionFailed,
    InvalidTableState,
    LeaseUnavailable,
    NamespaceNotFound,
    TableAlreadyExists,
    TableNotFound,
)
from lake_platform.naming import NamespaceName, TableName
from lake_platform.registry import keys
from lake_platform.registry.records import NamespaceRecord, TrashRecord, decode, new_id
from lake_platform.registry.store import ABSENT, Check, Delete, Item, Op, Put

log = logging.getLogger(__name__)


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


def restore_namespace(
    ctx: CatalogContext,
    policies: Policies,
    nname: NamespaceName,
    who: Principal,
    commit_id: str,
    detail: dict[str, object],
) -> CommitResult:
    """``Trash.undrop_namespace`` once its caller was checked: claim the newest trash record of
    ``nname``, rebuild its namespaces (shallowest first) and tables, then delete the record in
    the commit logged ``undrop namespace cascade`` (``commit_id``, with ``detail``)."""
    found = [
        (i, decode(TrashRecord, i.value, i.key))
        for i in ctx.store.scan_prefix(keys.trash_prefix(f"{nname}/"))
    ]
    found = [(i, r) for i, r in found if r.kind == "namespace"]
    if not found:
        raise NamespaceNotFound(f"no dropped namespace {nname} in the trash")
    item, record = found[-1]
    _refuse_purging(ctx, nname, record)
    refuse_taken(ctx, nname, record)
    for space in record.namespaces:  # a drop still under way (interrupted): refused before the claim
        _refuse_dropping(ctx, space.name)
    # The claim is held under the cascade's lease: one whose lease nobody holds was left by an
    # undrop that died, which a rerun continues and expiry, past the deadline, takes back.
    lease = undrop_lease(record)
    try:
        with ctx.gate.hold(lease):
            return _restore_claimed(ctx, policies, nname, who, commit_id, detail, item.key)
    finally:
        ctx.gate.forget(lease)


def undrop_lease(record: TrashRecord) -> str:
    """The name of the lease a namespace undrop holds on ``record`` (a cascade's) while it works."""
    return f"undrop-{record.cascade_id}"


def release_abandoned(ctx: CatalogContext, item: Item) -> Item | None:
    """``item``, a cascade's trash record an undrop claimed ("restoring"), back to "trashed"
    when that undrop is gone (its lease free or its holder dead), so expiry can purge what it
    did not restore; None while the undrop runs (or the record is gone)."""
    record = decode(TrashRecord, item.value, item.key)
    name = undrop_lease(record)
    try:
        lease = ctx.gate.acquire(name, wait=0)
    except LeaseUnavailable:
        return None  # the undrop is running: its claim stands
    try:
        current = ctx.store.get(item.key)  # as it is under the lease: a rerun may have moved it
        if current is None or decode(TrashRecord, current.value, current.key).state != "restoring":
            return current
        try:
            released = record.model_copy(update={"state": "trashed"})
            return ctx.store.compare_and_swap(current.key, current.revision, released.encode())
        except ConditionFailed:
            return None
    finally:
        ctx.gate.release(lease)
        ctx.gate.forget(name)


def _restore_claimed(
    ctx: CatalogContext,
    policies: Policies,
    nname: NamespaceName,
    who: Principal,
    commit_id: str,
    detail: dict[str, object],
    record_key: str,
) -> CommitResult:
    """``restore_namespace`` under the cascade's lease, from its trash record at ``record_key``."""
    item = ctx.store.get(record_key)
    if item is None:
        raise ConcurrentModification(f"namespace {nname} was undropped by another request meanwhile")
    record = decode(TrashRecord, item.value, item.key)
    _refuse_purging(ctx, nname, record)
    if record.state == "trashed":
        item = _claim(ctx, nname, item, record)
    for space in record.namespaces:  # shallowest first
        key = keys.namespace(NamespaceName.parse(space.name))
        existing = ctx.store.get(key)
        if existing is None:
            # Under its parent as it is now, as a create is: one dropped meanwhile refuses it.
            parent = ctx.require_parent(NamespaceName.parse(space.name), who=who)
            try:
                _put_namespace(ctx, policies, record, space, key, parent, who)
            except ConditionFailed as exc:
                if exc.key != parent.key:
                    raise
                raise NamespaceNotFound(
                    f"the parent of namespace {space.name} changed during the undrop; run it again"
                ) from None
        else:
            _refuse_dropping(ctx, space.name)
        ctx.at("undrop-namespace:namespace")
    for trash_key in record.table_trash_keys:
        trash_item = ctx.store.get(trash_key)
        if trash_item is None:
            continue  # restored by an earlier run (or purged before the claim)
        trash = decode(TrashRecord, trash_item.value, trash_key)
        if trash.state != "trashed" or trash.table is None:
            continue
        target = TableName.parse(trash.target)
        if ctx.store.get(keys.table(target)) is not None:
            log.warning("not restoring %s: the name is taken", target)
            continue
        parent = ctx.require_parent(target, who=who)
        restore(ctx, policies, trash_item, trash, target, parent, who)
        ctx.at("undrop-namespace:table")
    try:
        ctx.commit(
            [Delete(item.key, item.revision)],
            log=Log(
                str(nname),
                "undrop namespace cascade",
                ctx.actor(None, who),
                commit_id=commit_id,
                detail={**detail, "cascade_id": record.cascade_id},
            ),
        )
    except ConditionFailed:  # only another run of this undrop moves a claimed record
        raise ConcurrentModification(
            f"namespace {nname} was undropped by another request meanwhile"
        ) from None
    return CommitResult(commit_id, str(nname), "undrop namespace", None, None)


def _put_namespace(
    ctx: CatalogContext,
    policies: Policies,
    record: TrashRecord,
    space: NamespaceRecord,
    key: str,
    parent: Item,
    who: Principal,
) -> None:
    """``space`` of the cascade ``record`` registered again with its policies, conditional on
    ``parent`` (its container) at the revision read."""
    ctx.commit(
        [
            Put(key, space.encode(), ABSENT),
            Check(parent.key, parent.revision),
            *policies.restore(record.policies, space.name, space.name),
        ],
        log=Log(
            space.name, "undrop namespace", ctx.actor(None, who), detail={"cascade_id": record.cascade_id}
        ),
    )


def _refuse_dropping(ctx: CatalogContext, name: str) -> None:
    existing = ctx.store.get(keys.namespace(NamespaceName.parse(name)))
    if existing is not None and decode(NamespaceRecord, existing.value).state != "active":
        raise ConcurrentModification(f"namespace {name} is being dropped")


def _claim(ctx: CatalogContext, nname: NamespaceName, item: Item, record: TrashRecord) -> Item:
    """``record`` (read as ``item``) marked "restoring": expiry claims none of its tables from
    here on. A table expiry claimed before this, seen after it, releases the claim and
    refuses: nothing was changed."""
    try:
        claimed = ctx.store.compare_and_swap(
            item.key, item.revision, record.model_copy(update={"state": "restoring"}).encode()
        )
    except ConditionFailed:
        raise ConcurrentModification(
            f"the trash record of namespace {nname} changed meanwhile; nothing was undropped"
        ) from None
    try:
        _refuse_purging(ctx, nname, record)
    except InvalidTableState:
        try:
            ctx.store.compare_and_swap(claimed.key, claimed.revision, record.encode())
        except ConditionFailed:
            pass
        raise
    return claimed


def _refuse_purging(ctx: CatalogContext, nname: NamespaceName, record: TrashRecord) -> None:
    """InvalidTableState when ``record`` is being purged, or one of its tables is (its files
    may be half gone): the namespace would come back without it."""
    purging = [] if record.state != "purging" else [str(nname)]
    for trash_key in record.table_trash_keys:
        trash_item = ctx.store.get(trash_key)
        if (
            trash_item is not None
            and (trash := decode(TrashRecord, trash_item.value, trash_key)).state == "purging"
        ):
            purging.append(trash.target)
    if purging:
        raise InvalidTableState(
            f"namespace {nname} cannot be undropped: {', '.join(purging)} being purged by trash "
            "expiry; nothing was undropped"
        )


def cascade_record(ctx: CatalogContext, trash: TrashRecord) -> Item | None:
    """The trash record of the namespace whose cascade put ``trash`` (a table's) in the trash,
    if it is still there: filed under the cascade's root, the table's namespace or one above."""
    if trash.kind != "table" or trash.cascade_id is None:
        return None
    tname = TableName.parse(trash.target)
    for depth in range(len(tname.namespace), 0, -1):
        root = ".".join([tname.project, tname.warehouse, *tname.namespace[:depth]])
        item = ctx.store.get(keys.trash(root, trash.dropped_at_ms, trash.cascade_id))
        if item is not None:
            return item
    return None
