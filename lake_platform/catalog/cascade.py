"""The namespace drop and its cascade: mark the subtree ``dropping`` (deepest first, the root
last), re-list under the mark, file one namespace trash record (the undo list), detach every
table into the trash under it, then remove the namespaces. An interrupted cascade is continued
by the next drop of the same namespace. Checks identity → shape → parent → permission →
conflict → write, like every door.
"""

from __future__ import annotations

from typing import Any

from lake_platform.catalog.containers import name_list
from lake_platform.catalog.context import CatalogContext, Log, check_commit_id
from lake_platform.catalog.folder_claims import refuse_overlap
from lake_platform.catalog.policies import Policies
from lake_platform.catalog.principals import Principal
from lake_platform.catalog.provenance import UNSTATED, Provenance
from lake_platform.catalog.results import CommitResult
from lake_platform.catalog.trash import Trash
from lake_platform.errors import (
    ConcurrentModification,
    ConditionFailed,
    InvalidTableState,
    NamespaceNotEmpty,
    NamespaceNotFound,
    Protected,
)
from lake_platform.naming import NamespaceName, TableName
from lake_platform.registry import keys
from lake_platform.registry.records import (
    CommitLogEntry,
    NamespaceRecord,
    TableRecord,
    TrashRecord,
    decode,
    new_id,
)
from lake_platform.registry.store import ABSENT, Delete, Item, Put


