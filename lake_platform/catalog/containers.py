"""Containers: projects, warehouses and namespaces, and their listings. Creates go top-down,
each conditional on its parent's revision; empty warehouses and projects drop bottom-up (mark
``dropping``, re-list under the mark, remove); deletion protection. The namespace drop and its cascade are in
``cascade``. Every door checks identity → shape → parent → permission → conflict → write; a
warehouse's root also passes the allowed-roots rule (``roots``) before anything is written.
"""

from __future__ import annotations

from typing import Any

from lake_platform import owner_only
from lake_platform.catalog import roots
from lake_platform.catalog.context import CatalogContext, Log, check_commit_id
from lake_platform.catalog.policies import Policies
from lake_platform.catalog.principals import Principal, TokenRecord, UserRecord
from lake_platform.catalog.provenance import UNSTATED, Provenance
from lake_platform.catalog.results import CommitResult
from lake_platform.catalog.trash import Trash
from lake_platform.errors import (
    ConcurrentModification,
    ConditionFailed,
    InvalidInput,
    LakeError,
    NamespaceAlreadyExists,
    NamespaceNotEmpty,
    NamespaceNotFound,
    Protected,
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
)
from lake_platform.registry.store import ABSENT, Check, Delete, Item, Op, Put

_LIST_LIMIT = 5


def name_list(items: list[str]) -> str:
    head = ", ".join(items[:_LIST_LIMIT])
    return head + (f" and {len(items) - _LIST_LIMIT} more" if len(items) > _LIST_LIMIT else "")


