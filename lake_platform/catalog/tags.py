"""Tags of a table: list, create (or move) and delete. Each is a commit under the table's lease that
rewrites the version records carrying the tag, so cleanup (which chooses and deletes under the
same lease) never deletes a tagged version unseen; Lance's own copy follows the registry.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from lake_platform.catalog.context import CatalogContext, Log, check_commit_id, first_line
from lake_platform.catalog.lease import Lease
from lake_platform.catalog.principals import Principal
from lake_platform.catalog.provenance import UNSTATED, Provenance
from lake_platform.catalog.reads import Reads
from lake_platform.catalog.results import CommitResult
from lake_platform.engine import lance_engine as engine
from lake_platform.errors import (
    ConcurrentModification,
    ConditionFailed,
    InvalidInput,
    LeaseExpired,
    ServiceUnavailable,
    TableBranchNotFound,
    TableTagAlreadyExists,
    TableTagNotFound,
    TableVersionNotFound,
)
from lake_platform.naming import TableName, check_segment
from lake_platform.registry import keys
from lake_platform.registry.records import BranchRecord, TableRecord, VersionRecord, decode
from lake_platform.registry.store import Item, Op, Put


class Tags:
    def __init__(self, ctx: CatalogContext, reads: Reads) -> None:
        self.ctx = ctx
        self.reads = reads

    def list_tags(self, name: str, *, by: Provenance = UNSTATED) -> dict[str, int]:
        """Tag name -> version, from the registry's version records alone: the registry is the
        authority (Lance's copy follows it), so listing never opens the dataset."""
        return {tag: ver.version for tag, ver in self.tagged_versions(name, by=by).items()}

    def tagged_versions(self, name: str, *, by: Provenance = UNSTATED) -> dict[str, VersionRecord]:
        """Tag name -> the record of the version it names (registry only), sorted by tag."""
        who = self.ctx.who(by.principal)
        tname = TableName.parse(name)
        self.ctx.readable(who, tname)
        record, _ = self.ctx.table(tname)
        found: dict[str, VersionRecord] = {}
        for item in self.ctx.store.scan_prefix(keys.versions(record.incarnation)):
            ver = decode(VersionRecord, item.value, item.key)
            found.update(dict.fromkeys(ver.tags, ver))
        return dict(sorted(found.items()))

    def create_tag(
        self,
        name: str,
        tag: str,
        version: int | None = None,
        *,
        replace: bool = False,
        branch: str | None = None,
        detail: dict[str, object] | None = None,
        by: Provenance = UNSTATED,
    ) -> int:
        """Tag a registered version (current by default). Tagged versions are never cleaned up.

        The tag is a commit like any other: under the table's lease, the version record gains
        the tag in one registry transact fenced by the lease and conditional on that record, so
        cleanup (which chooses and deletes under the same lease) can never delete it unseen.
        Lance's own tag follows the registry. ``replace`` moves an existing tag (and adopts one
        only Lance's files held). ``branch``: tag a version of that branch instead (registry only:
        Lance keeps one tag namespace per table, so a branch's tags have no Lance copy).
        ``detail`` goes into the log entry (an idempotent request's digest); ``by.commit_id``
        that already landed as this tag answers the version it tagged (Lance's copy written if
        it is still missing), nothing committed."""
        who = self.ctx.who(by.principal)
        tname = TableName.parse(name)
        check_segment(tag, "tag name")
        if version is not None and not keys.valid_version(version):
            raise InvalidInput(f"invalid version {version!r}")
        who.require(tname.project, "write", f"tag {tname}")
        commit = TagCommit(check_commit_id(by.commit_id), dict(detail or {}), by.commit_id is not None)
        if branch is not None:
            return self._tag_branch(tname, branch, tag, version, replace, who, commit)
        record, _ = self.ctx.table(tname)
        with self.ctx.gate.hold(record.incarnation) as lease:
            record, _ = self.ctx.table(tname, incarnation=record.incarnation)
            first = commit.landed(self.ctx, tname, "tag")
            if first is not None:
                return self._tagged_again(tname, record, tag, first.to_version or 0)
            target = version or record.current_version
            item = self.ctx.store.get(keys.version(record.incarnation, target))
            if item is None:
                raise TableVersionNotFound(f"version {target} of {tname} does not exist (or was cleaned up)")
            chosen = decode(VersionRecord, item.value, item.key)
            holders = self._tag_holders(record, tag)
            snap = self.reads.snapshot(tname, record, target)
            in_engine = engine.tagged_versions(snap.dataset).get(tag)
            tagged_at = holders[0][0].version if holders else in_engine
            if tagged_at is None and replace:
                raise TableTagNotFound(f"no tag {tag} on {tname}")
            if tagged_at is not None and not replace:
                if tagged_at == target and holders and in_engine is None:
                    # An earlier call committed the tag but never wrote Lance's copy: finish it.
                    _engine_tag(lambda: engine.create_tag(snap.dataset, tag, target), tname, tag)
                    return target
                if not holders:  # written around the catalog (or by an older release)
                    raise TableTagAlreadyExists(
                        f"tag {tag} exists on {tname} only in Lance's files (written around the "
                        f"catalog), at version {in_engine}; replacing it makes it a catalog tag"
                    )
                raise TableTagAlreadyExists(f"tag {tag} already exists on {tname}")
            ops = _move_tag_ops(record, holders, tag, item, chosen)
            self.ctx.at("tag:before-commit")
            self._commit_tag(lease, ops, tname, "tag", who, target, tag, commit)
            self.ctx.at("tag:after-commit")
            if in_engine is None:
                _engine_tag(lambda: engine.create_tag(snap.dataset, tag, target), tname, tag)
            elif in_engine != target:
                _engine_tag(lambda: engine.update_tag(snap.dataset, tag, target), tname, tag)
        return target

    def _tagged_again(self, tname: TableName, record: TableRecord, tag: str, target: int) -> int:
        """A tag whose commit landed already (a retry): Lance's copy written if the registry still
        holds the tag at ``target`` and Lance lacks it (the first call failed after its commit)."""
        holders = self._tag_holders(record, tag)
        if holders and holders[0][0].version == target:
            snap = self.reads.snapshot(tname, record, target)
            if engine.tagged_versions(snap.dataset).get(tag) is None:
                _engine_tag(lambda: engine.create_tag(snap.dataset, tag, target), tname, tag)
        return target

    def _tag_branch(
        self,
        tname: TableName,
        branch: str,
        tag: str,
        version: int | None,
        replace: bool,
        who: Principal,
        commit: TagCommit,
    ) -> int:
        """A tag on a version of ``branch``'s own chain, under the branch's lease."""
        check_segment(branch, "branch name")
        record, _ = self.ctx.table(tname)
        item = self.ctx.store.get(keys.branch(tname, branch))
        line = decode(BranchRecord, item.value, item.key) if item is not None else None
        if line is None or line.table_incarnation != record.incarnation or line.state != "active":
            raise TableBranchNotFound(f"no branch {branch} on {tname}")
        with self.ctx.gate.hold(line.incarnation) as lease:
            first = commit.landed(self.ctx, tname, "tag", branch)
            if first is not None:
                return first.to_version or 0
            target = version or line.current_version
            found = self.ctx.store.get(keys.version(line.incarnation, target))
            if found is None:
                raise TableVersionNotFound(f"version {target} of branch {branch} of {tname} does not exist")
            chosen = decode(VersionRecord, found.value, found.key)
            holders = self._tag_holders(line, tag)
            if holders and not replace:
                raise TableTagAlreadyExists(f"tag {tag} already exists on branch {branch} of {tname}")
            if not holders and replace:
                raise TableTagNotFound(f"no tag {tag} on branch {branch} of {tname}")
            ops = _move_tag_ops(line, holders, tag, found, chosen)
            self._commit_tag(lease, ops, tname, "tag", who, target, tag, commit, branch)
        return target

    def delete_tag(
        self, name: str, tag: str, *, detail: dict[str, object] | None = None, by: Provenance = UNSTATED
    ) -> None:
        """Remove a tag: out of the registry first (under the lease), then Lance's copy; a tag
        left only in Lance still protects its version, and a retry removes it. ``detail`` and
        ``by.commit_id``: as ``create_tag``'s (a landed one removes Lance's copy if the registry
        no longer holds the tag)."""
        who = self.ctx.who(by.principal)
        tname = TableName.parse(name)
        check_segment(tag, "tag name")
        who.require(tname.project, "write", f"untag {tname}")
        commit = TagCommit(check_commit_id(by.commit_id), dict(detail or {}), by.commit_id is not None)
        record, _ = self.ctx.table(tname)
        with self.ctx.gate.hold(record.incarnation) as lease:
            record, _ = self.ctx.table(tname, incarnation=record.incarnation)
            holders = self._tag_holders(record, tag)
            snap = self.reads.snapshot(tname, record, record.current_version)
            in_engine = engine.tagged_versions(snap.dataset).get(tag)
            if commit.landed(self.ctx, tname, "untag") is not None:
                if not holders and in_engine is not None:
                    _engine_tag(lambda: engine.delete_tag(snap.dataset, tag), tname, tag)
                return
            if not holders and in_engine is None:
                raise TableTagNotFound(f"no tag {tag} on {tname}")
            ops = _untag_ops(record, holders, tag)
            self.ctx.at("untag:before-commit")
            self._commit_tag(lease, ops, tname, "untag", who, None, tag, commit)
            if in_engine is not None:
                _engine_tag(lambda: engine.delete_tag(snap.dataset, tag), tname, tag)

    def _tag_holders(self, record: TableRecord, tag: str) -> list[tuple[VersionRecord, int]]:
        """Registered versions carrying ``tag`` (one, unless a move was interrupted by hand)."""
        found = []
        for item in self.ctx.store.scan_prefix(keys.versions(record.incarnation)):
            ver = decode(VersionRecord, item.value, item.key)
            if tag in ver.tags:
                found.append((ver, item.revision))
        return found

    def _commit_tag(
        self,
        lease: Lease,
        ops: list[Op],
        tname: TableName,
        operation: str,
        who: Principal,
        version: int | None,
        tag: str,
        commit: TagCommit,
        branch: str | None = None,
    ) -> None:
        record_keys = {op.key for op in ops}
        with lease.fenced() as fence:
            try:
                self.ctx.commit(
                    [*ops, fence],
                    log=Log(
                        str(tname),
                        operation,
                        self.ctx.actor(None, who),
                        commit_id=commit.commit_id,
                        to_version=version,
                        detail={**commit.detail, "tag": tag, **({"branch": branch} if branch else {})},
                    ),
                )
            except ConditionFailed as exc:
                if exc.key == fence.key:
                    lease.mark_lost()
                    raise LeaseExpired(
                        f"write lease on {tname} was taken over; tag {tag} was not written"
                    ) from None
                if exc.key in record_keys:
                    raise ConcurrentModification(
                        f"version records of {tname} changed; tag {tag} was not written"
                    ) from None
                raise


@dataclass(frozen=True)
class TagCommit:
    """A tag change's commit id, what its log entry's detail adds, and whether the caller named
    the id (a retry's: it may have landed already, or while this one waited for the lease)."""

    commit_id: str
    detail: dict[str, object]
    named: bool

    def landed(
        self, ctx: CatalogContext, tname: TableName, operation: str, branch: str | None = None
    ) -> CommitResult | None:
        """The commit this id made as ``operation`` of ``tname`` (on ``branch``), if it landed;
        an id that landed as another commit is InvalidInput, nothing written."""
        if not self.named:
            return None
        return ctx.replayed(self.commit_id, table=str(tname), operation=operation, branch=branch)


def _engine_tag(write: Callable[[], None], tname: TableName, tag: str) -> None:
    """Lance's copy of a tag, written after the registry committed it: a failure leaves the
    registry's answer standing (cleanup keeps the version), and repeating the call finishes it."""
    try:
        write()
    except Exception as exc:  # noqa: BLE001 - any engine failure is reported the same, retryable way
        raise ServiceUnavailable(
            f"tag {tag} of {tname} is committed, but Lance's copy could not be written "
            f"({first_line(exc)}); repeat the call to finish it"
        ) from exc


def _move_tag_ops(
    owner: TableRecord | BranchRecord,
    holders: list[tuple[VersionRecord, int]],
    tag: str,
    item: Item,
    chosen: VersionRecord,
) -> list[Op]:
    """Take ``tag`` off the other versions holding it and put it on ``chosen`` (read as ``item``),
    each conditional on the revision it was read at."""
    ops = _untag_ops(owner, [(v, rev) for v, rev in holders if v.version != chosen.version], tag)
    if tag not in chosen.tags:
        tagged = chosen.model_copy(update={"tags": [*chosen.tags, tag]})
        ops.append(Put(item.key, tagged.encode(), item.revision))
    return ops


def _untag_ops(
    record: TableRecord | BranchRecord, holders: list[tuple[VersionRecord, int]], tag: str
) -> list[Op]:
    """Take ``tag`` off each holding version record, conditional on the revision it was read at."""
    return [
        Put(
            keys.version(record.incarnation, v.version),
            v.model_copy(update={"tags": [t for t in v.tags if t != tag]}).encode(),
            rev,
        )
        for v, rev in holders
    ]
