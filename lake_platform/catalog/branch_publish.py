"""Publishing branches into main: one table's branch, or the same-named branch of several
tables at once (write-audit-publish of a run that wrote several tables).

Publishing fast-forwards main to the branch's head in ONE registry transaction, under main's and
the branch's leases: main's new version records point at the branch's manifests, with their
dataset root (``VersionRecord.location``); main's table record now reads and writes at the
branch's root (``TableRecord.location``; ``folder`` keeps the table's folder); the branch
record is consumed. It is refused with BranchDiverged unless main is still at the version the
branch's line descends from. Why this design (and not a Lance commit on main that adopts the
branch's files): docs/governance.md, "Branches".

Every version the branch made since it left main becomes main's. When they do not all fit the
one transaction (the backend's ``max_transact_ops``: DynamoDB's 99 items; SQLite takes 10,000),
all but the head's are registered first, in batches fenced by both leases, as main's version
records ABOVE main's head: no reader reaches a version above the head it reads (reads, the
namespace's listings and DescribeTableVersion, time travel all stop at the head), so they are
invisible until the final transaction moves the head over them; all or nothing. A kill between
batches leaves only such unreachable records: a retry of the publish writes over them, the
publish removes any left above its new head, and main's next writer removes the one in its way
(``commit_conflicts``); a publish that fails removes its own.

Several tables publish together or not at all: their leases are taken in sorted name order (two
publishes never deadlock), every table's records land in one registry transaction, and each new
head names the others' (``VersionRecord.transaction``), so a reader never holds one table
published and another not (``query.snapshot_transactions``). Each table's commit id is the
publish's with ``-t<i>`` appended (``i`` in sorted-name order), as ``catalog.transaction`` does.

A publisher that knows which version of each branch it means (a write-audit-publish run: the
version its materialization recorded and its audit read) names it in ``expect``: checked under
the branch's lease, a branch written past it since (another writer's commit on the branch, a
restore of its line) is refused with InvalidTableState, nothing published, as the rows past it
were never audited; versions past it made by compaction alone (files rewritten, rows as they
were) are published with it.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from contextlib import ExitStack
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from lake_platform.catalog.branches import Branches
from lake_platform.catalog.context import CatalogContext, Log, check_commit_id
from lake_platform.catalog.provenance import UNSTATED, Provenance
from lake_platform.catalog.publish_weights import early_batches, fences, final_fits, too_large
from lake_platform.catalog.replays import Wanted
from lake_platform.catalog.results import CommitResult
from lake_platform.catalog.transaction_recovery import resolve_version
from lake_platform.errors import (
    BranchDiverged,
    ConcurrentModification,
    ConditionFailed,
    InvalidInput,
    InvalidTableState,
)
from lake_platform.naming import TableName, check_segment
from lake_platform.registry import keys
from lake_platform.registry.records import BranchRecord, TableRecord, VersionRecord, decode
from lake_platform.registry.store import ABSENT, Delete, Item, Op, Put, get_all

if TYPE_CHECKING:
    from lake_platform.catalog.lease import Lease

log = logging.getLogger(__name__)


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
    #: Main's version records above its head (an interrupted publish's), by version: revisions.
    above: dict[int, int] = field(default_factory=dict)
    #: The copies registered before the final transaction (above main's head, unreachable).
    early: list[VersionRecord] = field(default_factory=list)

    def put(self, ver: VersionRecord) -> Put:
        """One of main's new version records (over an interrupted publish's, if one is there)."""
        return Put(
            keys.version(self.record.incarnation, ver.version),
            ver.encode(),
            self.above.get(ver.version, ABSENT),
        )

    def ops(self) -> list[Op]:
        """Main's new version records, its head moved, the branch record consumed."""
        return [
            *(self.put(v) for v in self.copies),
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

    def publish_branch(
        self, name: str, branch: str, *, detail: dict[str, object] | None = None, by: Provenance = UNSTATED
    ) -> CommitResult:
        """Fast-forward main to the branch's head: one registry commit, logged ``publish``.
        BranchDiverged (409, ABORTED) when main moved since the branch's line left it; InvalidInput
        when the branch has no commit of its own. The branch is consumed: its line is main's now.
        ``detail`` goes into the log entry (an idempotent request's digest)."""
        return self.publish_branches([name], branch, detail=detail, by=by, single=True)[0]

    def publish_branches(
        self,
        names: list[str],
        branch: str,
        *,
        detail: dict[str, object] | None = None,
        by: Provenance = UNSTATED,
        single: bool = False,
        expect: Mapping[str, int] | None = None,
    ) -> list[CommitResult]:
        """Publish ``branch`` of every table in ``names`` into its main in ONE registry
        transaction: every main moves, or none does (the first refusal in name order is the
        error: BranchDiverged, InvalidInput, TableBranchNotFound, ...). One result per table,
        in sorted name order. ``single``: one table, whose commit id is the publish's own.
        ``expect``: table name -> the branch version the caller means (see the module docstring;
        a table it does not name publishes whatever head its branch has).
        ``by.commit_id`` that landed already (checked again under the leases: sent twice at
        once) answers its results, nothing published again."""
        who = self.ctx.who(by.principal)
        tnames = sorted({str(TableName.parse(n)): TableName.parse(n) for n in names}.items())
        if not tnames:
            raise InvalidInput("name at least one table to publish")
        commit_id = check_commit_id(by.commit_id)
        ids = [commit_id] if single else [f"{commit_id}-t{i}" for i in range(len(tnames))]
        parents = list(dict.fromkeys(self.ctx.parent_key(t) for _, t in tnames))
        found = dict(zip(parents, get_all(self.ctx.store, parents), strict=True))
        for _, tname in tnames:
            self.ctx.require_parent(tname, found[self.ctx.parent_key(tname)], who=who)
            who.require(tname.project, "write", f"publish to {tname}")

        def landed() -> list[CommitResult] | None:
            return self._landed([t for t, _ in tnames], branch, ids) if by.commit_id is not None else None

        first = landed()
        if first is not None:
            return first  # a retry that landed: nothing twice
        check_segment(branch, "branch name")
        # Every table and its branch in a request or two, not three reads a table.
        items = get_all(
            self.ctx.store, [k for _, t in tnames for k in (keys.table(t), keys.branch(t, branch))]
        )
        heads = [
            (
                tname,
                self.ctx.table(tname, item=items[2 * i])[0],
                self.branches.branch(tname, branch, read=(items[2 * i], items[2 * i + 1]))[0],
            )
            for i, (_, tname) in enumerate(tnames)
        ]
        self.ctx.gate.read_ahead(
            [inc for _, record, rec in heads for inc in (record.incarnation, rec.incarnation)]
        )
        with ExitStack() as held:
            leases = [
                (
                    held.enter_context(self.ctx.gate.hold(record.incarnation)),
                    held.enter_context(self.ctx.gate.hold(rec.incarnation)),
                )
                for _, record, rec in heads
            ]
            first = landed()  # it may have landed while this waited (sent twice at once)
            if first is not None:
                return first
            expected = {str(TableName.parse(n)): v for n, v in (expect or {}).items()}
            plans = [
                self._plan(tname, branch, record.incarnation, rec.incarnation, expected.get(str(tname)))
                for tname, record, rec in heads
            ]
            for p in plans:
                p.detail.update(detail or {})
            if not single:  # each new head names the other tables' (a reader holds all or none)
                published = {str(p.name): p.branch.current_version for p in plans}
                for p in plans:
                    others = {n: v for n, v in published.items() if n != str(p.name)}
                    p.copies[-1] = p.copies[-1].model_copy(update={"transaction": others})
            actor = self.ctx.actor(by.actor, who)
            leased = [lease for pair in leases for lease in pair]
            lease_keys = [lease.key for lease in leased]
            ops = self._final_ops(plans, actor, ids, by.run_id)
            # By count and by bytes (``publish_weights``): the heads alone in the final write.
            if not final_fits(self.ctx.store, ops, lease_keys):
                for p in plans:
                    p.early, p.copies = p.copies[:-1], p.copies[-1:]
                ops = self._final_ops(plans, actor, ids, by.run_id)
            if not final_fits(self.ctx.store, ops, lease_keys):  # before anything is written
                per_table = [
                    [
                        *self._final_ops([p], actor, [ids[i]], by.run_id),
                        *fences(lease_keys[2 * i : 2 * i + 2]),
                    ]
                    for i, p in enumerate(plans)
                ]
                raise too_large(self.ctx.store, per_table)
            self._register_early(plans, leased, branch)
            self.ctx.at("publish:before-commit")
            with ExitStack() as fenced:
                checks = [fenced.enter_context(lease.fenced()) for lease in leased]
                try:
                    self.ctx.commit([*ops, *checks])
                except ConditionFailed:  # definitely not landed (an unknown outcome keeps them)
                    self._remove_early(plans)
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
            # An interrupted publish's records above the head main has now: best effort (main's
            # next writer, no longer fenced off, may remove or replace one first).
            above = [
                Delete(keys.version(p.record.incarnation, v), rev)
                for v, rev in p.above.items()
                if v > p.branch.current_version
            ]
            try:
                if above:
                    self.ctx.commit(above, chunked=True)
            except ConditionFailed:
                log.info("a writer of %s cleared the records above its head first", p.name)
        return [
            CommitResult(ids[i], str(p.name), "publish", p.record.current_version, p.branch.current_version)
            for i, p in enumerate(plans)
        ]

    def _final_ops(
        self, plans: list[PlannedPublish], actor: str, ids: list[str], run_id: str | None
    ) -> list[Op]:
        return [
            op
            for i, p in enumerate(plans)
            for op in [*p.ops(), *self.ctx.log_ops(p.log(actor, ids[i], run_id))]
        ]

    def _register_early(self, plans: list[PlannedPublish], leases: list[Lease], branch: str) -> None:
        """Main's new version records that do not fit the final transaction, registered first
        in batches fenced by every lease (packed by count and bytes): above main's head, so no
        reader reaches them until the final transaction moves the head. A failed batch removes
        what landed before it."""
        puts = [p.put(v) for p in plans for v in p.early]
        for batch in early_batches(self.ctx.store, puts, [lease.key for lease in leases]) if puts else []:
            with ExitStack() as fenced:
                checks = [fenced.enter_context(lease.fenced()) for lease in leases]
                try:
                    results = self.ctx.store.transact([*batch, *checks])
                except ConditionFailed:
                    self._remove_early(plans)
                    raise ConcurrentModification(
                        f"a table or its branch {branch} changed while publishing; nothing was published"
                    ) from None
            for op, item in zip(batch, results, strict=False):
                if item is not None:
                    version = int(op.key.rpartition("/")[2])
                    plan = next(p for p in plans if op.key.startswith(keys.versions(p.record.incarnation)))
                    plan.above[version] = item.revision
            self.ctx.at("publish:batch-registered")

    def _remove_early(self, plans: list[PlannedPublish]) -> None:
        """Best effort, after the publish definitely failed: the records it registered above
        main's head (unreachable either way; the next publish or main writer removes what
        stays). Never after an unknown outcome: the final transaction may have landed."""
        for p in plans:
            doomed = [
                Delete(keys.version(p.record.incarnation, v.version), p.above[v.version])
                for v in p.early
                if v.version in p.above
            ]
            try:
                if doomed:
                    self.ctx.commit(doomed, chunked=True)
            except Exception:  # noqa: BLE001 - only tidying: they stay unreachable
                log.warning("could not remove the versions a failed publish of %s registered", p.name)

    def _plan(
        self, tname: TableName, branch: str, incarnation: str, chain: str, expect: int | None = None
    ) -> PlannedPublish:
        """What publishing ``branch`` writes, read under main's lease (``incarnation``) and the
        branch's (``chain``): main's new version records (the branch's, re-keyed), main's head on
        the branch's line, the branch record consumed."""
        table_item, branch_item = self.ctx.store.get_many([keys.table(tname), keys.branch(tname, branch)])
        record, table_rev = self.ctx.table(tname, incarnation=incarnation, item=table_item)
        rec, branch_item = self.branches.branch(tname, branch, read=(table_item, branch_item))
        if rec.incarnation != chain:
            raise ConcurrentModification(
                f"branch {branch} of {tname} was made again meanwhile; nothing was published"
            )
        own = self._own_line(tname, branch, record, rec, expect)
        above_items = list(
            self.ctx.store.scan_prefix(
                keys.versions(record.incarnation),
                start_after=keys.version(record.incarnation, record.current_version),
            )
        )
        # A multi-table commit's version above main's head is completed or cleared from its record
        # first (under main's lease): overwriting it would lose a committed table's version.
        head_key = keys.table(tname)
        for item in above_items:
            outcome = resolve_version(self.ctx.store, item, head_key, leased=True)
            if outcome == "pending":
                raise ConcurrentModification(
                    f"{item.key} belongs to a multi-table commit still being made; nothing was published"
                )
            if outcome is not None:
                return self._plan(tname, branch, incarnation, chain, expect)  # main's head or records changed
        above = {decode(VersionRecord, i.value, i.key).version: i.revision for i in above_items}
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
        return PlannedPublish(tname, record, rec, copies, moved, table_rev, branch_item, detail, above)

    def check_publishable(
        self, names: list[str], branch: str, *, expect: Mapping[str, int], by: Provenance = UNSTATED
    ) -> None:
        """What ``publish_branches`` (with ``by``'s commit id) refuses of ``branch`` of ``names``
        (main moved, no commit of its own, not at the ``expect``ed version), checked ahead,
        outside the leases: a caller publishing several branches checks them all before the
        first lands (the publish checks again under them). A publish that landed passes."""
        expected = {str(TableName.parse(n)): v for n, v in expect.items()}
        tables = sorted({str(TableName.parse(n)) for n in names})
        commit_id = check_commit_id(by.commit_id)
        if by.commit_id is not None and self._landed(
            tables, branch, [f"{commit_id}-t{i}" for i in range(len(tables))]
        ):
            return
        for name in tables:
            tname = TableName.parse(name)
            record = self.ctx.table(tname)[0]
            rec = self.branches.branch(tname, branch)[0]
            self._own_line(tname, branch, record, rec, expected.get(str(tname)))

    def _landed(self, tables: list[str], branch: str, ids: list[str]) -> list[CommitResult] | None:
        """The results of the publish whose commit ids are ``ids`` (one per table, sorted) when it
        landed, else None."""
        replays = self.ctx.replayed_all(
            [Wanted(i, t, "publish", branch) for i, t in zip(ids, tables, strict=True)]
        )
        return [r for r in replays if r is not None] if all(replays) else None

    def _own_line(
        self, tname: TableName, branch: str, record: TableRecord, rec: BranchRecord, expect: int | None
    ) -> list[VersionRecord]:
        """The branch's versions since it left main, in order, once it may be published into
        main (``record``): else BranchDiverged, InvalidInput, InvalidTableState."""
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
        if expect is not None:
            self._check_expected(tname, branch, rec, own, expect)
        return own

    def _check_expected(
        self, tname: TableName, branch: str, rec: BranchRecord, own: list[VersionRecord], expect: int
    ) -> None:
        """Refuse (InvalidTableState) a branch that is not at version ``expect``, or past it by
        more than compactions: what is published is what the publisher's writer recorded."""
        if not rec.main_version < expect <= rec.current_version:
            raise InvalidTableState(
                f"branch {branch} of {tname} is not at version {expect}, which its writer recorded: its "
                f"line runs from main's version {rec.main_version} to version {rec.current_version}; "
                "nothing was published"
            )
        for ver in own:
            if ver.version <= expect:
                continue
            marker = self.ctx.commit_landed(ver.commit_id) if ver.commit_id else None
            if marker is None or marker.operation != "compact":
                what = marker.operation if marker is not None else "no logged commit"
                raise InvalidTableState(
                    f"branch {branch} of {tname} moved past version {expect}, which its writer recorded: "
                    f"its version {ver.version} ({what}) was committed since, never audited with it; "
                    f"nothing was published (inspect the branch: lake table history {tname})"
                )