class Containers:
    def __init__(self, ctx: CatalogContext, policies: Policies, trash: Trash) -> None:
        self.ctx = ctx
        self.policies = policies
        self.trash = trash

    # -- creates ---------------------------------------------------------------------------------

    def create_project(
        self, name: str, *, detail: dict[str, object] | None = None, by: Provenance = UNSTATED
    ) -> ProjectRecord:
        """``detail`` goes into the log entry (an idempotent request's key and digest), as for
        every create and drop here; the commit is ``by.commit_id`` when given (one that landed
        already is refused with the rest: its marker is what a keyed caller looks up)."""
        who = self.ctx.who(by.principal)
        pname = ProjectName.parse(name)
        who.require(pname.project, "admin", f"create project {pname}")
        record = ProjectRecord(name=str(pname), created_by=self.ctx.actor(by.actor, who))
        self._create(
            keys.project(pname),
            record,
            str(pname),
            "create project",
            self.ctx.actor(by.actor, who),
            exists=NamespaceAlreadyExists(f"project {pname} already exists"),
            commit=(check_commit_id(by.commit_id), dict(detail or {})),
        )
        return record

    def create_warehouse(
        self,
        name: str,
        *,
        root: str | None = None,
        detail: dict[str, object] | None = None,
        by: Provenance = UNSTATED,
    ) -> WarehouseRecord:
        who = self.ctx.who(by.principal)
        wname = WarehouseName.parse(name)
        explicit = bool(root)
        if not root:
            root = f"{self.ctx.settings.warehouse_root.rstrip('/')}/{wname.project}/{wname.warehouse}"
        canonical = roots.canonical(root)
        # Another tenant's project is answered as a missing one (before any read: the same words).
        project = self.ctx.store.get(keys.project(wname.parent)) if who.can(wname.project, "read") else None
        if project is None or decode(ProjectRecord, project.value).state != "active":
            raise NamespaceNotFound(f"project {wname.project} does not exist")
        who.require(wname.project, "admin", f"create warehouse {wname}")
        operator = who.project == "*"
        if explicit and not operator:
            # Before the other-warehouse checks: outside its own folder a tenant learns nothing.
            roots.require_tenant_root(canonical, wname.project, self.ctx.settings)
        # After the permission check: the refusal may reveal that some other warehouse is there.
        others = [
            roots.canonical(w.root, strict=False) for w in self._warehouse_records() if w.name != str(wname)
        ]
        roots.require_allowed(canonical, self.ctx.settings, others)
        if not operator:
            roots.require_empty(canonical, self.ctx.storage(str(canonical)))
        record = WarehouseRecord(
            name=str(wname), root=str(canonical), created_by=self.ctx.actor(by.actor, who)
        )
        self._create(
            keys.warehouse(wname),
            record,
            str(wname),
            "create warehouse",
            self.ctx.actor(by.actor, who),
            exists=NamespaceAlreadyExists(f"warehouse {wname} already exists"),
            parent=keys.project(wname.parent),
            commit=(check_commit_id(by.commit_id), {**(detail or {}), "root": record.root}),
        )
        if "://" not in record.root:
            # Lance writes a table's files at the umask's mode; a 0700 root keeps them (and the
            # folders made for the root) from other users of the machine. An existing folder is
            # the operator's and keeps its mode.
            owner_only.make_dir(record.root)
        return record

    def create_namespace(
        self, name: str, *, detail: dict[str, object] | None = None, by: Provenance = UNSTATED
    ) -> NamespaceRecord:
        who = self.ctx.who(by.principal)
        nname = NamespaceName.parse(name)
        parent = nname.parent
        parent_key = keys.warehouse(parent) if isinstance(parent, WarehouseName) else keys.namespace(parent)
        self.ctx.require_parent(nname, who=who)
        who.require(nname.project, "admin", f"create namespace {nname}")
        record = NamespaceRecord(name=str(nname), created_by=self.ctx.actor(by.actor, who))
        self._create(
            keys.namespace(nname),
            record,
            str(nname),
            "create namespace",
            self.ctx.actor(by.actor, who),
            exists=NamespaceAlreadyExists(f"namespace {nname} already exists"),
            parent=parent_key,
            commit=(check_commit_id(by.commit_id), dict(detail or {})),
        )
        return record

    def _create(
        self,
        key: str,
        record: Any,
        target: str,
        operation: str,
        actor: str,
        *,
        exists: LakeError,
        parent: str | None = None,
        commit: tuple[str, dict[str, object]],
    ) -> None:
        """``commit``: the change's commit id and its log entry's detail."""
        ops: list[Op] = [Put(key, record.encode(), ABSENT)]
        if parent is not None:
            parent_item = self.ctx.store.get(parent)
            if parent_item is None:
                raise NamespaceNotFound(f"parent of {target} does not exist")
            # The parent must still be there when the child lands (no orphan children).
            ops.append(Check(parent, parent_item.revision))
        try:
            self.ctx.commit(ops, log=Log(target, operation, actor, commit_id=commit[0], detail=commit[1]))
        except ConditionFailed as exc:
            if exc.key == key or exc.key is None and self.ctx.store.get(key) is not None:
                raise exists from None
            raise NamespaceNotFound(f"parent of {target} was dropped concurrently") from None

    def _warehouse_records(self, project: str | None = None) -> list[WarehouseRecord]:
        return [
            decode(WarehouseRecord, i.value, i.key)
            for i in self.ctx.store.scan_prefix(keys.warehouses(project))
        ]

    def root_violations(self) -> dict[str, str]:
        """Every registered warehouse whose root breaks the allowed-roots rule under the
        current settings (made before the rule, or under wider LAKE_WAREHOUSE_ROOTS), with
        the rule it breaks. Reads only."""
        records = self._warehouse_records()
        found: dict[str, str] = {}
        for record in records:
            try:
                root = roots.canonical(record.root)
                others = [roots.canonical(r.root, strict=False) for r in records if r.name != record.name]
                problem = roots.violation(root, self.ctx.settings, others)
            except InvalidInput as exc:
                problem = str(exc)
            if problem is not None:
                found[record.name] = f"root {record.root}: {problem}"
        return found

    # -- listings ------------------------------------------------------------------------------

    def list_projects(self, *, by: Provenance = UNSTATED) -> list[ProjectRecord]:
        """The projects the principal may read, in name order (the local admin: every one)."""
        who = self.ctx.who(by.principal)
        records = (decode(ProjectRecord, i.value, i.key) for i in self.ctx.store.scan_prefix(keys.projects()))
        return [r for r in records if who.can(r.name, "read")]

    def list_warehouses(
        self, project: str | None = None, *, by: Provenance = UNSTATED
    ) -> list[WarehouseRecord]:
        """The warehouses of ``project`` (every project the principal may read without one), in
        name order. A project it may not read is as one that does not exist: NamespaceNotFound."""
        who = self.ctx.who(by.principal)
        if project is not None:
            pname = ProjectName.parse(project)
            if not who.can(pname.project, "read") or self.ctx.store.get(keys.project(pname)) is None:
                raise NamespaceNotFound(f"project {pname} does not exist")
        return [r for r in self._warehouse_records(project) if who.can(r.name.split(".")[0], "read")]

    def list_namespaces(self, prefix: str = "", *, by: Provenance = UNSTATED) -> list[NamespaceRecord]:
        """The namespaces under ``prefix`` (a project, warehouse or namespace; nested ones too,
        not the prefix itself), or every one the principal may read without a prefix, in name
        order. A prefix naming nothing it may read: NamespaceNotFound."""
        who = self.ctx.who(by.principal)
        parts = prefix.split(".") if prefix else []
        if parts:
            kind = {1: "project", 2: "warehouse"}.get(len(parts), "namespace")
            project = ProjectName.parse(parts[0]).project
            if not who.can(project, "read"):
                raise NamespaceNotFound(f"{kind} {prefix} does not exist")
            self.ctx.scope(prefix, kind, who=who)  # parses every segment; NamespaceNotFound when absent
        head = keys.namespaces(*parts[:2]) + ".".join(parts[2:])
        records = (decode(NamespaceRecord, i.value, i.key) for i in self.ctx.store.scan_prefix(head))
        return [
            r
            for r in records
            if r.name.startswith(prefix + ".") or not prefix
            if who.can(r.name.split(".")[0], "read")
        ]

    # -- protection ----------------------------------------------------------------------------

    def set_protected(
        self,
        name: str,
        protected: bool = True,
        *,
        kind: str | None = None,
        by: Provenance = UNSTATED,
    ) -> None:
        """Turn deletion protection on or off for a table, namespace or warehouse."""
        who = self.ctx.who(by.principal)
        kind_, key = self.ctx.scope(name, kind, who=who)
        if kind_ == "project":
            raise InvalidInput("projects cannot be protected (they are never cascaded)")
        who.require(name.split(".")[0], "admin", f"change protection of {name}")
        item = self.ctx.store.get(key)
        if item is None:
            raise NamespaceNotFound(f"{kind_} {name} does not exist")
        cls = {"table": TableRecord, "namespace": NamespaceRecord, "warehouse": WarehouseRecord}[kind_]
        record = decode(cls, item.value, item.key)
        # Nothing being dropped changes under the drop: a cascade detaches each table conditional
        # on the revision it read, and a protection flip would make that condition fail midway.
        guard: list[Op] = []
        if kind_ == "table":
            parent = self.ctx.require_parent(TableName.parse(name), who=who)
            guard.append(Check(parent.key, parent.revision))
        elif getattr(record, "state", "active") != "active":
            raise NamespaceNotFound(f"{kind_} {name} is being dropped")
        try:
            self.ctx.commit(
                [
                    Put(key, record.model_copy(update={"protected": protected}).encode(), item.revision),
                    *guard,
                ],
                log=Log(name, "protect" if protected else "unprotect", self.ctx.actor(None, who)),
            )
        except ConditionFailed:
            raise ConcurrentModification(f"{name} changed meanwhile; protection was not changed") from None

    # -- warehouses and projects --------------------------------------------------------------

    def drop_warehouse(
        self,
        name: str,
        *,
        force: bool = False,
        detail: dict[str, object] | None = None,
        by: Provenance = UNSTATED,
    ) -> CommitResult:
        """Drop an empty warehouse (no namespaces and nothing of it in the trash)."""
        who = self.ctx.who(by.principal)
        wname = WarehouseName.parse(name)
        if not who.can(wname.project, "read") or self.ctx.store.get(keys.project(wname.parent)) is None:
            raise NamespaceNotFound(f"project {wname.project} does not exist")
        who.require(wname.project, "admin", f"drop warehouse {wname}")
        item = self.ctx.store.get(keys.warehouse(wname))
        if item is None:
            raise NamespaceNotFound(f"warehouse {wname} does not exist")
        record = decode(WarehouseRecord, item.value, item.key)
        if record.protected and not force:
            raise Protected(f"warehouse {wname} is protected; unprotect it or pass force")
        return self._drop_empty(
            item,
            record.model_copy(update={"state": "dropping"}),
            str(wname),
            who,
            lambda: self._warehouse_contents(wname),
            "drop warehouse",
            (check_commit_id(by.commit_id), dict(detail or {})),
        )

    def _warehouse_contents(self, wname: WarehouseName) -> list[str]:
        spaces = [
            decode(NamespaceRecord, i.value, i.key).name
            for i in self.ctx.store.scan_prefix(keys.namespaces(wname.project, wname.warehouse))
        ]
        trashed = [
            decode(TrashRecord, i.value, i.key).target + " (in trash)"
            for i in self.ctx.store.scan_prefix(keys.trash_prefix(f"{wname}."))
        ]
        return spaces + trashed

    def drop_project(
        self, name: str, *, detail: dict[str, object] | None = None, by: Provenance = UNSTATED
    ) -> CommitResult:
        """Drop an empty project. There is no cascade for projects."""
        who = self.ctx.who(by.principal)
        pname = ProjectName.parse(name)
        who.require(pname.project, "admin", f"drop project {pname}")
        item = self.ctx.store.get(keys.project(pname))
        if item is None:
            raise NamespaceNotFound(f"project {pname} does not exist")
        record = decode(ProjectRecord, item.value, item.key)
        return self._drop_empty(
            item,
            record.model_copy(update={"state": "dropping"}),
            str(pname),
            who,
            lambda: self._project_contents(pname),
            "drop project",
            (check_commit_id(by.commit_id), dict(detail or {})),
        )

    def _project_contents(self, pname: ProjectName) -> list[str]:
        found = [
            decode(WarehouseRecord, i.value, i.key).name
            for i in self.ctx.store.scan_prefix(keys.warehouses(pname.project))
        ]
        found += [
            f"user {u.name}"
            for u in (decode(UserRecord, i.value, i.key) for i in self.ctx.store.scan_prefix(keys.users()))
            if u.project == pname.project
        ]
        found += [
            f"token {t.name}"
            for t in (decode(TokenRecord, i.value, i.key) for i in self.ctx.store.scan_prefix(keys.tokens()))
            if t.project == pname.project and not t.revoked
        ]
        return found

    def _drop_empty(
        self,
        item: Item,
        dropping: Any,
        target: str,
        who: Principal,
        contents: Any,
        operation: str,
        commit: tuple[str, dict[str, object]],
    ) -> CommitResult:
        before = contents()
        if before:
            raise NamespaceNotEmpty(f"{target} is not empty: it contains {name_list(before)}")
        marked = self.ctx.store.compare_and_swap(item.key, item.revision, dropping.encode())
        after = contents()
        if after:  # something landed before the mark: put it back as it was
            self.ctx.store.compare_and_swap(item.key, marked.revision, item.value)
            raise NamespaceNotEmpty(f"{target} is not empty: it contains {name_list(after)}")
        commit_id, detail = commit
        # Whatever policy records are left at or under it go with it (a recreate starts clean).
        self.ctx.commit(
            [*self.policies.sweep(target), Delete(item.key, marked.revision)],
            log=Log(target, operation, self.ctx.actor(None, who), commit_id=commit_id, detail=detail),
            chunked=True,
        )
        return CommitResult(commit_id, target, operation, None, None)
