"""The catalog: the one authority every entry point (CLI, Dagster, Flight) goes through.

Each write takes the table's lease, binds a namespace to the table incarnation and the pending
commit, and lets Lance commit *through* the registry (see ``namespace``). Every change ends in a
registry commit with a commit-log entry; every destructive step is conditional.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import pyarrow as pa

from lake_platform.catalog.access import AccessMixin
from lake_platform.catalog.arrow_io import StreamCounter, conform_schema, schema_from_ipc, schema_to_ipc
from lake_platform.catalog.clock import Clock, SystemClock
from lake_platform.catalog.lease import Lease, WriteGate
from lake_platform.catalog.hierarchy import HierarchyMixin
from lake_platform.catalog.namespace import BoundTableNamespace, PendingCommit
from lake_platform.catalog.policies import PolicyMixin
from lake_platform.catalog.principals import LOCAL_ADMIN, Principal
from lake_platform.catalog.results import CommitResult, MaintenanceResult, PlannedCompaction, TableInfo
from lake_platform.catalog.trash import TrashMixin
from lake_platform.engine import lance_engine as engine
from lake_platform.errors import (
    ConcurrentModification,
    ConditionFailed,
    Internal,
    InvalidInput,
    InvalidTableState,
    LakeError,
    LeaseExpired,
    NamespaceAlreadyExists,
    NamespaceNotFound,
    ServiceUnavailable,
    TableAlreadyExists,
    TableNotFound,
    TableSchemaValidationError,
    TableTagAlreadyExists,
    TableTagNotFound,
    TableVersionNotFound,
)
from lake_platform.naming import NamespaceName, ProjectName, TableName, WarehouseName, check_segment
from lake_platform.registry import keys
from lake_platform.registry.factory import open_metastore
from lake_platform.registry.records import (
    CommitLogEntry,
    CommitMarker,
    NamespaceRecord,
    ProjectRecord,
    TableRecord,
    VersionRecord,
    WarehouseRecord,
    decode,
    new_id,
    now_ms,
)
from lake_platform.registry.store import ABSENT, Check, Delete, MetaStore, Op, Put
from lake_platform.settings import LakeSettings

log = logging.getLogger(__name__)

#: Hook points tests use to pause or break an operation at an exact step.
Hook = Callable[[str], None]

_DELETE_BATCH = 90


@dataclass(frozen=True)
class TableSnapshot:
    """An open, immutable view of one registered table version."""

    name: TableName
    record: TableRecord
    version: int
    dataset: Any  # lance.LanceDataset, opaque above the engine

    @property
    def schema(self) -> pa.Schema:
        return self.dataset.schema

    def to_reader(self, **scan: Any) -> pa.RecordBatchReader:
        return engine.scanner(self.dataset, **scan).to_reader()

    def count_rows(self) -> int:
        return int(self.dataset.count_rows())

    def table_provider(self) -> Any:
        return engine.table_provider(self.dataset)


class Catalog(AccessMixin, HierarchyMixin, TrashMixin, PolicyMixin):
    """Every operation takes an optional ``principal`` (default: the catalog's own, the local
    admin for the CLI) and checks, in order: identity, shape, parent, permission, conflict."""

    def __init__(
        self,
        settings: LakeSettings,
        store: MetaStore | None = None,
        *,
        clock: Clock | None = None,
        heartbeat: bool = True,
        hook: Hook | None = None,
        principal: Principal = LOCAL_ADMIN,
    ) -> None:
        self.settings = settings
        self.principal = principal
        self.store = store if store is not None else open_metastore(settings)
        self.clock = clock or SystemClock()
        self.gate = WriteGate(
            self.store,
            ttl=settings.lease_ttl_seconds,
            margin=settings.lease_safety_margin_seconds,
            wait=settings.lease_wait_seconds,
            clock=self.clock,
            heartbeat=heartbeat,
        )
        self._hook = hook

    def close(self) -> None:
        self.gate.close()
        self.store.close()

    def __enter__(self) -> Catalog:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _at(self, point: str) -> None:
        if self._hook is not None:
            self._hook(point)

    # == hierarchy ===========================================================================

    def create_project(self, name: str, *, actor: str | None = None, principal: Principal | None = None) -> ProjectRecord:
        who = self._who(principal)
        pname = ProjectName.parse(name)
        who.require(pname.project, "admin", f"create project {pname}")
        record = ProjectRecord(name=str(pname), created_by=self._actor(actor, who))
        self._create(keys.project(pname), record, str(pname), "create project", self._actor(actor, who),
                     exists=NamespaceAlreadyExists(f"project {pname} already exists"))
        return record

    def create_warehouse(self, name: str, *, root: str | None = None, actor: str | None = None,
                         principal: Principal | None = None) -> WarehouseRecord:
        who = self._who(principal)
        wname = WarehouseName.parse(name)
        root = self._storage_root(root, wname)
        project = self.store.get(keys.project(wname.parent))
        if project is None or decode(ProjectRecord, project.value).state != "active":
            raise NamespaceNotFound(f"project {wname.project} does not exist")
        who.require(wname.project, "admin", f"create warehouse {wname}")
        record = WarehouseRecord(name=str(wname), root=root, created_by=self._actor(actor, who))
        self._create(keys.warehouse(wname), record, str(wname), "create warehouse", self._actor(actor, who),
                     exists=NamespaceAlreadyExists(f"warehouse {wname} already exists"),
                     parent=keys.project(wname.parent))
        return record

    def create_namespace(self, name: str, *, actor: str | None = None,
                         principal: Principal | None = None) -> NamespaceRecord:
        who = self._who(principal)
        nname = NamespaceName.parse(name)
        parent = nname.parent
        parent_key = keys.warehouse(parent) if isinstance(parent, WarehouseName) else keys.namespace(parent)
        self._require_parent(nname)
        who.require(nname.project, "admin", f"create namespace {nname}")
        record = NamespaceRecord(name=str(nname), created_by=self._actor(actor, who))
        self._create(keys.namespace(nname), record, str(nname), "create namespace", self._actor(actor, who),
                     exists=NamespaceAlreadyExists(f"namespace {nname} already exists"), parent=parent_key)
        return record

    def _who(self, principal: Principal | None) -> Principal:
        who = principal if principal is not None else self.principal
        if not isinstance(who, Principal):
            from lake_platform.errors import Unauthenticated

            raise Unauthenticated("no identity given")
        return who

    def warehouse(self, name: WarehouseName) -> WarehouseRecord:
        item = self.store.get(keys.warehouse(name))
        if item is None:
            raise NamespaceNotFound(f"warehouse {name} does not exist")
        return decode(WarehouseRecord, item.value, item.key)

    def _create(self, key: str, record: Any, target: str, operation: str, actor: str, *,
                exists: LakeError, parent: str | None = None) -> None:
        ops: list[Op] = [Put(key, record.encode(), ABSENT)]
        if parent is not None:
            parent_item = self.store.get(parent)
            if parent_item is None:
                raise NamespaceNotFound(f"parent of {target} does not exist")
            # The parent must still be there when the child lands (no orphan children).
            ops.append(Check(parent, parent_item.revision))
        ops += self._log_ops(target, operation, actor)
        try:
            self.store.transact(ops)
        except ConditionFailed as exc:
            if exc.key == key or exc.key is None and self.store.get(key) is not None:
                raise exists from None
            raise NamespaceNotFound(f"parent of {target} was dropped concurrently") from None

    def _storage_root(self, root: str | None, wname: WarehouseName) -> str:
        if root is None or root == "":
            base = self.settings.warehouse_root
            root = f"{base.rstrip('/')}/{wname.project}/{wname.warehouse}"
        if root.startswith("s3://"):
            if len(root) <= len("s3://") or "//" in root[5:] or ".." in root.split("/"):
                raise InvalidInput(f"invalid storage root {root!r}")
            return root.rstrip("/")
        if "://" in root and not root.startswith("file://"):
            raise InvalidInput(f"unsupported storage root {root!r}: use a local folder or s3://bucket/prefix")
        return Path(root.removeprefix("file://")).expanduser().resolve().as_posix()

    # == tables: write path ===================================================================

    def create_table(
        self, name: str, data: pa.RecordBatchReader, *, actor: str | None = None, run_id: str | None = None,
        commit_id: str | None = None, principal: Principal | None = None,
    ) -> CommitResult:
        who = self._who(principal)
        tname = TableName.parse(name)
        commit_id = _commit_id(commit_id)
        ns_item = self._require_parent(tname)
        who.require(tname.project, "write", f"create tables in {tname.namespace_name}")
        replay = self._replayed(commit_id)
        if replay is not None:
            return replay
        if self.store.get(keys.table(tname)) is not None:
            raise TableAlreadyExists(f"table {tname} already exists")
        _check_schema(data.schema, str(tname))
        warehouse = self.warehouse(tname.warehouse_name)
        incarnation = new_id()
        location = _table_location(warehouse.root, tname, incarnation)
        record = TableRecord(
            name=str(tname), incarnation=incarnation, location=location, current_version=0,
            schema_ipc_b64=TableRecord.encode_schema(schema_to_ipc(data.schema)), created_by=self._actor(actor, who),
        )
        counter = StreamCounter()
        pending = PendingCommit(commit_id=commit_id, operation="create", actor=self._actor(actor, who), run_id=run_id,
                                schema_ipc=schema_to_ipc(data.schema), stream_totals=counter.totals,
                                extra_ops=[Check(ns_item.key, ns_item.revision)])
        try:
            self._write(tname, record, ABSENT, pending, counter.wrap(data), "create", counter=counter)
        except LakeError:
            # The location is unique to this attempt and unregistered: nobody else can see it.
            if self.store.get(keys.commit_marker(commit_id)) is None:
                engine.remove_table(location, self._storage(location))
            raise
        return self._result(pending, str(tname))

    def append(self, name: str, data: pa.RecordBatchReader, *, actor: str | None = None,
               run_id: str | None = None, commit_id: str | None = None, detail: dict[str, object] | None = None,
               principal: Principal | None = None) -> CommitResult:
        """Append a stream. ``commit_id`` makes it idempotent; ``detail`` goes into the log entry
        (e.g. the identities of ingested files)."""
        return self._write_existing(name, data, "append", actor, run_id, commit_id, detail, principal)

    def overwrite(self, name: str, data: pa.RecordBatchReader, *, actor: str | None = None,
                  run_id: str | None = None, commit_id: str | None = None, detail: dict[str, object] | None = None,
                  principal: Principal | None = None) -> CommitResult:
        return self._write_existing(name, data, "overwrite", actor, run_id, commit_id, detail, principal)

    def _write_existing(self, name: str, data: pa.RecordBatchReader, mode: str, actor: str | None,
                        run_id: str | None, commit_id: str | None, detail: dict[str, object] | None,
                        principal: Principal | None) -> CommitResult:
        who = self._who(principal)
        tname = TableName.parse(name)
        commit_id = _commit_id(commit_id)
        self._require_parent(tname)
        who.require(tname.project, "write", f"write to {tname}")
        replay = self._replayed(commit_id)
        if replay is not None:
            return replay
        record, _ = self._table(tname)
        counter = StreamCounter()
        if mode == "append":
            target = conform_schema(data.schema, schema_from_ipc(record.schema_ipc), str(tname))
            stream = counter.wrap(data, target)
            schema_ipc = None
        else:
            _check_schema(data.schema, str(tname))
            stream = counter.wrap(data)
            schema_ipc = schema_to_ipc(data.schema)
        pending = PendingCommit(commit_id=commit_id, operation=mode, actor=self._actor(actor, who), run_id=run_id,
                                schema_ipc=schema_ipc, stream_totals=counter.totals, detail=dict(detail or {}))
        with self.gate.hold(record.incarnation) as lease:
            record, revision = self._table(tname, incarnation=record.incarnation)
            self._settle(tname, record, pending)
            if mode == "overwrite":
                pending.rows_removed = self._open(tname, record, record.current_version).count_rows()
            self._write(tname, record, revision, pending, stream, mode, lease, counter=counter)
        return self._result(pending, str(tname))

    def _write(self, tname: TableName, record: TableRecord, revision: int, pending: PendingCommit,
               stream: pa.RecordBatchReader, mode: str, lease: Lease | None = None, *,
               counter: StreamCounter) -> None:
        if lease is None:
            with self.gate.hold(record.incarnation) as held:
                return self._write(tname, record, revision, pending, stream, mode, held, counter=counter)
        ns = self._namespace(tname, record, revision, pending, lease)
        lease.check()
        try:
            self._at(f"{mode}:before-write")  # inside: an injected failure is an engine failure
            engine.write(stream, namespace=ns, table_id=tname.parts, mode=mode,
                         storage_options=self._storage(record.location))
        except Exception as exc:  # noqa: BLE001 - every failure is resolved below, never guessed
            if counter.error is not None and not pending.landed:
                raise _input_error(counter.error) from None
            self._resolve_failure(pending, ns, exc)
        self._at(f"{mode}:after-write")
        self._finalize(record, pending)
        self._enrich(tname, record, pending)

    def delete_rows(self, name: str, predicate: str, *, actor: str | None = None, run_id: str | None = None,
                    commit_id: str | None = None, principal: Principal | None = None) -> CommitResult:
        who = self._who(principal)
        tname = TableName.parse(name)
        if not isinstance(predicate, str) or not predicate.strip():
            raise InvalidInput("a delete needs a non-empty predicate")
        self._require_parent(tname)
        who.require(tname.project, "write", f"delete from {tname}")
        commit_id = _commit_id(commit_id)
        replay = self._replayed(commit_id)
        if replay is not None:
            return replay
        record, _ = self._table(tname)
        pending = PendingCommit(commit_id=commit_id, operation="delete", actor=self._actor(actor, who), run_id=run_id,
                                detail={"predicate": predicate})
        with self.gate.hold(record.incarnation) as lease:
            record, revision = self._table(tname, incarnation=record.incarnation)
            self._settle(tname, record, pending)
            ns = self._namespace(tname, record, revision, pending, lease)
            ds = engine.open_version(namespace=ns, table_id=tname.parts, version=record.current_version,
                                     storage_options=self._storage(record.location))
            before = int(ds.count_rows())
            try:
                self._at("delete:before-write")  # inside: an injected failure is an engine failure
                engine.delete_rows(ds, predicate)
            except Exception as exc:  # noqa: BLE001
                if not pending.landed and ns.failure is None and isinstance(exc, (ValueError, OSError)):
                    if "conflict" not in str(exc).lower():
                        raise InvalidInput(f"cannot delete from {tname}: {_first_line(exc)}") from None
                self._resolve_failure(pending, ns, exc)
            self._finalize(record, pending)
            if pending.landed:
                after = self._open(tname, ns.record, pending.landed[-1][0]).count_rows()
                self._patch_log(pending.landed[0][1], {"rows_removed": before - after})
        return self._result(pending, str(tname))

    def create_tag(self, name: str, tag: str, version: int | None = None, *, principal: Principal | None = None,
                   replace: bool = False) -> int:
        """Tag a registered version (current by default). Tagged versions are never cleaned up.

        The tag is a commit like any other: under the table's lease, the version record gains
        the tag in one registry transact fenced by the lease and conditional on that record, so
        cleanup (which chooses and deletes under the same lease) can never delete it unseen.
        Lance's own tag follows the registry. ``replace`` moves an existing tag."""
        who = self._who(principal)
        tname = TableName.parse(name)
        check_segment(tag, "tag name")
        if version is not None and (isinstance(version, bool) or not isinstance(version, int) or version < 1):
            raise InvalidInput(f"invalid version {version!r}")
        who.require(tname.project, "write", f"tag {tname}")
        record, _ = self._table(tname)
        with self.gate.hold(record.incarnation) as lease:
            record, _ = self._table(tname, incarnation=record.incarnation)
            target = version or record.current_version
            item = self.store.get(keys.version(record.incarnation, target))
            if item is None:
                raise TableVersionNotFound(f"version {target} of {tname} does not exist (or was cleaned up)")
            chosen = decode(VersionRecord, item.value, item.key)
            holders = self._tag_holders(record, tag)
            snap = self._open(tname, record, target)
            in_engine = engine.tagged_versions(snap.dataset).get(tag)
            tagged_at = holders[0][0].version if holders else in_engine
            if tagged_at is None and replace:
                raise TableTagNotFound(f"no tag {tag} on {tname}")
            if tagged_at is not None and not replace:
                if tagged_at == target and holders and in_engine is None:
                    # An earlier call committed the tag but never wrote Lance's copy: finish it.
                    _engine_tag(lambda: engine.create_tag(snap.dataset, tag, target), tname, tag)
                    return target
                raise TableTagAlreadyExists(f"tag {tag} already exists on {tname}")
            ops: list[Op] = [Put(keys.version(record.incarnation, v.version),
                                 v.model_copy(update={"tags": [t for t in v.tags if t != tag]}).encode(), rev)
                             for v, rev in holders if v.version != target]
            if tag not in chosen.tags:
                ops.append(Put(item.key, chosen.model_copy(update={"tags": [*chosen.tags, tag]}).encode(),
                               item.revision))
            self._at("tag:before-commit")
            self._commit_tag(lease, ops, tname, "tag", who, target, tag)
            self._at("tag:after-commit")
            if in_engine is None:
                _engine_tag(lambda: engine.create_tag(snap.dataset, tag, target), tname, tag)
            elif in_engine != target:
                _engine_tag(lambda: engine.update_tag(snap.dataset, tag, target), tname, tag)
        return target

    def delete_tag(self, name: str, tag: str, *, principal: Principal | None = None) -> None:
        """Remove a tag: out of the registry first (under the lease), then Lance's copy; a tag
        left only in Lance still protects its version, and a retry removes it."""
        who = self._who(principal)
        tname = TableName.parse(name)
        check_segment(tag, "tag name")
        who.require(tname.project, "write", f"untag {tname}")
        record, _ = self._table(tname)
        with self.gate.hold(record.incarnation) as lease:
            record, _ = self._table(tname, incarnation=record.incarnation)
            holders = self._tag_holders(record, tag)
            snap = self._open(tname, record, record.current_version)
            in_engine = engine.tagged_versions(snap.dataset).get(tag)
            if not holders and in_engine is None:
                raise TableTagNotFound(f"no tag {tag} on {tname}")
            ops: list[Op] = [Put(keys.version(record.incarnation, v.version),
                                 v.model_copy(update={"tags": [t for t in v.tags if t != tag]}).encode(), rev)
                             for v, rev in holders]
            self._at("untag:before-commit")
            self._commit_tag(lease, ops, tname, "untag", who, None, tag)
            if in_engine is not None:
                _engine_tag(lambda: engine.delete_tag(snap.dataset, tag), tname, tag)

    def _tag_holders(self, record: TableRecord, tag: str) -> list[tuple[VersionRecord, int]]:
        """Registered versions carrying ``tag`` (one, unless a move was interrupted by hand)."""
        found = []
        for item in self.store.scan_prefix(keys.versions(record.incarnation)):
            ver = decode(VersionRecord, item.value, item.key)
            if tag in ver.tags:
                found.append((ver, item.revision))
        return found

    def _commit_tag(self, lease: Lease, ops: list[Op], tname: TableName, operation: str, who: Principal,
                    version: int | None, tag: str) -> None:
        record_keys = {op.key for op in ops}
        with lease.fenced() as fence:
            ops = [*ops, fence, *self._log_ops(str(tname), operation, self._actor(None, who),
                                               to_version=version, detail={"tag": tag})]
            try:
                self.store.transact(ops)
            except ConditionFailed as exc:
                if exc.key == fence.key:
                    lease.mark_lost()
                    raise LeaseExpired(
                        f"write lease on {tname} was taken over; tag {tag} was not written") from None
                if exc.key in record_keys:
                    raise ConcurrentModification(
                        f"version records of {tname} changed; tag {tag} was not written") from None
                raise

    # == maintenance ==========================================================================

    def plan_compaction(self, name: str, *, target_rows_per_fragment: int = 1_048_576,
                        principal: Principal | None = None) -> PlannedCompaction:
        who = self._who(principal)
        tname = TableName.parse(name)
        who.require(tname.project, "write", f"compact {tname}")
        snap = self.open_table(str(tname), principal=who)
        plan = engine.plan_compaction(snap.dataset, target_rows_per_fragment=target_rows_per_fragment)
        return PlannedCompaction(str(tname), snap.record.incarnation, plan.read_version, plan.tasks)

    def execute_compaction(self, planned: PlannedCompaction) -> list[str]:
        """Rewrite the planned fragments (no commit). Each task is independent and could run in
        another process from its JSON; here they run in order."""
        snap = self._snapshot_of(planned)
        return [engine.execute_compaction_task(snap.dataset, task) for task in planned.tasks]

    def commit_compaction(self, planned: PlannedCompaction, results: Sequence[str], *, actor: str | None = None,
                          run_id: str | None = None, commit_id: str | None = None,
                          principal: Principal | None = None) -> MaintenanceResult:
        who = self._who(principal)
        tname = TableName.parse(planned.table)
        who.require(tname.project, "write", f"compact {tname}")
        commit_id = _commit_id(commit_id)
        if not results:
            return MaintenanceResult(str(tname), "compact", "nothing-to-do", planned.read_version)
        pending = PendingCommit(commit_id=commit_id, operation="compact", actor=self._actor(actor, who), run_id=run_id,
                                detail={"planned_at_version": planned.read_version, "tasks": len(results)})
        with self.gate.hold(planned.incarnation) as lease:
            record, revision = self._table(tname, incarnation=planned.incarnation)
            self._settle(tname, record, pending)
            replay = self._resume_compaction(tname, record, pending)
            if replay is not None:
                return replay
            ns = self._namespace(tname, record, revision, pending, lease)
            ds = engine.open_version(namespace=ns, table_id=tname.parts, version=planned.read_version,
                                     storage_options=self._storage(record.location))
            try:
                self._at("compact:before-write")  # inside: an injected failure is an engine failure
                _, removed, added = engine.commit_compaction(ds, results)
            except engine.StaleCompaction as exc:
                self._finalize(record, pending)
                return self._skipped_stale(tname, record, pending, exc)
            except Exception as exc:  # noqa: BLE001
                self._resolve_failure(pending, ns, exc)
                removed = added = 0
            self._finalize(record, pending)
            self._enrich(tname, record, pending, {"fragments_removed": removed, "fragments_added": added})
        return MaintenanceResult(str(tname), "compact", "committed", pending.landed[-1][0], commit_id,
                                 {"rebased": pending.landed[-1][0] > planned.read_version + 2,
                                  "planned_at_version": planned.read_version})

    def compact(self, name: str, *, target_rows_per_fragment: int = 1_048_576, actor: str | None = None,
                run_id: str | None = None, commit_id: str | None = None,
                principal: Principal | None = None) -> MaintenanceResult:
        planned = self.plan_compaction(name, target_rows_per_fragment=target_rows_per_fragment, principal=principal)
        if not planned.tasks:
            return MaintenanceResult(planned.table, "compact", "nothing-to-do", planned.read_version)
        results = self.execute_compaction(planned)
        return self.commit_compaction(planned, results, actor=actor, run_id=run_id, commit_id=commit_id,
                                      principal=principal)

    def _resume_compaction(self, tname: TableName, record: TableRecord,
                           pending: PendingCommit) -> MaintenanceResult | None:
        """A retry of a compaction commit (same commit id), under the lease.

        Lance commits a compaction as two versions (ReserveFragments, then Rewrite), each a
        registry commit under the one commit id. If the rewrite landed, the retry is a replay.
        If only the reserve step landed (the writer died in between), the retry carries on
        under the same commit id: its marker is updated, not put again, so the commit id still
        names exactly one compaction."""
        item = self.store.get(keys.commit_marker(pending.commit_id))
        if item is None:
            return None
        marker = decode(CommitMarker, item.value, item.key)
        if marker.operation != "compact" or marker.target != str(tname) or marker.incarnation != record.incarnation:
            raise InvalidInput(f"commit id {pending.commit_id} already names {marker.operation} of {marker.target}")
        landed = marker.to_version
        if landed is not None and engine.is_rewrite(self._open(tname, record, record.current_version).dataset, landed):
            return MaintenanceResult(str(tname), "compact", "committed", landed, pending.commit_id,
                                     {"replayed": True, **pending.detail})
        pending.marker_revision = item.revision
        return None

    def _skipped_stale(self, tname: TableName, record: TableRecord, pending: PendingCommit,
                       exc: Exception) -> MaintenanceResult:
        current, _ = self._table(tname, incarnation=record.incarnation)
        detail = {"status": "skipped-stale", "reason": _first_line(exc), **pending.detail}
        # If Lance's reserve step landed (now or in an interrupted attempt), the commit id
        # already has its marker: log only.
        self.store.transact(self._log_ops(str(tname), "compact", pending.actor, commit_id=pending.commit_id,
                                          run_id=pending.run_id, incarnation=record.incarnation,
                                          from_version=current.current_version, detail=detail,
                                          marker=not pending.landed and pending.marker_revision == ABSENT))
        return MaintenanceResult(str(tname), "compact", "skipped-stale", current.current_version,
                                 pending.commit_id, detail)

    def cleanup(self, name: str, *, retention: timedelta, retain_versions: int = 1, actor: str | None = None,
                run_id: str | None = None, principal: Principal | None = None) -> MaintenanceResult:
        """Remove old versions: out of the registry first, then Lance's files with the same cut,
        then their staging manifests. Never the current version, a tagged version, one of the
        newest ``retain_versions``, or one younger than the ticket lifetime."""
        who = self._who(principal)
        tname = TableName.parse(name)
        if retain_versions < 1:
            raise InvalidInput("retain_versions must be at least 1")
        who.require(tname.project, "write", f"clean up {tname}")
        if retention < timedelta(0):
            raise InvalidInput("retention must not be negative")
        record, _ = self._table(tname)
        commit_id = new_id()
        with self.gate.hold(record.incarnation) as lease:
            record, revision = self._table(tname, incarnation=record.incarnation)
            versions = [decode(VersionRecord, i.value, i.key)
                        for i in self.store.scan_prefix(keys.versions(record.incarnation))]
            snap = self._open(tname, record, record.current_version)
            # Tags live in the version records; Lance's own list adds tags written before the
            # registry recorded them. Both were read under the lease every tag commit needs.
            tagged = {v.version for v in versions if v.tags}
            tagged |= set(engine.tagged_versions(snap.dataset).values())
            # A version can be pinned by a ticket for as long as it is current, and a reader's
            # cached snapshot may still treat it as current a little after that: its age counts
            # from when it was superseded (its successor's commit), not from its own commit.
            window = max(retention, timedelta(seconds=self.settings.ticket_lifetime_seconds)) + timedelta(
                seconds=self.settings.reader_max_stale_seconds)
            cut_ms = self.clock.wall_ms() - int(window.total_seconds() * 1000)
            ordered = sorted(versions, key=lambda v: v.version)
            superseded_at = {older.version: newer.committed_at_ms for older, newer in zip(ordered, ordered[1:])}
            newest = {v.version for v in ordered[-retain_versions:]}
            doomed = [v for v in ordered if v.version != record.current_version and v.version not in newest
                      and v.version not in tagged and superseded_at.get(v.version, cut_ms) < cut_ms]
            if not doomed:
                return MaintenanceResult(str(tname), "cleanup", "nothing-to-do", record.current_version)
            self._at("cleanup:chose-versions")
            kept = [(v.version, v.manifest_path) for v in versions if v not in doomed]
            # 1. Out of the registry, conditional on the lease and on the table not moving.
            detail: dict[str, object] = {"versions_removed": [v.version for v in doomed], "tagged_kept": sorted(tagged)}
            for start in range(0, len(doomed), _DELETE_BATCH):
                batch = doomed[start:start + _DELETE_BATCH]
                ops: list[Op] = [Delete(keys.version(record.incarnation, v.version), _ver_rev(self.store, record, v))
                                 for v in batch]
                with lease.fenced() as fence:
                    ops.append(fence)
                    if start == 0:
                        ops += self._log_ops(str(tname), "cleanup", self._actor(actor, who), commit_id=commit_id,
                                             run_id=run_id,
                                             incarnation=record.incarnation, from_version=record.current_version,
                                             to_version=record.current_version, detail=detail)
                    self.store.transact(ops)
            self._at("cleanup:after-registry")
            # 2. Lance's cleanup with the same cut, after making sure it can see every kept version.
            storage = self._storage(record.location)
            engine.repair_manifests(record.location, kept, storage)
            stats = engine.cleanup_versions(snap.dataset, [v.version for v in doomed])
            self._at("cleanup:after-engine")
            # 3. The staging manifests Lance does not know about.
            engine.remove_files(record.location, [v.manifest_path for v in doomed], storage)
            self._at("cleanup:after-manifests")
        detail.update(stats)
        marker = self.commit_landed(commit_id)
        log_key = marker.log_key if marker else None
        if log_key:
            self._patch_log(log_key, {"bytes_removed": stats.get("bytes_removed", 0),
                                      "files_removed": stats.get("data_files_removed", 0), "detail": detail})
        return MaintenanceResult(str(tname), "cleanup", "committed", record.current_version, commit_id, detail)

    # == drop =================================================================================

    def purge_storage(self, record: TableRecord) -> None:
        """Destroy an unregistered incarnation's data and registry leftovers (idempotent)."""
        engine.remove_table(record.location, self._storage(record.location))
        leftovers = [i for i in self.store.scan_prefix(keys.versions(record.incarnation))]
        lease = self.store.get(keys.lease(record.incarnation))
        if lease is not None:
            leftovers.append(lease)
        for start in range(0, len(leftovers), _DELETE_BATCH):
            try:
                self.store.transact([Delete(i.key, i.revision) for i in leftovers[start:start + _DELETE_BATCH]])
            except ConditionFailed:
                log.info("registry leftovers of %s changed during purge; left for the next sweep", record.incarnation)

    # == read path ============================================================================

    def open_table(self, name: str, version: int | None = None, *, principal: Principal | None = None) -> TableSnapshot:
        """Open exactly the registered version (current by default); never "latest on disk"."""
        who = self._who(principal)
        tname = TableName.parse(name)
        self._readable(who, tname)
        record, _ = self._table(tname)
        if version is not None and (not isinstance(version, int) or version < 1):
            raise InvalidInput(f"invalid version {version!r}")
        return self._open(tname, record, version or record.current_version)

    def _open(self, tname: TableName, record: TableRecord, version: int) -> TableSnapshot:
        ns = BoundTableNamespace(self.store, tname, record, ABSENT, storage_options=self._storage(record.location))
        try:
            ds = engine.open_version(namespace=ns, table_id=tname.parts, version=version,
                                     storage_options=self._storage(record.location))
        except Exception as exc:  # noqa: BLE001
            if ns.failure is not None:
                raise ns.failure from None
            if "not found" in str(exc).lower():
                raise self._missing_manifest(tname, version) from None
            raise Internal(f"cannot open {tname} at version {version}: {_first_line(exc)}") from None
        return TableSnapshot(tname, record, version, ds)

    def _snapshot_of(self, planned: PlannedCompaction) -> TableSnapshot:
        tname = TableName.parse(planned.table)
        record, _ = self._table(tname, incarnation=planned.incarnation)
        return self._open(tname, record, planned.read_version)

    def describe_table(self, name: str, *, with_stats: bool = True, principal: Principal | None = None) -> TableInfo:
        who = self._who(principal)
        tname = TableName.parse(name)
        self._readable(who, tname)
        record, _ = self._table(tname)
        rows = fragments = size = None
        if with_stats and record.current_version > 0:
            stats = engine.version_stats(self._open(tname, record, record.current_version).dataset)
            rows, fragments, size = stats.rows, stats.fragments, stats.data_bytes
        schema = schema_from_ipc(record.schema_ipc) if record.schema_ipc else pa.schema([])
        return TableInfo(
            name=str(tname), incarnation=record.incarnation, location=record.location, engine=record.engine,
            current_version=record.current_version, created_at_ms=record.created_at_ms, protected=record.protected,
            rows=rows, fragments=fragments, data_bytes=size,
            schema=[{"name": f.name, "type": str(f.type), "nullable": f.nullable} for f in schema],
        )

    def list_tables(self, prefix: str = "", *, principal: Principal | None = None) -> Iterator[TableRecord]:
        """Registered tables whose dotted name starts with ``prefix`` (whole segments), among
        those the principal may read."""
        who = self._who(principal)
        key_prefix = "tbl/"
        if prefix:
            parts = prefix.split(".")
            for part in parts:
                check_segment(part, "name prefix")
            key_prefix += "/".join(parts[:2])
            if len(parts) > 2:
                key_prefix += "/" + ".".join(parts[2:])
        for item in self.store.scan_prefix(key_prefix):
            record = decode(TableRecord, item.value, item.key)
            if not prefix or record.name == prefix or record.name.startswith(prefix + "."):
                if record.current_version > 0 and who.can(record.name.split(".")[0], "read"):
                    yield record

    def history(self, target: str, *, limit: int | None = None, principal: Principal | None = None) -> list[CommitLogEntry]:
        """The commit log of one object (table, namespace, warehouse or project), oldest first."""
        who = self._who(principal)
        for part in target.split(".") if isinstance(target, str) else [target]:
            check_segment(part, "name")
        if not who.can(target.split(".")[0], "read"):
            raise TableNotFound(f"{target} does not exist")
        return [decode(CommitLogEntry, i.value, i.key) for i in self.store.scan_prefix(keys.log_prefix(target), limit=limit)]

    def log(self, prefix: str = "", *, limit: int | None = None, principal: Principal | None = None) -> list[CommitLogEntry]:
        """Every commit-log entry of objects under a dotted prefix (all of them without one)."""
        who = self._who(principal)
        if prefix:
            for part in prefix.split("."):
                check_segment(part, "name prefix")
        entries = []
        for item in self.store.scan_prefix("log/" + prefix):
            entry = decode(CommitLogEntry, item.value, item.key)
            if prefix and not (entry.target == prefix or entry.target.startswith(prefix + ".")):
                continue
            if who.can(entry.target.split(".")[0], "read"):
                entries.append(entry)
        entries.sort(key=lambda e: (e.at_ms, e.target))
        return entries[-limit:] if limit else entries

    def commit_landed(self, commit_id: str) -> CommitMarker | None:
        item = self.store.get(keys.commit_marker(commit_id))
        return decode(CommitMarker, item.value, item.key) if item else None

    # == internals ============================================================================

    def _actor(self, actor: str | None, who: Principal | None = None) -> str:
        if actor:
            return actor
        who = who or self.principal
        return self.settings.actor if who.kind == "local" else who.name

    def _readable(self, who: Principal, tname: TableName) -> None:
        # Another tenant's table looks exactly like a missing one.
        if not who.can(tname.project, "read"):
            raise TableNotFound(f"table {tname} does not exist")

    def _storage(self, location: str) -> dict[str, str]:
        return self.settings.storage_options(location)

    def declare_table(self, name: str, *, principal: Principal | None = None, actor: str | None = None) -> TableRecord:
        """Reserve a name and a unique location with no version yet (the Lance Namespace
        ``declare_table``): the first commit through the namespace makes it a table."""
        who = self._who(principal)
        tname = TableName.parse(name)
        ns_item = self._require_parent(tname)
        who.require(tname.project, "write", f"create tables in {tname.namespace_name}")
        if self.store.get(keys.table(tname)) is not None:
            raise TableAlreadyExists(f"table {tname} already exists")
        incarnation = new_id()
        record = TableRecord(name=str(tname), incarnation=incarnation,
                             location=_table_location(self.warehouse(tname.warehouse_name).root, tname, incarnation),
                             current_version=0, created_by=self._actor(actor, who))
        try:
            self.store.transact([Put(keys.table(tname), record.encode(), ABSENT), Check(ns_item.key, ns_item.revision),
                                 *self._log_ops(str(tname), "declare", self._actor(actor, who),
                                                incarnation=incarnation)])
        except ConditionFailed as exc:
            if exc.key == keys.table(tname):
                raise TableAlreadyExists(f"table {tname} already exists") from None
            raise NamespaceNotFound(f"namespace {tname.namespace_name} was dropped concurrently") from None
        return record

    def _table(self, tname: TableName, *, incarnation: str | None = None,
               declared: bool = False) -> tuple[TableRecord, int]:
        item = self.store.get(keys.table(tname))
        if item is None:
            raise TableNotFound(f"table {tname} does not exist")
        record = decode(TableRecord, item.value, item.key)
        if incarnation is not None and record.incarnation != incarnation:
            raise TableNotFound(f"table {tname} was dropped or replaced (incarnation {incarnation} is gone)")
        if record.current_version == 0 and not declared:
            raise TableNotFound(f"table {tname} is declared but has no committed version")
        return record, item.revision

    def _namespace(self, tname: TableName, record: TableRecord, revision: int, pending: PendingCommit,
                   lease: Lease) -> BoundTableNamespace:
        return BoundTableNamespace(self.store, tname, record, revision, pending=pending, lease=lease,
                                   storage_options=self._storage(record.location),
                                   fault=self._hook and (lambda p: self._at(f"{pending.operation}:{p}")),
                                   fresh=revision != ABSENT)

    def _replayed(self, commit_id: str) -> CommitResult | None:
        marker = self.commit_landed(commit_id)
        if marker is None:
            return None
        return CommitResult(commit_id, marker.target, marker.operation, marker.from_version, marker.to_version,
                            replayed=True)

    def _resolve_failure(self, pending: PendingCommit, ns: BoundTableNamespace, exc: BaseException) -> None:
        """After a failed engine call: did our commit land anyway? (invariant 5)"""
        marker = None
        try:
            marker = self.commit_landed(pending.commit_id)
        except LakeError:
            pass
        if marker is not None:
            if not pending.landed and marker.to_version is not None:
                pending.landed.append((marker.to_version, marker.log_key))
            log.warning("commit %s landed although the engine reported: %s", pending.commit_id, _first_line(exc))
            return
        if ns.failure is not None:
            raise ns.failure from None
        if isinstance(exc, LakeError):
            raise exc
        if isinstance(exc, (pa.ArrowInvalid, pa.ArrowTypeError)):
            raise TableSchemaValidationError(f"data does not fit the table: {_first_line(exc)}") from None
        if isinstance(exc, (OSError, ValueError)) and "schema" in str(exc).lower():
            raise TableSchemaValidationError(f"data does not fit the table: {_first_line(exc)}") from None
        transient = _transient_storage_error(exc)
        if transient is not None:
            raise transient from exc
        raise Internal(f"{pending.operation} failed: {_first_line(exc)}") from exc

    def _result(self, pending: PendingCommit, table: str) -> CommitResult:
        if not pending.landed:
            raise Internal(f"{pending.operation} of {table} committed no version")
        from_version = pending.from_version
        if from_version is None:  # landed but resolved after an ambiguous failure
            marker = self.commit_landed(pending.commit_id)
            from_version = marker.from_version if marker else None
        rows, nbytes = pending.stream_totals() if pending.stream_totals else (0, 0)
        return CommitResult(pending.commit_id, table, pending.operation, from_version, pending.landed[-1][0],
                            rows_added=rows, bytes_added=nbytes)

    def _finalize(self, record: TableRecord, pending: PendingCommit) -> None:
        """Tidy up after the versions this operation landed. The namespace published each
        canonical manifest before registering it, so only the staging objects remain to be
        removed; a version recorded at its staging path (the writer was stopped, or committed
        before manifests were published first) is finished here. Idempotent; a failure leaves
        the version valid and the next writer or ``repair_table`` finishes it."""
        storage = self._storage(record.location)
        self._at(f"{pending.operation}:before-finalize")
        for version, _ in pending.landed:
            try:
                staged = pending.staged.get(version)
                known = pending.versions.get(version)
                if staged is not None and known is not None and known[0].manifest_path != staged:
                    engine.remove_files(record.location, [staged], storage)
                    continue
                if known is None:
                    item = self.store.get(keys.version(record.incarnation, version))
                    if item is None:
                        continue
                    known = (decode(VersionRecord, item.value, item.key), item.revision)
                self._finish_version(record, *known, step=pending.operation)
            except Exception:  # noqa: BLE001 - the commit stands either way
                log.warning("could not finalize manifest of %s version %s", record.name, version, exc_info=True)
        self._at(f"{pending.operation}:after-finalize")

    def _finish_version(self, record: TableRecord, ver: VersionRecord, revision: int, *,
                        leased: bool = False, step: str | None = None) -> bool:
        """Canonical manifest in place, registry pointed at it, staging object removed; False if
        there was nothing to do (or a concurrent helper did it).

        Safe without the write lease: the registry already chose this staging manifest, so every
        helper copies the same bytes, and the record moves only by compare-and-swap. A different
        manifest squatting on the canonical path is moved to quarantine, under the lease only."""
        if not engine.is_staging_manifest(ver.manifest_path):
            return False
        storage = self._storage(record.location)
        try:
            final = engine.finalize_manifest(record.location, ver.version, ver.manifest_path, storage)
        except engine.ManifestConflict:
            if not leased:
                raise InvalidTableState(
                    f"version {ver.version} of {record.name} cannot be finalized: a manifest written around the "
                    "registry sits at its canonical path; `repair_table` moves it aside") from None
            squatters = engine.canonical_manifests(record.location, storage).get(ver.version, [])
            log.warning("%s: manifests squatting on version %s moved to quarantine: %s", record.name, ver.version,
                        squatters)
            engine.quarantine_files(record.location, squatters, f"unregistered-{new_id()}", storage)
            final = engine.finalize_manifest(record.location, ver.version, ver.manifest_path, storage)
        if step is not None:
            self._at(f"{step}:finalize-copied")
        try:
            self.store.compare_and_swap(keys.version(record.incarnation, ver.version), revision,
                                        ver.model_copy(update={"manifest_path": final}).encode())
        except ConcurrentModification:
            return False  # finished (or cleaned up) by someone else meanwhile
        if step is not None:
            self._at(f"{step}:finalize-swapped")
        engine.remove_files(record.location, [ver.manifest_path], storage)
        return True

    def finish_versions(self, name: str, *, principal: Principal | None = None) -> list[int]:
        """A maintenance step: finish every registered version whose writer stopped between
        its registry commit and publishing its manifest (or that older code left at its staging
        path). Readers never do this (an open never writes); the next writer does it for the
        newest versions. Idempotent; returns the versions it finished."""
        who = self._who(principal)
        tname = TableName.parse(name)
        who.require(tname.project, "write", f"repair {tname}")
        record, _ = self._table(tname)
        return self._finish_all(record, leased=False)

    def _finish_all(self, record: TableRecord, *, leased: bool) -> list[int]:
        finished = []
        for item in self.store.scan_prefix(keys.versions(record.incarnation)):
            ver = decode(VersionRecord, item.value, item.key)
            if self._finish_version(record, ver, item.revision, leased=leased):
                finished.append(ver.version)
        return finished

    def _settle(self, tname: TableName, record: TableRecord, pending: PendingCommit | None = None) -> list[str]:
        """Under the write lease, before a write: make storage agree with the registry.

        1. Finish the newest versions if a writer was stopped between its registry commit and
           finalization (walking back while the record still names a staging manifest).
        2. Move canonical manifests above the registered version to quarantine: Lance builds
           every commit on the newest manifest it finds on storage, registered or not.
        3. Refuse, with a typed error, to build on a registered version whose manifest is gone.

        Costs one registry read and one listing of ``_versions/`` per write. Returns the
        quarantined manifests (also noted in the pending commit's log entry)."""
        version = record.current_version
        while version > 0:
            item = self.store.get(keys.version(record.incarnation, version))
            if item is None or not self._finish_version(record, decode(VersionRecord, item.value, item.key),
                                                        item.revision, leased=True):
                break
            version -= 1
        storage = self._storage(record.location)
        on_disk = engine.canonical_manifests(record.location, storage)
        rogue = sorted(p for v, paths in on_disk.items() if v > record.current_version for p in paths)
        if rogue:
            log.warning("%s: manifests written around the registry moved to quarantine: %s", tname, rogue)
            engine.quarantine_files(record.location, rogue, f"unregistered-{new_id()}", storage)
            if pending is not None:
                pending.detail["quarantined_manifests"] = rogue
        if record.current_version > 0 and record.current_version not in on_disk:
            raise self._missing_manifest(tname, record.current_version)
        return rogue

    def _missing_manifest(self, tname: TableName, version: int) -> InvalidTableState:
        return InvalidTableState(f"version {version} of {tname} is registered but its manifest is missing from "
                                 "storage (deleted outside the catalog); nothing was changed")

    def repair_table(self, name: str, *, principal: Principal | None = None) -> dict[str, list[Any]]:
        """A maintenance step: finish every version whose writer stopped before finalizing it,
        and quarantine manifests written around the registry. Idempotent; changes no data."""
        who = self._who(principal)
        tname = TableName.parse(name)
        who.require(tname.project, "write", f"repair {tname}")
        record, _ = self._table(tname)
        with self.gate.hold(record.incarnation):
            record, _ = self._table(tname, incarnation=record.incarnation)
            finalized = self._finish_all(record, leased=True)
            try:
                quarantined = self._settle(tname, record)
            except InvalidTableState:
                quarantined = []  # a missing manifest is reported by reads and checks; nothing to repair
        return {"finalized": finalized, "quarantined": quarantined}

    def _enrich(self, tname: TableName, record: TableRecord, pending: PendingCommit,
                extra: dict[str, object] | None = None) -> None:
        """Add file counts to the commit-log entries once Lance's transaction can be read.

        The entry itself landed atomically with the version; this only completes its figures,
        and a failure here never fails the commit.
        """
        if not pending.landed or pending.operation == "append":
            return
        try:
            last_version, _ = pending.landed[-1]
            snap = self._open(tname, record.model_copy(update={"current_version": last_version}), last_version)
            for version, log_key in pending.landed:
                change = engine.change_stats(snap.dataset, version)
                patch: dict[str, object] = {"files_added": change.files_added, "files_removed": change.files_removed,
                                            "bytes_added": change.bytes_added, "bytes_removed": change.bytes_removed}
                if extra:
                    patch["detail"] = {**pending.detail, **extra}
                self._patch_log(log_key, patch)
        except LakeError:
            log.warning("could not complete commit-log figures for %s", tname, exc_info=True)

    def _patch_log(self, log_key: str, patch: dict[str, object]) -> None:
        for _ in range(3):
            item = self.store.get(log_key)
            if item is None:
                return
            entry = decode(CommitLogEntry, item.value, item.key)
            try:
                self.store.compare_and_swap(log_key, item.revision, entry.model_copy(update=patch).encode())
                return
            except ConcurrentModification:
                continue

    def _log_ops(self, target: str, operation: str, actor: str | None, *, commit_id: str | None = None,
                 run_id: str | None = None, incarnation: str | None = None, from_version: int | None = None,
                 to_version: int | None = None, detail: dict[str, object] | None = None,
                 marker: bool = True) -> list[Op]:
        commit_id = commit_id or new_id()
        at = now_ms()
        log_key = keys.log_entry(target, at, commit_id)
        entry = CommitLogEntry(commit_id=commit_id, target=target, operation=operation, actor=self._actor(actor),
                               run_id=run_id, at_ms=at, incarnation=incarnation, from_version=from_version,
                               to_version=to_version, detail=detail or {})
        ops: list[Op] = [Put(log_key, entry.encode(), ABSENT)]
        if marker:
            proof = CommitMarker(commit_id=commit_id, target=target, operation=operation, incarnation=incarnation,
                                 from_version=from_version, to_version=to_version, log_key=log_key, at_ms=at)
            ops.append(Put(keys.commit_marker(commit_id), proof.encode(), ABSENT))
        return ops


