"""Renaming a table: one registry transaction, no data moved.

A table's location is its incarnation's (``<root>/<namespace>/<table>-<incarnation>.lance``,
assigned once), so a rename only moves the registration: the table record to the new name
(same incarnation, versions, tags, lease), its policy record and its branch records
(``branch_moves``) with it, and a commit-log entry under the new name naming the old one. It is
taken under the table's lease and conditional on the record not moving, the new name being
free and the new namespace still being there. Within one warehouse only: the data stays under
that warehouse's root. Admin, like a drop (the old name stops resolving); a protected table is
not renamed.
"""

from __future__ import annotations

from lake_platform.catalog import branch_moves
from lake_platform.catalog import transaction_recovery as recovery
from lake_platform.catalog.context import CatalogContext, Log, check_commit_id
from lake_platform.catalog.policies import Policies
from lake_platform.catalog.provenance import UNSTATED, Provenance
from lake_platform.catalog.results import CommitResult
from lake_platform.errors import (
    ConcurrentModification,
    ConditionFailed,
    InvalidInput,
    NamespaceNotFound,
    Protected,
    TableAlreadyExists,
)
from lake_platform.naming import TableName
from lake_platform.registry import keys
from lake_platform.registry.store import ABSENT, Check, Delete, Op, Put


class Renames:
    def __init__(self, ctx: CatalogContext, policies: Policies) -> None:
        self.ctx = ctx
        self.policies = policies

    def rename_table(
        self, name: str, new_name: str, *, detail: dict[str, object] | None = None, by: Provenance = UNSTATED
    ) -> CommitResult:
        """``detail`` goes into the log entry (an idempotent request's digest); ``by.commit_id``
        that landed already as this rename (checked again under the lease: sent twice at once)
        answers it, nothing renamed again."""
        who = self.ctx.who(by.principal)
        tname, target = TableName.parse(name), TableName.parse(new_name)
        if target.warehouse_name != tname.warehouse_name:
            raise InvalidInput(f"a table is renamed within its warehouse ({tname.warehouse_name})")
        if target == tname:
            raise InvalidInput(f"{tname} already has that name")
        self.ctx.require_parent(tname, who=who)
        parent = self.ctx.require_parent(target, who=who)
        who.require(tname.project, "admin", f"rename table {tname}")
        record, _ = self.ctx.table(tname)
        if record.protected:
            raise Protected(f"table {tname} is protected; unprotect it to rename it")
        self.ctx.at("rename:resolved")
        if self.ctx.store.get(keys.table(target)) is not None:
            raise TableAlreadyExists(f"table {target} already exists")
        # Refused before the lease (a branch name the target's dropped table keeps, too many
        # branches); read again under it for the revisions the move is conditional on.
        branch_moves.move_ops(self.ctx.store, tname, target, record.incarnation)
        commit_id = check_commit_id(by.commit_id)
        with self.ctx.gate.hold(record.incarnation) as lease:
            first = (
                self.ctx.replayed(commit_id, table=str(target), operation="rename") if by.commit_id else None
            )
            if first is not None:
                return first
            record, revision = self.ctx.table(tname, incarnation=record.incarnation)
            # A multi-table commit's version above the head is completed (or cleared) first: its
            # record names the old name, so a roll-forward after the rename would not find it.
            if recovery.settle_above(self.ctx.store, record, keys.table(tname), f"table {tname}"):
                record, revision = self.ctx.table(tname, incarnation=record.incarnation)
            if record.protected:  # protected since the check above (set_protected takes no lease)
                raise Protected(f"table {tname} is protected; unprotect it to rename it")
            policy_ops, kept = self.policies.detach(str(tname))
            branch_ops = branch_moves.move_ops(self.ctx.store, tname, target, record.incarnation)
            with lease.fenced() as fence:
                ops: list[Op] = [
                    Delete(keys.table(tname), revision),
                    Put(keys.table(target), record.model_copy(update={"name": str(target)}).encode(), ABSENT),
                    Check(parent.key, parent.revision),
                    fence,
                    *policy_ops,
                    *self.policies.restore(kept, str(tname), str(target)),
                    *branch_ops,
                ]
                entry = Log(
                    str(target),
                    "rename",
                    self.ctx.actor(by.actor, who),
                    commit_id=commit_id,
                    incarnation=record.incarnation,
                    from_version=record.current_version,
                    to_version=record.current_version,
                    detail={**(detail or {}), "from": str(tname)},
                )
                try:
                    self.ctx.commit(ops, log=entry)
                except ConditionFailed as exc:
                    if exc.key == keys.table(target):
                        raise TableAlreadyExists(f"table {target} already exists") from None
                    if exc.key == parent.key:
                        raise NamespaceNotFound(
                            f"namespace {target.namespace_name} changed during the rename"
                        ) from None
                    raise ConcurrentModification(
                        f"table {tname} changed while being renamed; nothing was renamed"
                    ) from None
        return CommitResult(commit_id, str(target), "rename", record.current_version, record.current_version)
