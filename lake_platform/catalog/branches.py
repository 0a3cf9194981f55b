"""Branches of a table: create, list, open, delete (into the trash), undrop, purge.

A branch is a registry object (``BranchRecord`` at ``brn/<table>/<branch>``) with a version chain
of its own: its ``incarnation`` is a chain id keying its version records and its write lease, so
it has its own compare-and-swap head and its own writers, and a write to it never moves main. Its
data lives in Lance's branch dataset ``<table folder>/tree/<lance branch>``, which Lance made by
``create_branch``: one manifest referencing the parent's files through a base path, and a small
ref Lance's cleanup honours. Creating a branch copies no data file.

Writes and publishing are ``branch_writes``; the model and its guarantees are in
docs/governance.md ("Branches").
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from lake_platform.catalog.context import CatalogContext, Log, check_commit_id
from lake_platform.catalog.policies import Policies
from lake_platform.catalog.principals import Principal
from lake_platform.catalog.provenance import UNSTATED, Provenance
from lake_platform.catalog.reads import Reads, TableSnapshot
from lake_platform.catalog.results import CommitResult
from lake_platform.errors import (
    ConditionFailed,
    InvalidInput,
    Protected,
    TableBranchAlreadyExists,
    TableBranchNotFound,
    TableTagNotFound,
    TableVersionNotFound,
)
from lake_platform.naming import TableName, check_segment
from lake_platform.registry import keys
from lake_platform.registry.records import BranchRecord, TableRecord, VersionRecord, decode, new_id
from lake_platform.registry.store import ABSENT, Check, Delete, Item, Op, Put

#: The name of the table's own line: never a branch's.
MAIN = "main"


@dataclass(frozen=True)
class BranchInfo:
    """A branch as listed: its head, where it was made from, and its state."""

    table: str
    branch: str
    version: int
    parent: str  # "main" or the parent branch's name
    parent_version: int
    main_version: int
    state: str
    created_at_ms: int
    created_by: str
    expires_at_ms: int | None = None

    def to_dict(self) -> dict[str, object]:
        return asdict(self)


class Branches:
    def __init__(self, ctx: CatalogContext, reads: Reads, policies: Policies) -> None:
        self.ctx = ctx
        self.reads = reads
        self.policies = policies

    # -- reading ---------------------------------------------------------------------------------

    def branch(self, tname: TableName, branch: str, *, trashed: bool = False) -> tuple[BranchRecord, Item]:
        """The branch of the table's current incarnation (TableBranchNotFound if there is none,
        or it is in the trash unless ``trashed``)."""
        check_segment(branch, "branch name")
        record, _ = self.ctx.table(tname)
        item = self.ctx.store.get(keys.branch(tname, branch))
        rec = decode(BranchRecord, item.value, item.key) if item is not None else None
        if rec is None or rec.table_incarnation != record.incarnation:
            raise TableBranchNotFound(f"no branch {branch} on {tname}")
        if rec.state != "active" and not trashed:
            raise TableBranchNotFound(f"branch {branch} of {tname} is in the trash (undrop it to use it)")
        return rec, item

    def list_branches(
        self, name: str, *, include_trashed: bool = False, by: Provenance = UNSTATED
    ) -> list[BranchInfo]:
        """The table's branches by name (registry only)."""
        who = self.ctx.who(by.principal)
        tname = TableName.parse(name)
        self.ctx.readable(who, tname)
        record, _ = self.ctx.table(tname)
        found = [
            decode(BranchRecord, i.value, i.key) for i in self.ctx.store.scan_prefix(keys.branches_of(tname))
        ]
        chains = {b.incarnation: b.branch for b in found}
        return [
            _info(b, chains)
            for b in found
            if b.table_incarnation == record.incarnation and (include_trashed or b.state == "active")
        ]

    def open_branch(
        self, name: str, branch: str, version: int | None = None, *, by: Provenance = UNSTATED
    ) -> TableSnapshot:
        """Open a registered version of the branch (its head by default)."""
        who = self.ctx.who(by.principal)
        tname = TableName.parse(name)
        self.ctx.readable(who, tname)
        if version is not None and (isinstance(version, bool) or not isinstance(version, int) or version < 1):
            raise InvalidInput(f"invalid version {version!r}")
        rec, _ = self.branch(tname, branch)
        target = version or rec.current_version
        if version is not None and (version > rec.current_version or version < rec.parent_version):
            raise TableVersionNotFound(f"version {version} of branch {branch} of {tname} does not exist")
        return self.reads.snapshot(tname, rec, target)

    # -- creating --------------------------------------------------------------------------------

    def create_branch(
        self,
        name: str,
        branch: str,
        *,
        from_version: int | None = None,
        from_tag: str | None = None,
        from_branch: str | None = None,
        by: Provenance = UNSTATED,
    ) -> BranchInfo:
        """Make ``branch`` of the table from a version (default: the head) of main or of
        ``from_branch``, or from a tag of main. Copies no data file: Lance writes one manifest
        and a ref; the registry commits the branch record and its first version record."""
        from lake_platform.engine import branches as engine_branches

        who = self.ctx.who(by.principal)
        tname = TableName.parse(name)
        check_segment(branch, "branch name")
        if branch == MAIN:
            raise InvalidInput("'main' names the table's own line; choose another branch name")
        if from_version is not None and (
            isinstance(from_version, bool) or not isinstance(from_version, int) or from_version < 1
        ):
            raise InvalidInput(f"invalid version {from_version!r}")
        if from_tag is not None:
            check_segment(from_tag, "tag name")
            if from_version is not None or from_branch is not None:
                raise InvalidInput("a branch is made from a tag (of main) or from a version, not both")
        if from_branch is not None:
            check_segment(from_branch, "branch name")
        commit_id = check_commit_id(by.commit_id)
        self.ctx.require_parent(tname)
        who.require(tname.project, "write", f"branch {tname}")
        record, _ = self.ctx.table(tname)
        existing = self.ctx.store.get(keys.branch(tname, branch))
        if (
            existing is not None
            and decode(BranchRecord, existing.value).table_incarnation == record.incarnation
        ):
            raise TableBranchAlreadyExists(
                f"branch {branch} of {tname} already exists"
                + ("" if decode(BranchRecord, existing.value).state == "active" else " (in the trash)")
            )
        parent: TableRecord = record
        if from_branch is not None and from_branch != MAIN:
            parent, _ = self.branch(tname, from_branch)
        self._source_version(tname, parent, from_version, from_tag)  # refused before any lease
        with self.ctx.gate.hold(parent.incarnation) as lease:
            # Under the parent line's lease: its cleanup cannot take the version away meanwhile.
            table_item = self.ctx.store.get(keys.table(tname))
            record, table_rev = self.ctx.table(tname, incarnation=record.incarnation, item=table_item)
            if isinstance(parent, BranchRecord):
                parent, _ = self.branch(tname, parent.branch)
            else:
                parent = record
            version = self._source_version(tname, parent, from_version, from_tag)
            root = self.reads.snapshot(tname, parent, version).record.location  # the version's line
            chain = new_id()
            lance_branch = f"{branch}-{chain[:12]}"
            storage = self.ctx.storage(record.folder_uri)
            self.ctx.at("branch:before-engine")
            made = engine_branches.create_branch(root, lance_branch, version, storage)
            main_version = parent.main_version if isinstance(parent, BranchRecord) else version
            actor = self.ctx.actor(by.actor, who)
            rec = BranchRecord(
                name=str(tname),
                incarnation=chain,
                location=made.location,
                folder=record.folder_uri,
                current_version=version,
                schema_ipc_b64=parent.schema_ipc_b64,
                created_by=actor,
                branch=branch,
                table_incarnation=record.incarnation,
                lance_branch=lance_branch,
                parent_chain=parent.incarnation if isinstance(parent, BranchRecord) else None,
                parent_version=version,
                main_version=main_version,
            )
            first = VersionRecord(
                incarnation=chain,
                version=version,
                manifest_path=made.manifest_path,
                manifest_size=made.manifest_size,
                naming_scheme="V2",
                commit_id=commit_id,
                location=made.location,
            )
            ops: list[Op] = [
                Put(keys.branch(tname, branch), rec.encode(), existing.revision if existing else ABSENT),
                Put(keys.version(chain, version), first.encode(), ABSENT),
                Check(keys.table(tname), table_rev),
            ]
            detail: dict[str, object] = {
                "branch": branch,
                "parent": from_branch or MAIN,
                "lance_branch": lance_branch,
            }
            if from_tag is not None:
                detail["tag"] = from_tag
            try:
                self.ctx.record(
                    Log(
                        str(tname),
                        "branch-create",
                        actor,
                        commit_id,
                        by.run_id,
                        chain,
                        version,
                        version,
                        detail,
                    ),
                    ops=ops,
                    lease=lease,
                )
            except ConditionFailed:
                engine_branches.delete_branch(record.folder_uri, lance_branch, storage)
                raise TableBranchAlreadyExists(f"branch {branch} of {tname} was made concurrently") from None
        return _info(rec, {parent.incarnation: from_branch} if from_branch else {})

    def _source_version(
        self, tname: TableName, parent: TableRecord, from_version: int | None, from_tag: str | None
    ) -> int:
        if from_tag is not None:
            for item in self.ctx.store.scan_prefix(keys.versions(parent.incarnation)):
                ver = decode(VersionRecord, item.value, item.key)
                if from_tag in ver.tags:
                    return ver.version
            raise TableTagNotFound(f"no tag {from_tag} on {tname}")
        version = from_version or parent.current_version
        if (
            version > parent.current_version
            or self.ctx.store.get(keys.version(parent.incarnation, version)) is None
        ):
            raise TableVersionNotFound(f"version {version} of {tname} does not exist (or was cleaned up)")
        return version

    # -- deleting, undropping, purging -----------------------------------------------------------

    def delete_branch(
        self, name: str, branch: str, *, force: bool = False, purge: bool = False, by: Provenance = UNSTATED
    ) -> CommitResult:
        """Move the branch into the trash (recoverable by ``undrop_branch`` until the table's
        ``trash_grace`` passes; ``purge`` or a zero grace removes it at once). Refused on a
        protected table unless ``force``, as drops are."""
        who = self.ctx.who(by.principal)
        tname = TableName.parse(name)
        check_segment(branch, "branch name")
        who.require(tname.project, "write", f"delete branches of {tname}")
        record, _ = self.ctx.table(tname)
        if record.protected and not force:
            raise Protected(f"table {tname} is protected; unprotect it or pass force")
        rec, item = self.branch(tname, branch)
        grace = self.policies.effective_policy(str(tname)).policy.trash_grace
        destroy = purge or grace.total_seconds() == 0
        now = self.ctx.clock.wall_ms()
        actor = self.ctx.actor(by.actor, who)
        trashed = rec.model_copy(
            update={
                "state": "trashed",
                "dropped_at_ms": now,
                "expires_at_ms": now + (0 if destroy else int(grace.total_seconds() * 1000)),
                "dropped_by": actor,
            }
        )
        commit_id = check_commit_id(by.commit_id)
        with self.ctx.gate.hold(rec.incarnation) as lease:
            try:
                self.ctx.record(
                    Log(
                        str(tname),
                        "branch-delete",
                        actor,
                        commit_id,
                        by.run_id,
                        rec.incarnation,
                        rec.current_version,
                        None,
                        {"branch": branch, "expires_at_ms": trashed.expires_at_ms},
                    ),
                    ops=[Put(item.key, trashed.encode(), item.revision)],
                    lease=lease,
                )
            except ConditionFailed:
                raise TableBranchNotFound(f"branch {branch} of {tname} changed meanwhile; retry") from None
        if destroy:
            self.expire_branches(now_ms=now, only=[item.key], by=Provenance(principal=who, actor=actor))
        return CommitResult(commit_id, str(tname), "branch-delete", rec.current_version, None)

    def undrop_branch(self, name: str, branch: str, *, by: Provenance = UNSTATED) -> BranchInfo:
        """Bring a deleted branch back from the trash, as it was."""
        who = self.ctx.who(by.principal)
        tname = TableName.parse(name)
        who.require(tname.project, "write", f"undrop branches of {tname}")
        rec, item = self.branch(tname, branch, trashed=True)
        if rec.state != "trashed":
            raise TableBranchAlreadyExists(
                f"branch {branch} of {tname} is not in the trash"
                if rec.state == "active"
                else f"branch {branch} of {tname} is being purged"
            )
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
                    {"branch": branch},
                ),
                ops=[Put(item.key, back.encode(), item.revision)],
            )
        except ConditionFailed:
            raise TableBranchNotFound(f"branch {branch} of {tname} was purged meanwhile") from None
        return _info(back, {})

    def expire_branches(
        self, now_ms: int | None = None, *, only: list[str] | None = None, by: Provenance = UNSTATED
    ) -> list[CommitResult]:
        """Purge every trashed branch whose grace has passed: its Lance branch (its own files)
        first, then its version records and its record, in one commit with the log entry. A
        branch another branch was made from keeps its files (Lance refuses while they are
        shared) and stays in the trash until a later expiry."""
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
            result = self._purge(item, rec, who, by.actor)
            if result is not None:
                done.append(result)
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


def _info(rec: BranchRecord, chains: dict[str, str]) -> BranchInfo:
    parent = MAIN if rec.parent_chain is None else chains.get(rec.parent_chain, rec.parent_chain)
    return BranchInfo(
        table=rec.name,
        branch=rec.branch,
        version=rec.current_version,
        parent=parent,
        parent_version=rec.parent_version,
        main_version=rec.main_version,
        state=rec.state,
        created_at_ms=rec.created_at_ms,
        created_by=rec.created_by,
        expires_at_ms=rec.expires_at_ms,
    )