def _ver_rev(store: MetaStore, record: TableRecord, v: VersionRecord) -> int:
    """The revision cleanup deletes at: the record as it is now, which must still be untagged
    (a tag can only land under the lease cleanup holds, so this is the second line)."""
    item = store.get(keys.version(record.incarnation, v.version))
    if item is None:
        raise ConcurrentModification(f"version {v.version} vanished during cleanup")
    if decode(VersionRecord, item.value, item.key).tags:
        raise ConcurrentModification(f"version {v.version} was tagged during cleanup; nothing was removed")
    return item.revision


def _engine_tag(write: Callable[[], None], tname: TableName, tag: str) -> None:
    """Lance's copy of a tag, written after the registry committed it: a failure leaves the
    registry's answer standing (cleanup keeps the version), and repeating the call finishes it."""
    try:
        write()
    except Exception as exc:  # noqa: BLE001 - any engine failure is reported the same, retryable way
        raise ServiceUnavailable(f"tag {tag} of {tname} is committed, but Lance's copy could not be written "
                                 f"({_first_line(exc)}); repeat the call to finish it") from exc


def _table_location(root: str, tname: TableName, incarnation: str) -> str:
    return f"{root.rstrip('/')}/{'/'.join(tname.namespace)}/{tname.table}-{incarnation}.lance"


