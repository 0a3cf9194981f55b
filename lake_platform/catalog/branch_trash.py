"""Deleting a branch is recoverable like a drop: into the trash (its record marked, its data and
version records kept), undrop brings it back, expiry purges it once the table's ``trash_grace``
has passed (Lance's branch with its own files first, then its registry records). Deleting is
refused on a protected table unless forced, as drops are.
"""

from __future__ import annotations

from lake_platform.catalog.branches import Branches, BranchInfo
from lake_platform.catalog.context import CatalogContext, Log, check_commit_id
from lake_platform.catalog.lease import Lease
from lake_platform.catalog.policies import Policies
from lake_platform.catalog.principals import Principal
from lake_platform.catalog.provenance import UNSTATED, Provenance
from lake_platform.catalog.results import CommitResult
from lake_platform.catalog.trash import failed
from lake_platform.errors import (
    ConcurrentModification,
    ConditionFailed,
    InvalidTableState,
    Protected,
    TableBranchAlreadyExists,
    TableBranchNotFound,
    TrashExpiryFailed,
)
from lake_platform.naming import TableName, check_segment
from lake_platform.registry import keys
from lake_platform.registry.records import BranchRecord, decode, new_id
from lake_platform.registry.store import Check, Delete, Item, Put


class BranchTrash:
    def __init__(self, ctx: CatalogContext, branches: Branches, policies: Policies) -> None:
        self.ctx = ctx
        self.branches = branches
        self.policies = policies

    def delete_branch(
        self,
        name: str,
        branch: str,
        *,
        force: bool = False,
        purge: bool = False,
        detail: dict[str, object] | None = None,
        by: Provenance = UNSTATED,
    ) -> CommitResult:
        """Move the branch into the trash (recoverable by ``undrop_branch`` until the table's
        ``trash_grace`` passes; ``purge`` (admin) or a zero grace removes it at once). Refused
        on a protected table unless ``force``, as drops are. ``detail`` goes into the log entry
        (an idempotent request's digest); ``by.commit_id`` that already landed as this delete
        answers it, nothing changed."""
        who = self.ctx.who(by.principal)
        tname = TableName.parse(name)
        check_segment(branch, "branch name")
        who.require(tname.project, "write", f"delete branches of {tname}")
        if purge:  # skips the trash's grace: destroys versions, as deleting versions does
            who.require(tname.project, "admin", f"purge branches of {tname}")
        commit_id = check_commit_id(by.commit_id)

        def landed() -> CommitResult | None:
            if by.commit_id is None:
                return None
            return self.ctx.replayed(commit_id, table=str(tname), operation="branch-delete", branch=branch)

        first = landed()
        if first is not None:
            return first
        record, _ = self.ctx.table(tname)
        if record.protected and not force:
            raise Protected(f"table {tname} is protected; unprotect it or pass force")
        self.ctx.at("branch-delete:resolved")
        rec, item = self.branches.branch(tname, branch)
        grace = self.policies.effective_policy(str(tname)).policy.trash_grace
        destroy = purge or grace.total_seconds() == 0
        now = self.ctx.clock.wall_ms()
        actor = self.ctx.actor(by.actor, who)
        trashed = rec.model_copy(
            update={
                # A purge files it claimed, as drop --purge files a table: no undrop can take
                # it back between this commit and the expiry that finishes it (or, if this
                # process dies in between, the next one).
                "state": "purging" if destroy else "trashed",
                "dropped_at_ms": now,
                "expires_at_ms": now + (0 if destroy else int(grace.total_seconds() * 1000)),
                "dropped_by": actor,
            }
        )
        with self.ctx.gate.hold(rec.incarnation) as lease:
            first = landed()  # it may have landed while this waited (sent twice at once)
            if first is not None:
                return first
            # Protection again, as it is now (set_protected takes no lease), and the commit
            # conditional on the table record as read here: a protect landing after this look
            # fails the commit, and the look is made again.
            table_key = keys.table(tname)
            for _ in range(3):
                record, revision = self.ctx.table(tname)
                if record.protected and not force:
                    raise Protected(f"table {tname} is protected; unprotect it or pass force")
                try:
                    self._file(tname, branch, trashed, item, commit_id, by, actor, detail, lease, revision)
                    break
                except ConditionFailed as exc:
                    if exc.key != table_key:
                        raise TableBranchNotFound(
                            f"branch {branch} of {tname} changed meanwhile; retry"
                        ) from None
            else:
                raise ConcurrentModification(f"table {tname} kept changing; branch {branch} was not deleted")
        self.ctx.at("branch-delete:filed")
        if destroy:
            self.expire_branches(now_ms=now, only=[item.key], by=Provenance(principal=who, actor=actor))
        return CommitResult(commit_id, str(tname), "branch-delete", rec.current_version, None)

    def _file(
        self,
        tname: TableName,
        branch: str,
        trashed: BranchRecord,
        item: Item,
        commit_id: str,
        by: Provenance,
        actor: str,
        detail: dict[str, object] | None,
        lease: Lease,
        table_revision: int,
    ) -> None:
        """The delete's commit: the branch record marked trashed, conditional on it and on the
        table record at ``table_revision``."""
        self.ctx.record(
            Log(
                str(tname),
                "branch-delete",
                actor,
                commit_id,
                by.run_id,
                trashed.incarnation,
                trashed.current_version,
                None,
                {**(detail or {}), "branch": branch, "expires_at_ms": trashed.expires_at_ms},
            ),
            ops=[Put(item.key, trashed.encode(), item.revision), Check(keys.table(tname), table_revision)],
            lease=lease,
        )

    def undrop_branch(
        self, name: str, branch: str, *, detail: dict[str, object] | None = None, by: Provenance = UNSTATED
    ) -> BranchInfo:
        """Bring a deleted branch back from the trash, as it was. ``detail`` goes into the log
        entry (an idempotent request's key and digest), made as ``by.commit_id`` when given."""
        who = self.ctx.who(by.principal)
        tname = TableName.parse(name)
        who.require(tname.project, "write", f"undrop branches of {tname}")
        rec, item = self.branches.branch(tname, branch, trashed=True)
        if rec.state == "active":
            raise TableBranchAlreadyExists(f"branch {branch} of {tname} is not in the trash")
        if rec.state != "trashed":  # purging: its files may be half gone; nothing to bring back
            raise InvalidTableState(f"branch {branch} of {tname} is being purged; it cannot be undropped")
        back = rec.model_copy(
            update={"state": "active", "dropped_at_ms": None, "expires_at_ms": None, "dropped_by": None}
        )
        try:
            self.ctx.record(
                Log(
                    str(tname),
                    "branch-undrop",
                    self.ctx.actor(by.actor, who),
                    check_commit_id(by.commit_id),
                    by.run_id,
                    rec.incarnation,
                    None,
                    rec.current_version,
                    {**(detail or {}), "branch": branch},
                ),
                ops=[Put(item.key, back.encode(), item.revision)],
            )
        except ConditionFailed:
            raise TableBranchNotFound(f"branch {branch} of {tname} was purged meanwhile") from None
        return self.branches.info(tname, back)

    def expire_branches(
        self,
        now_ms: int | None = None,
        *,
        only: list[str] | None = None,
        by: Provenance = UNSTATED,
        failures: list[tuple[str, str]] | None = None,
    ) -> list[CommitResult]:
        """Purge every trashed branch whose grace has passed: its Lance branch (its own files)
        first, then its version records and its record, in one commit with the log entry. A
        branch another branch was made from keeps its files (Lance refuses while they are
        shared) and stays in the trash until a later expiry. A branch whose purge fails stays
        claimed for the next expiry and the others go on: each failure is added to ``failures``
        (trash expiry raises for them all), or raised as TrashExpiryFailed at the end."""
        failing: list[tuple[str, str]] = [] if failures is None else failures
        before = len(failing)
        who = self.ctx.who(by.principal)
        now = self.ctx.clock.wall_ms() if now_ms is None else now_ms
        items = (
            [self.ctx.store.get(k) for k in only]
            if only is not None
            else list(self.ctx.store.scan_prefix(keys.all_branches()))
        )
        done = []
        for item in items:
            if item is None:
                continue
            rec = decode(BranchRecord, item.value, item.key)
            if (
                rec.state == "active"
                or (rec.expires_at_ms or 0) > now
                or not who.can(rec.name.split(".")[0], "admin")
            ):
                continue
            try:
                result = self._purge(item, rec, who, by.actor)
            except Exception as exc:  # noqa: BLE001 - one branch's failure must not starve the rest
                failing.append(failed(f"{rec.name} branch {rec.branch}", exc))
                continue
            if result is not None:
                done.append(result)
        if failures is None and len(failing) > before:
            raise TrashExpiryFailed(
                f"branch expiry purged {len(done)} and could not purge {len(failing)}: "
                + "; ".join(f"{target}: {why}" for target, why in failing)
                + ". Each stays in the trash and the next expiry tries it again",
                failing,
            )
        return done

    def _purge(self, item: Item, rec: BranchRecord, who: Principal, actor: str | None) -> CommitResult | None:
        from lake_platform.engine import branches as engine_branches

        if rec.state == "trashed":
            try:  # claimed: an undrop refuses from here on
                item = self.ctx.store.compare_and_swap(
                    item.key, item.revision, rec.model_copy(update={"state": "purging"}).encode()
                )
            except ConditionFailed:
                return None
        self.ctx.at("branch-purge:claimed")
        if not engine_branches.delete_branch(
            rec.folder_uri, rec.lance_branch, self.ctx.storage(rec.folder_uri)
        ):
            return None  # another branch builds on its files: kept until that one is gone
        versions = [
            Delete(i.key, i.revision) for i in self.ctx.store.scan_prefix(keys.versions(rec.incarnation))
        ]
        commit_id = new_id()
        try:
            self.ctx.commit(
                [*versions, Delete(item.key, item.revision)],
                log=Log(
                    rec.name,
                    "branch-purge",
                    self.ctx.actor(actor, who),
                    commit_id,
                    None,
                    rec.incarnation,
                    rec.current_version,
                    None,
                    {"branch": rec.branch},
                ),
                chunked=True,
            )
        except ConditionFailed:
            return None  # another expiry finished it first
        return CommitResult(commit_id, rec.name, "branch-purge", rec.current_version, None)
