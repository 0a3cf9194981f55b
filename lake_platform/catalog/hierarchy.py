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
    NamespaceRecord,
    ProjectRecord,
    TableRecord,
    TrashRecord,
    WarehouseRecord,
    decode,
    new_id,
)
from lake_platform.registry.store import ABSENT, Delete, Item, Put

if TYPE_CHECKING:
    from lake_platform.catalog.catalog import Catalog

_LIST_LIMIT = 5


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
        self.store.transact([Put(key, record.model_copy(update={"protected": protected}).encode(), item.revision),
                             *self._log_ops(name, "protect" if protected else "unprotect", who.name)])

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
        # carry a condition on the revision they saw, so none can land from here on.
        marked: list[tuple[NamespaceRecord, Item]] = []
        try:
            for record, ns_item in reversed(spaces):
                dropping = record.model_copy(update={"state": "dropping"})
                marked.append((record, self.store.compare_and_swap(ns_item.key, ns_item.revision, dropping.encode())))
        except ConditionFailed:
            self._unmark(marked)
            raise ConcurrentModification(f"namespace {nname} changed while being dropped; nothing was dropped") from None
        self._at("drop-namespace:marked")
        # Re-list under the mark: anything that landed before it is seen now.
        spaces_now, tables_now = self._subtree(nname)
        if len(spaces_now) != len(spaces) or len(tables_now) != len(tables) or (not cascade and tables_now):
            self._unmark(marked)
            raise ConcurrentModification(f"namespace {nname} changed while being dropped; nothing was dropped")
        commit_id = new_id()
        if tables:
            self._detach_tables(nname, spaces, tables, who, commit_id, purge)
        self._at("drop-namespace:detached")
        for record, ns_item in marked:  # deepest first
            self.store.transact([Delete(ns_item.key, ns_item.revision),
                                 *self._log_ops(record.name, "drop namespace", who.name, commit_id=new_id(),
                                                detail={"cascade": cascade, "cascade_id": commit_id})])
            self._at("drop-namespace:namespace")
        return CommitResult(commit_id, str(nname), "drop namespace", None, None)

    def _detach_tables(self: Catalog, nname: NamespaceName, spaces: list[tuple[NamespaceRecord, Item]],
                       tables: list[tuple[TableRecord, Item]], who: Principal, cascade_id: str, purge: bool) -> None:
        """Cascade: file one namespace trash record (the undo list), then move every table to
        the trash. No destructive storage call happens here, whatever the grace."""
        grace = self.effective_policy(str(nname)).policy.trash_grace
        dropped_at = self.clock.wall_ms()
        expires_at = dropped_at + (0 if purge else int(grace.total_seconds() * 1000))
        table_keys = [keys.trash(t.name, dropped_at, t.incarnation) for t, _ in tables]
        ns_trash = TrashRecord(kind="namespace", target=str(nname), dropped_at_ms=dropped_at, expires_at_ms=expires_at,
                               dropped_by=who.name, namespaces=[r.model_copy(update={"state": "active"}) for r, _ in spaces],
                               table_trash_keys=table_keys, cascade_id=cascade_id)
        self.store.transact([Put(keys.trash(str(nname), dropped_at, cascade_id), ns_trash.encode(), ABSENT),
                             *self._log_ops(str(nname), "drop namespace cascade", who.name, commit_id=cascade_id,
                                            detail={"tables": len(tables), "namespaces": len(spaces),
                                                    "expires_at_ms": expires_at})])
        self._at("drop-namespace:filed")
        for (table, item), trash_key in zip(tables, table_keys, strict=True):
            self._at("drop-namespace:table")
            record = TrashRecord(kind="table", target=table.name, dropped_at_ms=dropped_at, expires_at_ms=expires_at,
                                 dropped_by=who.name, table=table, cascade_id=cascade_id)
            self.store.transact([Delete(item.key, item.revision), Put(trash_key, record.encode(), ABSENT),
                                 *self._log_ops(table.name, "drop", who.name, incarnation=table.incarnation,
                                                from_version=table.current_version,
                                                detail={"cascade_id": cascade_id, "expires_at_ms": expires_at})])
        if purge:
            self.expire_trash(now_ms=expires_at, principal=who, only=table_keys)

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
        self.store.transact([Delete(item.key, marked.revision),
                             *self._log_ops(target, operation, who.name, commit_id=commit_id)])
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
