"""The catalog: the one authority every entry point (CLI, Dagster, Flight) goes through.

A thin façade: each operation is done by one service over a shared ``CatalogContext``
(``context``): ``containers`` (projects, warehouses, namespaces), ``cascade`` (namespace
drops), ``tables`` (write and read path), ``manifests`` (finalize and repair), ``versions``
(compaction, cleanup, purge), ``tags``, ``trash``, ``policies`` and ``access``. Every change
ends in a registry commit with a commit-log entry (``CatalogContext.commit``); every
destructive step is conditional.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from lake_platform.catalog.access import Access
from lake_platform.catalog.alter import Alter
from lake_platform.catalog.cascade import NamespaceDrops
from lake_platform.catalog.clock import Clock, SystemClock
from lake_platform.catalog.containers import Containers
from lake_platform.catalog.context import CatalogContext, Hook, Log
from lake_platform.catalog.indexes import Indexes
from lake_platform.catalog.inventory import Inventory
from lake_platform.catalog.lease import WriteGate
from lake_platform.catalog.manifests import Manifests
from lake_platform.catalog.policies import EffectivePolicy, Policies, PolicyRecord
from lake_platform.catalog.principals import LOCAL_ADMIN, Principal, TokenRecord, UserRecord
from lake_platform.catalog.reads import Reads, TableSnapshot
from lake_platform.catalog.reports import Reports
from lake_platform.catalog.results import CommitResult, MaintenanceResult, PlannedCompaction, TableInfo
from lake_platform.catalog.tables import Tables
from lake_platform.catalog.tags import Tags
from lake_platform.catalog.trash import Trash
from lake_platform.catalog.versions import Versions
from lake_platform.naming import TableName, WarehouseName
from lake_platform.registry.factory import open_metastore
from lake_platform.registry.records import (
    CommitLogEntry,
    CommitMarker,
    NamespaceRecord,
    ProjectRecord,
    TableRecord,
    TrashRecord,
    WarehouseRecord,
)
from lake_platform.registry.store import MetaStore
from lake_platform.settings import LakeSettings

if TYPE_CHECKING:
    import pyarrow as pa

    from lake_platform.catalog.evolution import SchemaChange
    from lake_platform.engine.indexes import IndexInfo

__all__ = ["Catalog", "Hook", "Log", "TableSnapshot"]


class Catalog:
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
        self.ctx = CatalogContext(settings, self.store, self.clock, self.gate, principal, hook)
        self._policies = Policies(self.ctx)
        self._manifests = Manifests(self.ctx)
        self._reads = Reads(self.ctx, self._manifests)
        self._tables = Tables(self.ctx, self._manifests, self._reads)
        self._versions = Versions(self.ctx, self._tables, self._reads)
        self._indexes = Indexes(self.ctx, self._tables, self._reads)
        self._tags = Tags(self.ctx, self._reads)
        self._trash = Trash(self.ctx, self._policies, self._versions)
        self._containers = Containers(self.ctx, self._policies, self._trash)
        self._cascade = NamespaceDrops(self.ctx, self._policies, self._trash)
        self._access = Access(self.ctx)
        self._alter = Alter(self.ctx, self._tables)
        self.inventory = Inventory(self.ctx)
        self.reports = Reports(self.ctx)

    def close(self) -> None:
        self.gate.close()
        self.store.close()

    def __enter__(self) -> Catalog:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # Shared steps some callers (maintenance, tests) still reach for by their old names.

    def _who(self, principal: Principal | None) -> Principal:
        return self.ctx.who(principal)

    def _actor(self, actor: str | None, who: Principal | None = None) -> str:
        return self.ctx.actor(actor, who)

    def _table(
        self, tname: TableName, *, incarnation: str | None = None, declared: bool = False
    ) -> tuple[TableRecord, int]:
        return self.ctx.table(tname, incarnation=incarnation, declared=declared)

    # -- containers --------------------------------------------------------------------------------

    def create_namespace(
        self, name: str, *, actor: str | None = None, principal: Principal | None = None
    ) -> NamespaceRecord:
        return self._containers.create_namespace(name, actor=actor, principal=principal)

    def create_project(
        self, name: str, *, actor: str | None = None, principal: Principal | None = None
    ) -> ProjectRecord:
        return self._containers.create_project(name, actor=actor, principal=principal)

    def create_warehouse(
        self,
        name: str,
        *,
        root: str | None = None,
        actor: str | None = None,
        principal: Principal | None = None,
    ) -> WarehouseRecord:
        return self._containers.create_warehouse(name, root=root, actor=actor, principal=principal)

    def drop_namespace(
        self,
        name: str,
        *,
        cascade: bool = False,
        force: bool = False,
        purge: bool = False,
        principal: Principal | None = None,
    ) -> CommitResult:
        return self._cascade.drop_namespace(
            name, cascade=cascade, force=force, purge=purge, principal=principal
        )

    def drop_project(self, name: str, *, principal: Principal | None = None) -> CommitResult:
        return self._containers.drop_project(name, principal=principal)

    def drop_warehouse(
        self, name: str, *, force: bool = False, principal: Principal | None = None
    ) -> CommitResult:
        return self._containers.drop_warehouse(name, force=force, principal=principal)

    def set_protected(
        self,
        name: str,
        protected: bool = True,
        *,
        kind: str | None = None,
        principal: Principal | None = None,
    ) -> None:
        return self._containers.set_protected(name, protected, kind=kind, principal=principal)

    # -- schema changes (``lake table alter``) ------------------------------------------------

    def add_column(
        self,
        name: str,
        column: str,
        type_name: str,
        *,
        principal: Principal | None = None,
        actor: str | None = None,
    ) -> CommitResult:
        return self._alter.add_column(name, column, type_name, principal=principal, actor=actor)

    def drop_column(
        self, name: str, column: str, *, principal: Principal | None = None, actor: str | None = None
    ) -> CommitResult:
        return self._alter.drop_column(name, column, principal=principal, actor=actor)

    def rename_column(
        self,
        name: str,
        old: str,
        new: str,
        *,
        principal: Principal | None = None,
        actor: str | None = None,
    ) -> CommitResult:
        return self._alter.rename_column(name, old, new, principal=principal, actor=actor)

    # -- tables --------------------------------------------------------------------------------

    def append(
        self,
        name: str,
        data: pa.RecordBatchReader,
        *,
        actor: str | None = None,
        run_id: str | None = None,
        commit_id: str | None = None,
        detail: dict[str, object] | None = None,
        principal: Principal | None = None,
        markers: Sequence[CommitMarker] = (),
    ) -> CommitResult:
        return self._tables.append(
            name,
            data,
            actor=actor,
            run_id=run_id,
            commit_id=commit_id,
            detail=detail,
            principal=principal,
            markers=markers,
        )

    def table_schema(self, name: str, *, principal: Principal | None = None) -> pa.Schema:
        """The table's registered Arrow schema (from the registry; no engine call)."""
        return self._tables.table_schema(name, principal=principal)

    def plan_input(
        self,
        name: str,
        schemas: Sequence[pa.Schema],
        *,
        labels: Sequence[str] | None = None,
        principal: Principal | None = None,
    ) -> SchemaChange:
        """What appending inputs of ``schemas`` in one commit does to the table's schema under its
        ``schema_evolution`` policy (``SchemaChange.target`` is the schema to stream them as);
        TableSchemaValidationError if the policy refuses them. Reads only the registry."""
        return self._tables.plan_input(name, schemas, labels=labels, principal=principal)

    def create_table(
        self,
        name: str,
        data: pa.RecordBatchReader,
        *,
        actor: str | None = None,
        run_id: str | None = None,
        commit_id: str | None = None,
        principal: Principal | None = None,
    ) -> CommitResult:
        return self._tables.create_table(
            name, data, actor=actor, run_id=run_id, commit_id=commit_id, principal=principal
        )

    def declare_table(
        self, name: str, *, principal: Principal | None = None, actor: str | None = None
    ) -> TableRecord:
        return self._tables.declare_table(name, principal=principal, actor=actor)

    def delete_rows(
        self,
        name: str,
        predicate: str,
        *,
        actor: str | None = None,
        run_id: str | None = None,
        commit_id: str | None = None,
        principal: Principal | None = None,
    ) -> CommitResult:
        return self._tables.delete_rows(
            name, predicate, actor=actor, run_id=run_id, commit_id=commit_id, principal=principal
        )

    def update_schema_metadata(
        self, name: str, values: dict[str, str | None], *, principal: Principal | None = None
    ) -> tuple[CommitResult, dict[str, str]]:
        return self._tables.update_schema_metadata(name, values, principal=principal)

    def describe_table(
        self, name: str, *, with_stats: bool = True, principal: Principal | None = None
    ) -> TableInfo:
        return self._reads.describe_table(name, with_stats=with_stats, principal=principal)

    def history(
        self, target: str, *, limit: int | None = None, principal: Principal | None = None
    ) -> list[CommitLogEntry]:
        return self._reads.history(target, limit=limit, principal=principal)

    def readable_versions(
        self, name: str, *, principal: Principal | None = None
    ) -> tuple[str, dict[int, list[str]]]:
        return self._reads.readable_versions(name, principal=principal)

    def list_tables(self, prefix: str = "", *, principal: Principal | None = None) -> Iterator[TableRecord]:
        return self._reads.list_tables(prefix, principal=principal)

    def log(
        self, prefix: str = "", *, limit: int | None = None, principal: Principal | None = None
    ) -> list[CommitLogEntry]:
        return self._reads.log(prefix, limit=limit, principal=principal)

    def open_table(
        self, name: str, version: int | None = None, *, principal: Principal | None = None
    ) -> TableSnapshot:
        return self._reads.open_table(name, version, principal=principal)

    def overwrite(
        self,
        name: str,
        data: pa.RecordBatchReader,
        *,
        actor: str | None = None,
        run_id: str | None = None,
        commit_id: str | None = None,
        detail: dict[str, object] | None = None,
        principal: Principal | None = None,
    ) -> CommitResult:
        return self._tables.overwrite(
            name, data, actor=actor, run_id=run_id, commit_id=commit_id, detail=detail, principal=principal
        )

    # -- manifests --------------------------------------------------------------------------------

    def finish_versions(self, name: str, *, principal: Principal | None = None) -> list[int]:
        return self._manifests.finish_versions(name, principal=principal)

    def repair_table(self, name: str, *, principal: Principal | None = None) -> dict[str, list[Any]]:
        return self._manifests.repair_table(name, principal=principal)

    # -- versions --------------------------------------------------------------------------------

    def cleanup(
        self,
        name: str,
        *,
        retention: timedelta,
        retain_versions: int = 1,
        actor: str | None = None,
        run_id: str | None = None,
        principal: Principal | None = None,
    ) -> MaintenanceResult:
        return self._versions.cleanup(
            name,
            retention=retention,
            retain_versions=retain_versions,
            actor=actor,
            run_id=run_id,
            principal=principal,
        )

    def commit_compaction(
        self,
        planned: PlannedCompaction,
        results: Sequence[str],
        *,
        actor: str | None = None,
        run_id: str | None = None,
        commit_id: str | None = None,
        principal: Principal | None = None,
    ) -> MaintenanceResult:
        return self._versions.commit_compaction(
            planned, results, actor=actor, run_id=run_id, commit_id=commit_id, principal=principal
        )

    # -- scalar indexes (each change a commit under the lease) -------------------------------------

    def list_indexes(self, name: str, *, principal: Principal | None = None) -> list[IndexInfo]:
        return self._indexes.list_indexes(name, principal=principal)

    def create_index(
        self,
        name: str,
        column: str,
        kind: str = "BTREE",
        *,
        replace: bool = False,
        actor: str | None = None,
        run_id: str | None = None,
        commit_id: str | None = None,
        principal: Principal | None = None,
    ) -> MaintenanceResult:
        return self._indexes.create_index(
            name,
            column,
            kind,
            replace=replace,
            actor=actor,
            run_id=run_id,
            commit_id=commit_id,
            principal=principal,
        )

    def refresh_indexes(
        self,
        name: str,
        names: Sequence[str] | None = None,
        *,
        actor: str | None = None,
        run_id: str | None = None,
        commit_id: str | None = None,
        principal: Principal | None = None,
    ) -> MaintenanceResult:
        return self._indexes.refresh_indexes(
            name, names, actor=actor, run_id=run_id, commit_id=commit_id, principal=principal
        )

    def drop_index(
        self,
        name: str,
        column: str,
        *,
        actor: str | None = None,
        run_id: str | None = None,
        commit_id: str | None = None,
        principal: Principal | None = None,
    ) -> MaintenanceResult:
        return self._indexes.drop_index(
            name, column, actor=actor, run_id=run_id, commit_id=commit_id, principal=principal
        )

    def compact(
        self,
        name: str,
        *,
        target_rows_per_fragment: int = 1048576,
        actor: str | None = None,
        run_id: str | None = None,
        commit_id: str | None = None,
        principal: Principal | None = None,
    ) -> MaintenanceResult:
        return self._versions.compact(
            name,
            target_rows_per_fragment=target_rows_per_fragment,
            actor=actor,
            run_id=run_id,
            commit_id=commit_id,
            principal=principal,
        )

    def create_tag(
        self,
        name: str,
        tag: str,
        version: int | None = None,
        *,
        principal: Principal | None = None,
        replace: bool = False,
    ) -> int:
        return self._tags.create_tag(name, tag, version, principal=principal, replace=replace)

    def delete_tag(self, name: str, tag: str, *, principal: Principal | None = None) -> None:
        return self._tags.delete_tag(name, tag, principal=principal)

    def list_tags(self, name: str, *, principal: Principal | None = None) -> dict[str, int]:
        return self._tags.list_tags(name, principal=principal)

    def execute_compaction(self, planned: PlannedCompaction) -> list[str]:
        return self._versions.execute_compaction(planned)

    def plan_compaction(
        self, name: str, *, target_rows_per_fragment: int = 1048576, principal: Principal | None = None
    ) -> PlannedCompaction:
        return self._versions.plan_compaction(
            name, target_rows_per_fragment=target_rows_per_fragment, principal=principal
        )

    def purge_storage(self, record: TableRecord) -> None:
        return self._versions.purge_storage(record)

    # -- trash --------------------------------------------------------------------------------

    def drop_table(
        self,
        name: str,
        *,
        purge: bool = False,
        force: bool = False,
        incarnation: str | None = None,
        principal: Principal | None = None,
        actor: str | None = None,
    ) -> CommitResult:
        return self._trash.drop_table(
            name, purge=purge, force=force, incarnation=incarnation, principal=principal, actor=actor
        )

    def expire_trash(
        self,
        now_ms: int | None = None,
        *,
        principal: Principal | None = None,
        actor: str | None = None,
        run_id: str | None = None,
        only: list[str] | None = None,
    ) -> list[CommitResult]:
        return self._trash.expire_trash(now_ms, principal=principal, actor=actor, run_id=run_id, only=only)

    def list_trash(self, prefix: str = "", *, principal: Principal | None = None) -> list[TrashRecord]:
        return self._trash.list_trash(prefix, principal=principal)

    def undrop_namespace(self, name: str, *, principal: Principal | None = None) -> CommitResult:
        return self._trash.undrop_namespace(name, principal=principal)

    def undrop_table(
        self,
        name: str,
        *,
        as_name: str | None = None,
        incarnation: str | None = None,
        principal: Principal | None = None,
    ) -> CommitResult:
        return self._trash.undrop_table(name, as_name=as_name, incarnation=incarnation, principal=principal)

    # -- policies --------------------------------------------------------------------------------

    def delete_policy(
        self, scope: str, *, principal: Principal | None = None, actor: str | None = None
    ) -> None:
        return self._policies.delete_policy(scope, principal=principal, actor=actor)

    def effective_policy(self, scope: str) -> EffectivePolicy:
        return self._policies.effective_policy(scope)

    def set_policy(
        self,
        scope: str,
        values: dict[str, Any],
        *,
        principal: Principal | None = None,
        actor: str | None = None,
    ) -> PolicyRecord:
        return self._policies.set_policy(scope, values, principal=principal, actor=actor)

    def unset_policy(
        self,
        scope: str,
        fields: Sequence[str],
        *,
        principal: Principal | None = None,
        actor: str | None = None,
    ) -> PolicyRecord:
        return self._policies.unset_policy(scope, fields, principal=principal, actor=actor)

    # -- access --------------------------------------------------------------------------------

    def add_user(
        self, name: str, *, project: str, role: str, password: str, principal: Principal | None = None
    ) -> UserRecord:
        return self._access.add_user(name, project=project, role=role, password=password, principal=principal)

    def authenticate_password(self, username: str, password: str) -> Principal:
        return self._access.authenticate_password(username, password)

    def authenticate_token(self, token: str) -> Principal:
        return self._access.authenticate_token(token)

    def create_token(
        self, name: str, *, project: str, role: str, principal: Principal | None = None
    ) -> tuple[TokenRecord, str]:
        return self._access.create_token(name, project=project, role=role, principal=principal)

    def list_tokens(self, *, principal: Principal | None = None) -> list[TokenRecord]:
        return self._access.list_tokens(principal=principal)

    def list_users(
        self, project: str | None = None, *, principal: Principal | None = None
    ) -> list[UserRecord]:
        return self._access.list_users(project, principal=principal)

    def remove_user(self, name: str, *, principal: Principal | None = None) -> None:
        return self._access.remove_user(name, principal=principal)

    def revoke_token(self, token_id: str, *, principal: Principal | None = None) -> TokenRecord:
        return self._access.revoke_token(token_id, principal=principal)

    # -- ctx --------------------------------------------------------------------------------

    def commit_landed(self, commit_id: str) -> CommitMarker | None:
        return self.ctx.commit_landed(commit_id)

    def warehouse(self, name: WarehouseName) -> WarehouseRecord:
        return self.ctx.warehouse(name)
