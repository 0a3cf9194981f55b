"""Publishing branches into main: one table's branch, or the same-named branch of several
tables at once (write-audit-publish of a run that wrote several tables).

Publishing fast-forwards main to the branch's head in ONE registry transaction, under main's and
the branch's leases: main's new version records point at the branch's manifests, with their
dataset root (``VersionRecord.location``); main's table record now reads and writes at the
branch's root (``TableRecord.location``; ``folder`` keeps the table's folder); the branch
record is consumed. It is refused with BranchDiverged unless main is still at the version the
branch's line descends from. Why this design (and not a Lance commit on main that adopts the
branch's files): docs/governance.md, "Branches".

Several tables publish together or not at all: their leases are taken in sorted name order (two
publishes never deadlock), every table's records land in one registry transaction, and each new
head names the others' (``VersionRecord.transaction``), so a reader never holds one table
published and another not (``query.snapshot_transactions``). Each table's commit id is the
publish's with ``-t<i>`` appended (``i`` in sorted-name order), as ``catalog.transaction`` does.
"""

from __future__ import annotations

from contextlib import ExitStack
from dataclasses import dataclass

from lake_platform.catalog.branches import Branches
from lake_platform.catalog.context import CatalogContext, Log, check_commit_id
from lake_platform.catalog.provenance import UNSTATED, Provenance
from lake_platform.catalog.results import CommitResult
from lake_platform.errors import BranchDiverged, ConcurrentModification, ConditionFailed, InvalidInput
from lake_platform.naming import TableName
from lake_platform.registry import keys
from lake_platform.registry.records import BranchRecord, TableRecord, VersionRecord, decode
from lake_platform.registry.store import ABSENT, MAX_TRANSACT_OPS, Delete, Item, Op, Put

#: At most this many of the branch's versions become main's versions on publish (each is one
#: registry item, and DynamoDB takes 100 per transaction); beyond it only the head does.
PUBLISHED_VERSIONS = 80


@dataclass
class PlannedPublish:
    """One table's part of a publish: what it read under the leases and what it writes."""

    name: TableName
    record: TableRecord
    branch: BranchRecord
    copies: list[VersionRecord]
    moved: TableRecord
    table_rev: int
    branch_item: Item
    detail: dict[str, object]

    def ops(self) -> list[Op]:
        """Main's new version records, its head moved, the branch record consumed."""
        return [
            *(Put(keys.version(self.record.incarnation, v.version), v.encode(), ABSENT) for v in self.copies),
            Put(keys.table(self.name), self.moved.encode(), self.table_rev),
            Delete(self.branch_item.key, self.branch_item.revision),
        ]

    def log(self, actor: str, commit_id: str, run_id: str | None) -> Log:
        return Log(
            str(self.name),
            "publish",
            actor,
            commit_id,
            run_id,
            self.record.incarnation,
            self.record.current_version,
            self.branch.current_version,
            self.detail,
        )