class NamespaceDrops:
    def __init__(self, ctx: CatalogContext, policies: Policies, trash: Trash) -> None:
        self.ctx = ctx
        self.policies = policies
        self.trash = trash

    def drop_namespace(
        self,
        name: str,
        *,
        cascade: bool = False,
        force: bool = False,
        purge: bool = False,
        detail: dict[str, object] | None = None,
        by: Provenance = UNSTATED,
    ) -> CommitResult:
        """``detail`` goes into the log entry of the namespace's own removal (an idempotent
        request's key and digest), the last commit of the drop, made as ``by.commit_id`` when
        given: its marker is what a keyed caller looks up (the cascade id stays the drop's)."""
        who = self.ctx.who(by.principal)
        nname = NamespaceName.parse(name)
        root_commit = check_commit_id(by.commit_id)
        self.ctx.require_parent(nname, who=who)
        who.require(nname.project, "admin", f"drop namespace {nname}")
        item = self.ctx.store.get(keys.namespace(nname))
        if item is None:
            raise NamespaceNotFound(f"namespace {nname} does not exist")
        spaces, tables = self._subtree(nname)
        protected = [r.name for r, _ in spaces if r.protected] + [t.name for t, _ in tables if t.protected]
        if protected and not force:
            raise Protected(
                f"namespace {nname} is or contains protected objects: {name_list(protected)}; "
                "unprotect them or pass force"
            )
        if not cascade and (len(spaces) > 1 or tables):
            contents = [r.name for r, _ in spaces[1:]] + [t.name for t, _ in tables]
            raise NamespaceNotEmpty(f"namespace {nname} is not empty: it contains {name_list(contents)}")
        if purge:  # refused before anything is marked, as a single drop --purge is
            self._refuse_overlaps(nname, [t for t, _ in tables])
        self.ctx.at("drop-namespace:checked")
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
                now = self.ctx.store.compare_and_swap(ns_item.key, ns_item.revision, dropping.encode())
                added.append((record, now))
                marked.append((record, now))
        except ConditionFailed:
            self._unmark(added)
            raise ConcurrentModification(
                f"namespace {nname} changed while being dropped; nothing was dropped"
            ) from None
        self.ctx.at("drop-namespace:marked")
        # Re-list under the mark: anything that landed before it is seen now, and these are the
        # incarnations the cascade detaches (a drop + recreate before the mark shows up here as
        # the replacement; nothing can replace a table after the mark).
        spaces_now, tables_now = self._subtree(nname)
        if len(spaces_now) != len(spaces) or (not cascade and tables_now):
            self._unmark(added)
            raise ConcurrentModification(
                f"namespace {nname} changed while being dropped; nothing was dropped"
            )
        late = [t.name for t, _ in tables_now if t.protected]
        if late and not force:
            self._unmark(added)
            raise Protected(
                f"namespace {nname} contains protected objects: {name_list(late)};"
                " unprotect them or pass force"
            )
        if purge:
            try:
                self._refuse_overlaps(nname, [t for t, _ in tables_now])
            except InvalidTableState:
                self._unmark(added)
                raise
        # The root is marked last, so only an attempt that got past marking it can have filed.
        detach = [t for t, _ in tables_now]
        filed = self._filed_cascade(nname, spaces[0][0]) if resuming else None
        if filed is None and detach:
            filed = self._file_cascade(nname, spaces_now, detach, who, purge, marked[-1][1])
        commit_id = (filed[1].cascade_id if filed is not None else None) or new_id()
        refused: InvalidTableState | None = None
        if filed is not None:
            # Filing rewrote the root (once per cascade, whoever filed): delete it at that revision.
            root_item = self.ctx.store.get(marked[-1][1].key)
            root = decode(NamespaceRecord, root_item.value, root_item.key) if root_item is not None else None
            if root is None or root.created_at_ms != spaces[0][0].created_at_ms:
                # Another run continuing this cascade finished it meanwhile.
                return CommitResult(commit_id, str(nname), "drop namespace", None, None)
            if root_item is None or root.state != "dropping":
                raise ConcurrentModification(f"namespace {nname} changed while being dropped")
            marked[-1] = (marked[-1][0], root_item)
            refused = self._detach_tables(nname, detach, who, purge, filed)
        self.ctx.at("drop-namespace:detached")
        for record, ns_item in marked:  # deepest first
            self.ctx.at("drop-namespace:namespace")
            try:
                self.ctx.commit(
                    [*self.policies.sweep(record.name), Delete(ns_item.key, ns_item.revision)],
                    log=Log(
                        record.name,
                        "drop namespace",
                        self.ctx.actor(None, who),
                        commit_id=root_commit if record.name == str(nname) else new_id(),
                        detail={
                            **((detail or {}) if record.name == str(nname) else {}),
                            "cascade": cascade,
                            "cascade_id": commit_id,
                        },
                    ),
                    chunked=True,
                )
            except ConditionFailed:
                if self.ctx.store.get(ns_item.key) is not None:
                    raise ConcurrentModification(
                        f"namespace {record.name} changed while being dropped"
                    ) from None
                # Another run continuing the same cascade removed it first.
        if refused is not None:  # the namespaces are gone; the refused tables stay in the trash
            raise refused
        return CommitResult(commit_id, str(nname), "drop namespace", None, None)

    def _filed_cascade(self, nname: NamespaceName, root: NamespaceRecord) -> tuple[Item, TrashRecord] | None:
        """The namespace trash record an interrupted (or still running) cascade of exactly this
        namespace filed.

        Older records of the same name belong to cascades that finished: their root was removed,
        so the registered root is a recreate (another ``created_at_ms``), or an undrop put it back
        (logged under that record's cascade id). The one left is the cascade still marking it."""
        me = root.model_copy(update={"state": "active"})
        log = [
            decode(CommitLogEntry, i.value, i.key)
            for i in self.ctx.store.scan_prefix(keys.log_prefix(str(nname)))
        ]
        undone = {e.detail.get("cascade_id") for e in log if e.operation == "undrop namespace"}
        found = [
            (i, decode(TrashRecord, i.value, i.key))
            for i in self.ctx.store.scan_prefix(keys.trash_prefix(f"{nname}/"))
        ]
        found = [
            (i, r)
            for i, r in found
            if r.kind == "namespace" and r.namespaces and r.namespaces[0] == me and r.cascade_id not in undone
        ]
        return found[-1] if found else None

    def _file_cascade(
        self,
        nname: NamespaceName,
        spaces: list[tuple[NamespaceRecord, Item]],
        tables: list[TableRecord],
        who: Principal,
        purge: bool,
        root: Item,
    ) -> tuple[Item, TrashRecord]:
        """File the cascade's namespace trash record: the undo list (the subtree's namespaces,
        their policies and the trash keys its tables will get).

        The same transaction rewrites the marked root, conditional on the revision this run
        saw: two runs of one cascade (a retry while the first attempt still runs) cannot both
        file; the one that loses continues under the winner's record."""
        cascade_id = new_id()
        actor = self.ctx.actor(None, who)
        grace = self.policies.effective_policy(str(nname)).policy.trash_grace
        dropped_at = self.ctx.clock.wall_ms()
        expires_at = dropped_at + (0 if purge else int(grace.total_seconds() * 1000))
        # Namespaces are marked, so their policies can no longer change: this copy is final.
        kept: dict[str, Any] = {}
        for record, _ in spaces:
            kept.update(self.policies.detach(record.name)[1])
        ns_trash = TrashRecord(
            kind="namespace",
            target=str(nname),
            dropped_at_ms=dropped_at,
            expires_at_ms=expires_at,
            dropped_by=actor,
            namespaces=[r.model_copy(update={"state": "active"}) for r, _ in spaces],
            table_trash_keys=[keys.trash(t.name, dropped_at, t.incarnation) for t in tables],
            cascade_id=cascade_id,
            policies=kept,
        )
        try:
            written = self.ctx.commit(
                [
                    Put(keys.trash(str(nname), dropped_at, cascade_id), ns_trash.encode(), ABSENT),
                    Put(root.key, root.value, root.revision),
                ],
                log=Log(
                    str(nname),
                    "drop namespace cascade",
                    actor,
                    commit_id=cascade_id,
                    detail={"tables": len(tables), "namespaces": len(spaces), "expires_at_ms": expires_at},
                ),
            )
        except ConditionFailed:
            other = self._filed_cascade(nname, decode(NamespaceRecord, root.value, root.key))
            if other is None:
                raise ConcurrentModification(f"namespace {nname} changed while being dropped") from None
            return other
        assert written[0] is not None
        return written[0], ns_trash

    def _detach_tables(
        self,
        nname: NamespaceName,
        tables: list[TableRecord],
        who: Principal,
        purge: bool,
        filed: tuple[Item, TrashRecord],
    ) -> InvalidTableState | None:
        """Move every table listed under the mark to the trash under the cascade's record
        ``filed`` (its drop time, deadline and cascade id), each conditional on that incarnation.
        No destructive storage call happens here unless ``purge``; a purge refused
        (``folder_claims``) is returned, its table left in the trash, for the caller to raise.

        ``filed`` may be the record of an interrupted attempt at this cascade: the tables it
        moved are no longer registered, the rest go under the same record, so a retried cascade
        leaves what an uninterrupted one leaves."""
        actor = self.ctx.actor(None, who)
        ns_item, ns_trash = filed
        cascade_id = ns_trash.cascade_id or ""
        dropped_at, expires_at = ns_trash.dropped_at_ms, ns_trash.expires_at_ms
        table_keys = [keys.trash(t.name, dropped_at, t.incarnation) for t in tables]
        missing = [k for k in table_keys if k not in ns_trash.table_trash_keys]
        if missing:  # none can land under the mark; should one have, it joins the undo list
            listed = [*ns_trash.table_trash_keys, *missing]
            try:
                self.ctx.store.compare_and_swap(
                    ns_item.key,
                    ns_item.revision,
                    ns_trash.model_copy(update={"table_trash_keys": listed}).encode(),
                )
            except ConditionFailed:
                raise ConcurrentModification(
                    f"the trash record of namespace {nname} changed while the "
                    "cascade was being finished; run the drop again"
                ) from None
        self.ctx.at("drop-namespace:filed")
        for table in tables:
            self.ctx.at("drop-namespace:table")
            # A table a racing single drop already took is left to that drop's own trash record.
            self.trash.detach_table(
                TableName.parse(table.name),
                table.incarnation,
                actor=actor,
                dropped_at=dropped_at,
                expires_at=expires_at,
                step="drop-namespace",
                cascade_id=cascade_id,
                skip_vanished=True,
            )
        if purge:
            try:
                self.trash.expire_trash(
                    now_ms=expires_at,
                    by=Provenance(principal=who),
                    only=[*ns_trash.table_trash_keys, *missing],
                )
            except InvalidTableState as exc:
                # A table put inside one's folder after the check: that one stays in the trash,
                # the cascade still ends (raised after its namespaces are removed).
                return exc
        return None

    def _refuse_overlaps(self, nname: NamespaceName, tables: list[TableRecord]) -> None:
        """InvalidTableState (``folder_claims``) when purging one of ``tables`` would delete
        another table's files: checked up front, since a refusal at expiry would leave the
        namespaces marked and the tables in the trash, a cascade no drop or undrop finishes."""
        for table in tables:
            refuse_overlap(self.ctx.store, table, f"purge {table.name} with namespace {nname}")

    def _unmark(self, marked: list[tuple[NamespaceRecord, Item]]) -> None:
        for record, item in marked:
            try:
                self.ctx.store.compare_and_swap(item.key, item.revision, record.encode())
            except ConditionFailed:
                pass

    def _subtree(
        self, nname: NamespaceName
    ) -> tuple[list[tuple[NamespaceRecord, Item]], list[tuple[TableRecord, Item]]]:
        """The namespace, its descendants (shallowest first) and every table in them."""
        root = self.ctx.store.get(keys.namespace(nname))
        if root is None:
            raise NamespaceNotFound(f"namespace {nname} does not exist")
        spaces = [(decode(NamespaceRecord, root.value, root.key), root)]
        spaces += [
            (decode(NamespaceRecord, i.value, i.key), i)
            for i in self.ctx.store.scan_prefix(keys.namespace(nname) + ".")
        ]
        spaces.sort(key=lambda pair: (pair[0].name.count("."), pair[0].name))
        # The subtree's tables are one key range (``ns.``'s, then ``ns/``'s): one scan, on
        # DynamoDB one query per bucket, not one per bucket for each namespace. Kept as the
        # namespaces listed here would have them, in their order (shallowest first).
        rank = {record.name: at for at, (record, _) in enumerate(spaces)}
        head = keys.tables_under([nname.project, nname.warehouse, *nname.path])
        found = [
            (decode(TableRecord, i.value, i.key), i)
            for i in self.ctx.store.scan_range(*keys.nested_and_own(head))
        ]
        tables = [(t, i) for t, i in found if t.name.rsplit(".", 1)[0] in rank]
        tables.sort(key=lambda pair: rank[pair[0].name.rsplit(".", 1)[0]])
        return spaces, tables
