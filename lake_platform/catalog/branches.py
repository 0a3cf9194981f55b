"""Branches of a table: create, list, describe, open.

A branch is a registry object (``BranchRecord`` at ``brn/<table>/<branch>``) with a version chain
of its own: its ``incarnation`` is a chain id keying its version records and its write lease, so
it has its own compare-and-swap head and its own writers, and a write to it never moves main. Its
data lives in Lance's branch dataset ``<table folder>/tree/<lance branch>`` (the branch's own name,
which stock clients open it by, when that is free in Lance), which Lance made by
``create_branch``: one manifest referencing the parent's files through a base path, and a small
ref Lance's cleanup honours. Creating a branch copies no data file.

Writes and publishing are ``branch_writes``, deleting, undropping and purging ``branch_trash``;
the model and its guarantees are in docs/governance.md ("Branches").
"""

from __future__ import annotations

from contextlib import ExitStack
from dataclasses import asdict, dataclass
from typing import Any

from lake_platform.catalog import branch_moves, branch_names
from lake_platform.catalog.context import UNREAD, CatalogContext, Log, Prefetched, check_commit_id
from lake_platform.catalog.pending import PendingCommit
from lake_platform.catalog.provenance import UNSTATED, Provenance
from lake_platform.catalog.reads import Reads, TableSnapshot
from lake_platform.errors import (
    ConcurrentModification,
    ConditionFailed,
    InvalidInput,
    TableBranchAlreadyExists,
    TableBranchNotFound,
    TableTagNotFound,
    TableVersionNotFound,
)
from lake_platform.naming import TableName, check_segment
from lake_platform.registry import keys
from lake_platform.registry.records import BranchRecord, TableRecord, VersionRecord, decode, new_id
from lake_platform.registry.store import ABSENT, Check, Item, MetaStore, Op, Put

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
    def __init__(self, ctx: CatalogContext, reads: Reads) -> None:
        self.ctx = ctx
        self.reads = reads

    # -- reading ---------------------------------------------------------------------------------

    def branch(
        self,
        tname: TableName,
        branch: str,
        *,
        trashed: bool = False,
        read: tuple[Prefetched, Prefetched] = (UNREAD, UNREAD),
    ) -> tuple[BranchRecord, Item]:
        """The branch of the table's current incarnation (TableBranchNotFound if there is none,
        or it is in the trash unless ``trashed``). ``read``: the table's and the branch's
        registry items if the caller read them already (``CatalogContext.table``'s ``item``)."""
        check_segment(branch, "branch name")
        record, _ = self.ctx.table(tname, item=read[0])
        item = self.ctx.store.get(keys.branch(tname, branch)) if read[1] is UNREAD else read[1]
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
            branch_info(b, chains)
            for b in found
            if b.table_incarnation == record.incarnation and (include_trashed or b.state == "active")
        ]

    def info(self, tname: TableName, rec: BranchRecord) -> BranchInfo:
        """``rec`` as ``list_branches`` shows it: a parent branch by its name, not its chain id
        (one scan of the table's branches, only for a branch made from another)."""
        if rec.parent_chain is None:
            return branch_info(rec, {})
        found = (
            decode(BranchRecord, i.value, i.key) for i in self.ctx.store.scan_prefix(keys.branches_of(tname))
        )
        return branch_info(rec, {b.incarnation: b.branch for b in found})

    def open_branch(
        self, name: str, branch: str, version: int | None = None, *, by: Provenance = UNSTATED
    ) -> TableSnapshot:
        """Open a registered version of the branch (its head by default)."""
        who = self.ctx.who(by.principal)
        tname = TableName.parse(name)
        self.ctx.readable(who, tname)
        if version is not None and not keys.valid_version(version):
            raise InvalidInput(f"invalid version {version!r}")
        rec, _ = self.branch(tname, branch)
        target = version or rec.current_version
        if version is not None and (version > rec.current_version or version < rec.parent_version):
            raise TableVersionNotFound(f"version {version} of branch {branch} of {tname} does not exist")
        return self.reads.snapshot(tname, rec, target)

    def describe_branch(self, name: str, branch: str, *, by: Provenance = UNSTATED) -> dict[str, object]:
        """The branch as listed, with its dataset root, chain id and schema (registry only)."""
        from lake_platform.catalog.arrow_io import schema_from_ipc

        who = self.ctx.who(by.principal)
        tname = TableName.parse(name)
        self.ctx.readable(who, tname)
        rec, _ = self.branch(tname, branch)
        schema = schema_from_ipc(rec.schema_ipc) if rec.schema_ipc else None
        columns = [{"name": f.name, "type": str(f.type), "nullable": f.nullable} for f in schema or []]
        return {
            **self.info(tname, rec).to_dict(),
            "location": rec.location,
            "chain": rec.incarnation,
            "schema": columns,
        }

    def bound_namespace(self, tname: TableName, branch: str, storage_options: dict[str, str]) -> Any:
        """A namespace bound to the branch's line (its head key, its chain's versions), for a
        reader of its versions (REST's ListTableVersions and DescribeTableVersion of a branch).
        The caller checked the reader's permission."""
        from lake_platform.catalog.namespace import BoundTableNamespace

        rec, item = self.branch(tname, branch)
        return BoundTableNamespace(
            self.ctx.store,
            tname,
            rec,
            item.revision,
            storage_options=storage_options,
            head_key=keys.branch(tname, branch),
        )

    def held(
        self,
        tname: TableName,
        branch: str,
        chain: str,
        pending: PendingCommit | None = None,
        *,
        settle: bool = True,
        at: int | None = None,
    ) -> tuple[BranchRecord, Item]:
        """The branch read again under its line's lease (``chain``), and settled as main is before
        a write (``Manifests.settle``: a version a stopped writer committed but did not publish
        is finished, manifests written around the registry quarantined, noted in ``pending``):
        every writer of a branch comes through here. Not ``settle``: a Lance client's staged
        commit, which settles nothing on main either (``pylance_commits``): one that lost the
        race is owed ConcurrentModification, not its manifest removed as dead staging.
        ConcurrentModification when the branch was deleted, published or made again since the
        caller looked it up. ``at``: the head the caller read, whose version record (the settle's)
        is read with the branch, one request (as main's ``Manifests.leased_head``)."""
        key = keys.branch(tname, branch)
        wanted = [key, keys.version(chain, at)] if settle and at is not None else [key]
        item, *current = self.ctx.store.get_many(wanted) if len(wanted) > 1 else [self.ctx.store.get(key)]
        fresh = decode(BranchRecord, item.value, item.key) if item is not None else None
        if item is None or fresh is None or fresh.incarnation != chain or fresh.state != "active":
            raise ConcurrentModification(f"branch {branch} of {tname} was deleted or published meanwhile")
        if settle:
            ahead = current[0] if current and fresh.current_version == at else UNREAD
            self.reads.manifests.settle(tname, fresh, pending, current_item=ahead)
        return fresh, item

    def writer_namespace(
        self,
        tname: TableName,
        fresh: BranchRecord,
        item: Item,
        pending: Any,
        lease: Any,
        phase: str,
        held: bool = False,
    ) -> Any:
        """A namespace through which Lance commits on the branch's line under ``lease``: each
        version a compare-and-swap of the branch record (``head_key``), never of main's.
        ``phase`` names the hook points (``branch-<phase>:<point>``). ``held``: read under the
        lease just now (``held``): Lance's first "latest?" is answered without a read, as main's."""
        from lake_platform.catalog.namespace import BoundTableNamespace

        return BoundTableNamespace(
            self.ctx.store,
            tname,
            fresh,
            item.revision,
            pending=pending,
            lease=lease,
            storage_options=self.ctx.storage(fresh.location),
            fault=self.ctx.hook and (lambda p: self.ctx.at(f"branch-{phase}:{p}")),
            tidy_refused=True,
            head_key=item.key,
            fresh=held,
        )

    def readable_versions(
        self, name: str, branch: str, *, by: Provenance = UNSTATED
    ) -> tuple[str, dict[int, list[str]]]:
        """(the branch's chain id, its registered versions -> their tags): what
        ``lake table history --branch`` marks readable."""
        who = self.ctx.who(by.principal)
        tname = TableName.parse(name)
        self.ctx.readable(who, tname)
        rec, _ = self.branch(tname, branch)
        versions = {}
        for item in self.ctx.store.scan_prefix(keys.versions(rec.incarnation)):
            ver = decode(VersionRecord, item.value, item.key)
            versions[ver.version] = list(ver.tags)
        return rec.incarnation, versions

    # -- creating --------------------------------------------------------------------------------

    def create_branch(
        self,
        name: str,
        branch: str,
        *,
        from_version: int | None = None,
        from_tag: str | None = None,
        from_branch: str | None = None,
        detail: dict[str, object] | None = None,
        by: Provenance = UNSTATED,
    ) -> BranchInfo:
        """Make ``branch`` of the table from a version (default: the head) or a tag of main or of
        ``from_branch``. Copies no data file: Lance writes one manifest
        and a ref; the registry commits the branch record and its first version record.
        ``detail`` goes into the log entry (an idempotent request's digest)."""
        from lake_platform.engine import branches as engine_branches

        who = self.ctx.who(by.principal)
        tname = TableName.parse(name)
        check_segment(branch, "branch name")
        if branch == MAIN:
            raise InvalidInput("'main' names the table's own line; choose another branch name")
        if from_version is not None and not keys.valid_version(from_version):
            raise InvalidInput(f"invalid version {from_version!r}")
        if from_tag is not None:
            check_segment(from_tag, "tag name")
            if from_version is not None:
                raise InvalidInput("a branch is made from a tag or from a version, not both")
        if from_branch is not None:
            check_segment(from_branch, "branch name")
        commit_id = check_commit_id(by.commit_id)
        self.ctx.require_parent(tname, who=who)
        who.require(tname.project, "write", f"branch {tname}")
        replay = None
        if by.commit_id is not None:
            replay = self.ctx.replayed(commit_id, table=str(tname), operation="branch-create", branch=branch)
        if replay is not None:
            # A retry of a create that landed (its outcome was unknown): the branch it made.
            rec, _ = self.branch(tname, branch)
            return self.info(tname, rec)
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
        # Another incarnation's record: a dropped table's in the trash is refused, a leftover replaced.
        revision = branch_moves.free_revision(self.ctx.store, tname, branch, record.incarnation)
        parent: TableRecord = record
        if from_branch is not None and from_branch != MAIN:
            parent, _ = self.branch(tname, from_branch)
        self._source_version(tname, parent, from_version, from_tag)  # refused before any lease
        with ExitStack() as held:
            # Main's lease for every create of the table's branches (then the parent branch's:
            # main before its branches, as a publish takes them), so two creates of one name never
            # meet in Lance, whose branch carries that name.
            lease = main_lease = held.enter_context(self.ctx.gate.hold(record.incarnation))
            if isinstance(parent, BranchRecord):
                lease = held.enter_context(self.ctx.gate.hold(parent.incarnation))
            if by.commit_id is not None and self.ctx.replayed(  # landed while this waited?
                commit_id, table=str(tname), operation="branch-create", branch=branch
            ):
                return self.info(tname, self.branch(tname, branch)[0])
            there = self.ctx.store.get(keys.branch(tname, branch))
            if (there.revision if there is not None else ABSENT) != revision:
                raise TableBranchAlreadyExists(f"branch {branch} of {tname} was made concurrently")
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
            storage = self.ctx.storage(record.folder_uri)
            # The registry's name where Lance has it free (or a killed create's leftover holds
            # it), which stock clients open it by; else <name>-<id>, which lake's readers follow.
            lance_branch = branch_names.lance_name(
                self.ctx, tname, record, branch, chain, storage, main_lease
            )
            self.ctx.at("branch:before-engine")
            made = engine_branches.create_branch(root, lance_branch, version, storage)
            self.ctx.at("branch:engine-made")  # Lance's branch made, the registry's not yet
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
                Put(keys.branch(tname, branch), rec.encode(), revision),
                Put(keys.version(chain, version), first.encode(), ABSENT),
                Check(keys.table(tname), table_rev),
            ]
            logged: dict[str, object] = {
                **(detail or {}),
                "branch": branch,
                "parent": from_branch or MAIN,
                "lance_branch": lance_branch,
            }
            if from_tag is not None:
                logged["tag"] = from_tag
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
                        logged,
                    ),
                    ops=ops,
                    lease=lease,
                )
            except ConditionFailed:
                # Our lease was lost: another create may have removed this Lance branch as a
                # leftover and made its own of the name since, so only a name that is this
                # create's alone is removed; a leftover of the bare name is the next create's
                # (or the orphan reclaim's) to remove.
                if lance_branch != branch:
                    engine_branches.delete_branch(record.folder_uri, lance_branch, storage)
                raise TableBranchAlreadyExists(f"branch {branch} of {tname} was made concurrently") from None
        return branch_info(rec, {parent.incarnation: from_branch} if from_branch else {})

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


def branch_version(
    store: MetaStore, tname: TableName, table_incarnation: str, branch: str, version: int | None
) -> tuple[BranchRecord, VersionRecord]:
    """The active branch of that table incarnation and its registered ``version`` (None: its
    head), two registry reads: what a reader naming a branch needs (``query/branch_refs``).
    TableBranchNotFound, or TableVersionNotFound outside the branch's versions."""
    item = store.get(keys.branch(tname, branch))
    rec = decode(BranchRecord, item.value, item.key) if item is not None else None
    if rec is None or rec.table_incarnation != table_incarnation or rec.state != "active":
        raise TableBranchNotFound(f"no branch {branch} on {tname}")
    wanted = version or rec.current_version
    found = (
        store.get(keys.version(rec.incarnation, wanted))
        if rec.parent_version <= wanted <= rec.current_version
        else None
    )
    if found is None:
        raise TableVersionNotFound(f"version {wanted} of branch {branch} of {tname} does not exist")
    return rec, decode(VersionRecord, found.value, found.key)


def branch_info(rec: BranchRecord, chains: dict[str, str]) -> BranchInfo:
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