class BranchPublish:
    def __init__(self, ctx: CatalogContext, branches: Branches) -> None:
        self.ctx = ctx
        self.branches = branches

    def publish_branch(self, name: str, branch: str, *, by: Provenance = UNSTATED) -> CommitResult:
        """Fast-forward main to the branch's head: one registry commit, logged ``publish``.
        BranchDiverged (409, ABORTED) when main moved since the branch's line left it; InvalidInput
        when the branch has no commit of its own. The branch is consumed: its line is main's now."""
        return self.publish_branches([name], branch, by=by, single=True)[0]

    def publish_branches(
        self, names: list[str], branch: str, *, by: Provenance = UNSTATED, single: bool = False
    ) -> list[CommitResult]:
        """Publish ``branch`` of every table in ``names`` into its main in ONE registry
        transaction: every main moves, or none does (the first refusal in name order is the
        error: BranchDiverged, InvalidInput, TableBranchNotFound, ...). One result per table,
        in sorted name order. ``single``: one table, whose commit id is the publish's own."""
        who = self.ctx.who(by.principal)
        tnames = sorted({str(TableName.parse(n)): TableName.parse(n) for n in names}.items())
        if not tnames:
            raise InvalidInput("name at least one table to publish")
        commit_id = check_commit_id(by.commit_id)
        ids = [commit_id] if single else [f"{commit_id}-t{i}" for i in range(len(tnames))]
        for _, tname in tnames:
            self.ctx.require_parent(tname)
            who.require(tname.project, "write", f"publish to {tname}")
        if by.commit_id is not None:
            replays = [self.ctx.replayed(i) for i in ids]
            if all(r is not None for r in replays):
                return [r for r in replays if r is not None]  # a retry that landed: nothing twice
        heads = [
            (tname, self.ctx.table(tname)[0], self.branches.branch(tname, branch)[0]) for _, tname in tnames
        ]
        with ExitStack() as held:
            leases = [
                (
                    held.enter_context(self.ctx.gate.hold(record.incarnation)),
                    held.enter_context(self.ctx.gate.hold(rec.incarnation)),
                )
                for _, record, rec in heads
            ]
            plans = [
                self._plan(tname, branch, record.incarnation, rec.incarnation) for tname, record, rec in heads
            ]
            if not single:  # each new head names the other tables' (a reader holds all or none)
                published = {str(p.name): p.branch.current_version for p in plans}
                for p in plans:
                    others = {n: v for n, v in published.items() if n != str(p.name)}
                    p.copies[-1] = p.copies[-1].model_copy(update={"transaction": others})
            actor = self.ctx.actor(by.actor, who)
            ops = [
                op
                for i, p in enumerate(plans)
                for op in [*p.ops(), *self.ctx.log_ops(p.log(actor, ids[i], by.run_id))]
            ]
            if len(ops) + 2 * len(plans) > MAX_TRANSACT_OPS:
                raise InvalidInput(
                    f"publishing {len(plans)} tables takes {len(ops) + 2 * len(plans)} registry operations, "
                    f"more than one registry transaction carries ({MAX_TRANSACT_OPS}); publish fewer at once"
                )
            self.ctx.at("publish:before-commit")
            with ExitStack() as fenced:
                fences = [fenced.enter_context(lease.fenced()) for pair in leases for lease in pair]
                try:
                    self.ctx.commit([*ops, *fences])
                except ConditionFailed:
                    raise ConcurrentModification(
                        f"a table or its branch {branch} changed while publishing; nothing was published"
                    ) from None
        for p in plans:  # the chain's own records are main's now (copied above) or superseded
            chain = [
                Delete(i.key, i.revision)
                for i in self.ctx.store.scan_prefix(keys.versions(p.branch.incarnation))
            ]
            if chain:
                self.ctx.commit(chain, chunked=True)
        return [
            CommitResult(ids[i], str(p.name), "publish", p.record.current_version, p.branch.current_version)
            for i, p in enumerate(plans)
        ]

    def _plan(self, tname: TableName, branch: str, incarnation: str, chain: str) -> PlannedPublish:
        """What publishing ``branch`` writes, read under main's lease (``incarnation``) and the
        branch's (``chain``): main's new version records (the branch's, re-keyed), main's head on
        the branch's line, the branch record consumed."""
        table_item = self.ctx.store.get(keys.table(tname))
        record, table_rev = self.ctx.table(tname, incarnation=incarnation, item=table_item)
        rec, branch_item = self.branches.branch(tname, branch)
        if rec.incarnation != chain:
            raise ConcurrentModification(
                f"branch {branch} of {tname} was made again meanwhile; nothing was published"
            )
        if record.current_version != rec.main_version:
            raise BranchDiverged(
                f"main of {tname} moved since branch {branch} was made: the branch's line leaves main "
                f"at version {rec.main_version}, main is at version {record.current_version} now; "
                "publishing would drop main's newer commits (no merge). Make a new branch from "
                "main's head and apply the change there"
            )
        if rec.current_version <= rec.main_version:
            raise InvalidInput(f"branch {branch} of {tname} has no commit of its own to publish")
        own = sorted(
            (
                decode(VersionRecord, i.value, i.key)
                for i in self.ctx.store.scan_prefix(keys.versions(rec.incarnation))
            ),
            key=lambda v: v.version,
        )
        own = [v for v in own if v.version > rec.main_version]
        if len(own) > PUBLISHED_VERSIONS:
            own = own[-1:]
        copies = [
            v.model_copy(
                update={"incarnation": record.incarnation, "tags": [], "location": v.location or rec.location}
            )
            for v in own
        ]
        moved = record.model_copy(
            update={
                "current_version": rec.current_version,
                "location": rec.location,
                "folder": record.folder_uri,
                "schema_ipc_b64": rec.schema_ipc_b64,
            }
        )
        detail: dict[str, object] = {
            "branch": branch,
            "lance_branch": rec.lance_branch,
            "versions": [v.version for v in own],
        }
        return PlannedPublish(tname, record, rec, copies, moved, table_rev, branch_item, detail)