def _check_schema(schema: pa.Schema, table: str) -> None:
    if len(schema) == 0:
        raise TableSchemaValidationError(f"cannot create {table} without columns")
    for f in schema:
        if not f.name or f.name != f.name.strip():
            raise TableSchemaValidationError(f"invalid column name {f.name!r} in {table}")
    if len(set(schema.names)) != len(schema.names):
        raise TableSchemaValidationError(f"duplicate column names in {table}")


def _commit_id(commit_id: str | None) -> str:
    if commit_id is None:
        return new_id()
    if not isinstance(commit_id, str) or not 8 <= len(commit_id) <= 128 or not commit_id.replace("-", "").isalnum():
        raise InvalidInput("commit id must be 8-128 letters, digits or dashes")
    return commit_id


_THROTTLED = ("slowdown", "slow down", "throttl", "toomanyrequests", "429", "503 service unavailable",
              "request rate")
_UNAVAILABLE = ("timed out", "timeout", "connection reset", "connection refused", "broken pipe",
                "temporarily unavailable", "500 internal", "502", "503", "504", "dispatch failure", "io error")


def _transient_storage_error(exc: BaseException) -> LakeError | None:
    """Storage trouble worth retrying (S3 throttling, timeouts, 5xx), as a retryable typed error.

    Lance surfaces object-store errors as OSError/RuntimeError text; nothing was committed (the
    caller has already checked its commit id), so a retry is safe."""
    if not isinstance(exc, (OSError, RuntimeError)):
        return None
    text = str(exc).lower()
    if any(t in text for t in _THROTTLED):
        from lake_platform.errors import Throttling

        return Throttling(f"storage throttled the write: {_first_line(exc)}")
    if any(t in text for t in _UNAVAILABLE):
        return ServiceUnavailable(f"storage unavailable during the write: {_first_line(exc)}")
    return None


def _input_error(exc: BaseException) -> LakeError:
    """The input stream broke: report what broke it, not the engine's wrapper."""
    if isinstance(exc, LakeError):
        return exc
    if isinstance(exc, (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError)):
        return TableSchemaValidationError(f"data does not fit the table: {_first_line(exc)}")
    return InvalidInput(f"the input could not be read: {_first_line(exc)}")


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0][:300] if text else type(exc).__name__
