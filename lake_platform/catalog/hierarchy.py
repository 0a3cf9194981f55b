"""Deletes go bottom-up: namespace, warehouse and project drops, and deletion protection
(mixin of Catalog). Every door checks identity → shape → parent → permission → conflict → write."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from lake_platform.catalog.principals import Principal
from lake_platform.catalog.results import CommitResult
from lake_platform.errors import (
    ConcurrentModification,
    ConditionFailed,
    InvalidInput,
    NamespaceNotEmpty,
    NamespaceNotFound,
    Protected,
    TableNotFound,
)
from lake_platform.naming import NamespaceName, ProjectName, TableName, WarehouseName
from lake_platform.registry import keys
from lake_platform.registry.records import (
    CommitLogEntry,
    NamespaceRecord,
    ProjectRecord,
    TableRecord,
    TrashRecord,
    WarehouseRecord,
    decode,
    new_id,
)
from lake_platform.registry.store import ABSENT, Check, Delete, Item, Op, Put

if TYPE_CHECKING:
    from lake_platform.catalog.catalog import Catalog

_LIST_LIMIT = 5
#: Ops per registry transaction when a drop sweeps many records (DynamoDB allows 100).
_BATCH = 90


def _names(items: list[str]) -> str:
    head = ", ".join(items[:_LIST_LIMIT])
    return head + (f" and {len(items) - _LIST_LIMIT} more" if len(items) > _LIST_LIMIT else "")


class HierarchyMixin:
    # -- protection ----------------------------------------------------------------------------

    def set_protected(self: Catalog, name: str, protected: bool = True, *, kind: str | None = None,
                      principal: Principal | None = None) -> None:
        """Turn deletion protection on or off for a table, namespace or warehouse."""
        who = self._who(principal)
        kind_, key = self._scope(name, kind)
        if kind_ == "project":
            raise InvalidInput("projects cannot be protected (they are never cascaded)")
        who.require(name.split(".")[0], "admin", f"change protection of {name}")
        item = self.store.get(key)
        if item is None:
            raise NamespaceNotFound(f"{kind_} {name} does not exist")
        cls = {"table": TableRecord, "namespace": NamespaceRecord, "warehouse": WarehouseRecord}[kind_]
        record = decode(cls, item.value, item.key)
        # Nothing being dropped changes under the drop: a cascade detaches each table conditional
        # on the revision it read, and a protection flip would make that condition fail midway.
        guard: list[Op] = []
        if kind_ == "table":
            parent = self._require_parent(TableName.parse(name))
            guard.append(Check(parent.key, parent.revision))
        elif getattr(record, "state", "active") != "active":
            raise NamespaceNotFound(f"{kind_} {name} is being dropped")
        try:
            self.store.transact([Put(key, record.model_copy(update={"protected": protected}).encode(), item.revision),
                                 *guard, *self._log_ops(name, "protect" if protected else "unprotect",
                                                        self._actor(None, who))])
        except ConditionFailed:
            raise ConcurrentModification(f"{name} changed meanwhile; protection was not changed") from None

    # -- namespaces -----------------------------------------------------------------------------

    def drop_namespace(self: Catalog, name: str, *, cascade: bool = False, force: bool = False, purge: bool = False,
                       principal: Principal | None = None) -> CommitResult:
        who = self._who(principal)
        nname = NamespaceName.parse(name)
        self._require_parent(nname)
        who.require(nname.project, "admin", f"drop namespace {nname}")
        item = self.store.get(keys.namespace(nname))
        if item is None:
            raise NamespaceNotFound(f"namespace {nname} does not exist")
        spaces, tables = self._subtree(nname)
        protected = [r.name for r, _ in spaces if r.protected] + [t.name for t, _ in tables if t.protected]
        if protected and not force:
            raise Protected(f"namespace {nname} is or contains protected objects: {_names(protected)}; "
                            "unprotect them or pass force")
        if not cascade and (len(spaces) > 1 or tables):
            contents = [r.name for r, _ in spaces[1:]] + [t.name for t, _ in tables]
            raise NamespaceNotEmpty(f"namespace {nname} is not empty: it contains {_names(contents)}")
        self._at("drop-namespace:checked")
        # Mark every namespace of the subtree "dropping" (deepest first): creates under them
        # carry a condition on the revision they saw, so none can land from here on. Marks an
        # earlier, interrupted attempt left stay as they are: this call continues that attempt,
        # and a refusal below takes back only the marks this call added.
        resuming = spaces[0][0].state == "dropping"
        marked: list[tuple[NamespaceRecord, Item]] = []
        added: list[tuple[NamespaceRecord, Item]] = []
        try:
            for record, ns_item in reversed(spaces):
                if record.state == "dropping":
                    marked.append((record, ns_item))
                    continue
                dropping = record.model_copy(update={"state": "dropping"})
                now = self.store.compare_and_swap(ns_item.key, ns_item.revision, dropping.encode())
                added.append((record, now))
                marked.append((record, now))
        except ConditionFailed:
            self._unmark(added)
            raise ConcurrentModification(f"namespace {nname} changed while being dropped; nothing was dropped") from None
        self._at("drop-namespace:marked")
        # Re-list under the mark: anything that landed before it is seen now, and these are the
        # incarnations the cascade detaches (a drop + recreate before the mark shows up here as
        # the replacement; nothing can replace a table after the mark).
        spaces_now, tables_now = self._subtree(nname)
        if len(spaces_now) != len(spaces) or (not cascade and tables_now):
            self._unmark(added)
            raise ConcurrentModification(f"namespace {nname} changed while being dropped; nothing was dropped")
        late = [t.name for t, _ in tables_now if t.protected]
        if late and not force:
            self._unmark(added)
            raise Protected(f"namespace {nname} contains protected objects: {_names(late)}; "
                            "unprotect them or pass force")
        # The root is marked last, so only an attempt that got past marking it can have filed.
        detach = [t for t, _ in tables_now]
        filed = self._filed_cascade(nname, spaces[0][0]) if resuming else None
        if filed is None and detach:
            filed = self._file_cascade(nname, spaces_now, detach, who, purge, marked[-1][1])
        commit_id = (filed[1].cascade_id if filed is not None else None) or new_id()
        if filed is not None:
            # Filing rewrote the root (once per cascade, whoever filed): delete it at that revision.
            root_item = self.store.get(marked[-1][1].key)
            root = decode(NamespaceRecord, root_item.value, root_item.key) if root_item is not None else None
            if root is None or root.created_at_ms != spaces[0][0].created_at_ms:
                # Another run continuing this cascade finished it meanwhile.
                return CommitResult(commit_id, str(nname), "drop namespace", None, None)
            if root_item is None or root.state != "dropping":
                raise ConcurrentModification(f"namespace {nname} changed while being dropped")
            marked[-1] = (marked[-1][0], root_item)
            self._detach_tables(nname, detach, who, purge, filed)
        self._at("drop-namespace:detached")
        for record, ns_item in marked:  # deepest first
            self._at("drop-namespace:namespace")
            try:
                self._transact_chunked([*self._policy_sweep(record.name), Delete(ns_item.key, ns_item.revision),
                                        *self._log_ops(record.name, "drop namespace", self._actor(None, who),
                                                       commit_id=new_id(),
                                                       detail={"cascade": cascade, "cascade_id": commit_id})])
            except ConditionFailed:
                if self.store.get(ns_item.key) is not None:
                    raise ConcurrentModification(f"namespace {record.name} changed while being dropped") \
                        from None
                # Another run continuing the same cascade removed it first.
        return CommitResult(commit_id, str(nname), "drop namespace", None, None)

    def _filed_cascade(self: Catalog, nname: NamespaceName,
                       root: NamespaceRecord) -> tuple[Item, TrashRecord] | None:
        """The namespace trash record an interrupted (or still running) cascade of exactly this
        namespace filed.

        Older records of the same name belong to cascades that finished: their root was removed,
        so the registered root is a recreate (another ``created_at_ms``), or an undrop put it back
        (logged under that record's cascade id). The one left is the cascade still marking it."""
        me = root.model_copy(update={"state": "active"})
        log = [decode(CommitLogEntry, i.value, i.key) for i in self.store.scan_prefix(keys.log_prefix(str(nname)))]
        undone = {e.detail.get("cascade_id") for e in log if e.operation == "undrop namespace"}
        found = [(i, decode(TrashRecord, i.value, i.key))
                 for i in self.store.scan_prefix(keys.trash_prefix(f"{nname}/"))]
        found = [(i, r) for i, r in found if r.kind == "namespace" and r.namespaces and r.namespaces[0] == me
                 and r.cascade_id not in undone]
        return found[-1] if found else None

    def _file_cascade(self: Catalog, nname: NamespaceName, spaces: list[tuple[NamespaceRecord, Item]],
                      tables: list[TableRecord], who: Principal, purge: bool,
                      root: Item) -> tuple[Item, TrashRecord]:
        """File the cascade's namespace trash record: the undo list (the subtree's namespaces,
        their policies and the trash keys its tables will get).

        The same transaction rewrites the marked root, conditional on the revision this run
        saw: two runs of one cascade (a retry while the first attempt still runs) cannot both
        file; the one that loses continues under the winner's record."""
        cascade_id = new_id()
        actor = self._actor(None, who)
        grace = self.effective_policy(str(nname)).policy.trash_grace
        dropped_at = self.clock.wall_ms()
        expires_at = dropped_at + (0 if purge else int(grace.total_seconds() * 1000))
        # Namespaces are marked, so their policies can no longer change: this copy is final.
        kept: dict[str, Any] = {}
        for record, _ in spaces:
            kept.update(self._policy_detach(record.name)[1])
        ns_trash = TrashRecord(kind="namespace", target=str(nname), dropped_at_ms=dropped_at,
                               expires_at_ms=expires_at, dropped_by=actor,
                               namespaces=[r.model_copy(update={"state": "active"}) for r, _ in spaces],
                               table_trash_keys=[keys.trash(t.name, dropped_at, t.incarnation) for t in tables],
                               cascade_id=cascade_id, policies=kept)
        try:
            written = self.store.transact([
                Put(keys.trash(str(nname), dropped_at, cascade_id), ns_trash.encode(), ABSENT),
                Put(root.key, root.value, root.revision),
                *self._log_ops(str(nname), "drop namespace cascade", actor, commit_id=cascade_id,
                               detail={"tables": len(tables), "namespaces": len(spaces), "expires_at_ms": expires_at})])
        except ConditionFailed:
            other = self._filed_cascade(nname, decode(NamespaceRecord, root.value, root.key))
            if other is None:
                raise ConcurrentModification(f"namespace {nname} changed while being dropped") from None
            return other
        assert written[0] is not None
        return written[0], ns_trash

    def _detach_tables(self: Catalog, nname: NamespaceName, tables: list[TableRecord], who: Principal,
                       purge: bool, filed: tuple[Item, TrashRecord]) -> None:
        """Move every table listed under the mark to the trash under the cascade's record
        ``filed`` (its drop time, deadline and cascade id), each conditional on that incarnation.
        No destructive storage call happens here unless ``purge``.

        ``filed`` may be the record of an interrupted attempt at this cascade: the tables it
        moved are no longer registered, the rest go under the same record, so a retried cascade
        leaves what an uninterrupted one leaves."""
        actor = self._actor(None, who)
        ns_item, ns_trash = filed
        cascade_id = ns_trash.cascade_id or ""
        dropped_at, expires_at = ns_trash.dropped_at_ms, ns_trash.expires_at_ms
        table_keys = [keys.trash(t.name, dropped_at, t.incarnation) for t in tables]
        missing = [k for k in table_keys if k not in ns_trash.table_trash_keys]
        if missing:  # none can land under the mark; should one have, it joins the undo list
            listed = [*ns_trash.table_trash_keys, *missing]
            try:
                self.store.compare_and_swap(ns_item.key, ns_item.revision,
                                            ns_trash.model_copy(update={"table_trash_keys": listed}).encode())
            except ConditionFailed:
                raise ConcurrentModification(f"the trash record of namespace {nname} changed while the "
                                             "cascade was being finished; run the drop again") from None
        self._at("drop-namespace:filed")
        for table in tables:
            self._at("drop-namespace:table")
            # A table a racing single drop already took is left to that drop's own trash record.
            self._detach_table(TableName.parse(table.name), table.incarnation, actor=actor, dropped_at=dropped_at,
                               expires_at=expires_at, step="drop-namespace", cascade_id=cascade_id,
                               skip_vanished=True)
        if purge:
            self.expire_trash(now_ms=expires_at, principal=who, only=[*ns_trash.table_trash_keys, *missing])

    def _transact_chunked(self: Catalog, ops: list[Op]) -> None:
        """One transaction when it fits; otherwise the leading ops go first in batches and the
        last batch (the one that removes the object and logs it) lands whole."""
        while len(ops) > _BATCH:
            self.store.transact(ops[:_BATCH])
            ops = ops[_BATCH:]
        self.store.transact(ops)

    def _unmark(self: Catalog, marked: list[tuple[NamespaceRecord, Item]]) -> None:
        for record, item in marked:
            try:
                self.store.compare_and_swap(item.key, item.revision, record.encode())
            except ConditionFailed:
                pass

    def _subtree(self: Catalog, nname: NamespaceName) -> tuple[list[tuple[NamespaceRecord, Item]],
                                                                list[tuple[TableRecord, Item]]]:
        """The namespace, its descendants (shallowest first) and every table in them."""
        root = self.store.get(keys.namespace(nname))
        if root is None:
            raise NamespaceNotFound(f"namespace {nname} does not exist")
        spaces = [(decode(NamespaceRecord, root.value, root.key), root)]
        spaces += [(decode(NamespaceRecord, i.value, i.key), i) for i in self.store.scan_prefix(keys.namespace(nname) + ".")]
        spaces.sort(key=lambda pair: (pair[0].name.count("."), pair[0].name))
        tables: list[tuple[TableRecord, Item]] = []
        for record, _ in spaces:
            ns = NamespaceName.parse(record.name)
            tables += [(decode(TableRecord, i.value, i.key), i) for i in self.store.scan_prefix(keys.tables_in_namespace(ns))]
        return spaces, tables

    # -- warehouses and projects --------------------------------------------------------------

    def drop_warehouse(self: Catalog, name: str, *, force: bool = False,
                       principal: Principal | None = None) -> CommitResult:
        """Drop an empty warehouse (no namespaces and nothing of it in the trash)."""
        who = self._who(principal)
        wname = WarehouseName.parse(name)
        if self.store.get(keys.project(wname.parent)) is None:
            raise NamespaceNotFound(f"project {wname.project} does not exist")
        who.require(wname.project, "admin", f"drop warehouse {wname}")
        item = self.store.get(keys.warehouse(wname))
        if item is None:
            raise NamespaceNotFound(f"warehouse {wname} does not exist")
        record = decode(WarehouseRecord, item.value, item.key)
        if record.protected and not force:
            raise Protected(f"warehouse {wname} is protected; unprotect it or pass force")
        return self._drop_empty(item, record.model_copy(update={"state": "dropping"}), str(wname), who,
                                lambda: self._warehouse_contents(wname), "drop warehouse")

    def _warehouse_contents(self: Catalog, wname: WarehouseName) -> list[str]:
        spaces = [decode(NamespaceRecord, i.value, i.key).name
                  for i in self.store.scan_prefix(f"nsp/{wname.project}/{wname.warehouse}/")]
        trashed = [decode(TrashRecord, i.value, i.key).target + " (in trash)"
                   for i in self.store.scan_prefix(keys.trash_prefix(f"{wname}."))]
        return spaces + trashed

    def drop_project(self: Catalog, name: str, *, principal: Principal | None = None) -> CommitResult:
        """Drop an empty project. There is no cascade for projects."""
        who = self._who(principal)
        pname = ProjectName.parse(name)
        who.require(pname.project, "admin", f"drop project {pname}")
        item = self.store.get(keys.project(pname))
        if item is None:
            raise NamespaceNotFound(f"project {pname} does not exist")
        record = decode(ProjectRecord, item.value, item.key)
        return self._drop_empty(item, record.model_copy(update={"state": "dropping"}), str(pname), who,
                                lambda: self._project_contents(pname), "drop project")

    def _project_contents(self: Catalog, pname: ProjectName) -> list[str]:
        from lake_platform.catalog.principals import TokenRecord, UserRecord

        found = [decode(WarehouseRecord, i.value, i.key).name for i in self.store.scan_prefix(f"whs/{pname.project}/")]
        found += [f"user {u.name}" for u in (decode(UserRecord, i.value, i.key) for i in self.store.scan_prefix("usr/"))
                  if u.project == pname.project]
        found += [f"token {t.name}" for t in (decode(TokenRecord, i.value, i.key) for i in self.store.scan_prefix("tok/"))
                  if t.project == pname.project and not t.revoked]
        return found

    def _drop_empty(self: Catalog, item: Item, dropping: Any, target: str, who: Principal,
                    contents: Any, operation: str) -> CommitResult:
        before = contents()
        if before:
            raise NamespaceNotEmpty(f"{target} is not empty: it contains {_names(before)}")
        marked = self.store.compare_and_swap(item.key, item.revision, dropping.encode())
        after = contents()
        if after:  # something landed before the mark: put it back as it was
            self.store.compare_and_swap(item.key, marked.revision, item.value)
            raise NamespaceNotEmpty(f"{target} is not empty: it contains {_names(after)}")
        commit_id = new_id()
        # Whatever policy records are left at or under it go with it (a recreate starts clean).
        self._transact_chunked([*self._policy_sweep(target), Delete(item.key, marked.revision),
                                *self._log_ops(target, operation, self._actor(None, who), commit_id=commit_id)])
        return CommitResult(commit_id, target, operation, None, None)

    # -- helpers ----------------------------------------------------------------------------

    def _require_parent(self: Catalog, name: NamespaceName | TableName) -> Item:
        """The parent container must exist and be active; returns its registry item."""
        parent: Any = name.namespace_name if isinstance(name, TableName) else name.parent
        key = keys.warehouse(parent) if isinstance(parent, WarehouseName) else keys.namespace(parent)
        kind = "warehouse" if isinstance(parent, WarehouseName) else "namespace"
        item = self.store.get(key)
        if item is None:
            raise NamespaceNotFound(f"{kind} {parent} does not exist")
        record = decode(WarehouseRecord if kind == "warehouse" else NamespaceRecord, item.value, item.key)
        if record.state != "active":
            raise NamespaceNotFound(f"{kind} {parent} is being dropped")
        return item

    def _scope(self: Catalog, scope: str, kind: str | None = None) -> tuple[str, str]:
        """Resolve a dotted scope to (kind, registry key); tables win over same-named namespaces."""
        parts = scope.split(".") if isinstance(scope, str) else []
        if len(parts) == 1:
            pname = ProjectName.parse(scope)
            found = [("project", keys.project(pname))]
        elif len(parts) == 2:
            found = [("warehouse", keys.warehouse(WarehouseName.parse(scope)))]
        else:
            found = []
            if len(parts) >= 4:
                found.append(("table", keys.table(TableName.parse(scope))))
            found.append(("namespace", keys.namespace(NamespaceName.parse(scope))))
        if kind is not None:
            found = [f for f in found if f[0] == kind]
            if not found:
                raise InvalidInput(f"{scope!r} cannot name a {kind}")
        for k, key in found:
            if self.store.get(key) is not None:
                return k, key
        if found and found[0][0] == "table":
            raise TableNotFound(f"no table or namespace named {scope}")
        raise NamespaceNotFound(f"{found[0][0] if found else 'scope'} {scope} does not exist")
