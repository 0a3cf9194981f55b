"""The catalog as a Lance Namespace, so pylance itself is a governed client of the registry.

``lance.write_dataset(data, namespace_client=LakeNamespace(catalog), table_id=[p, w, ns, t],
mode="create")`` declares and commits a registered table; ``lance.dataset(namespace_client=...,
table_id=...)`` opens the registered version, not the newest manifest on disk. Every operation
goes through the same catalog doors (identity, shape, parent, permission, conflict) as the CLI,
and every change lands in the commit log. Operations with no catalog meaning raise the spec's
Unsupported error (the base class does that).

Identifiers: ``[project]``, ``[project, warehouse]``, ``[project, warehouse, ns, ...]`` name
containers; a table id is a namespace id plus the table name.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import lance_namespace.errors as ns_errors
from lance_namespace import LanceNamespace
from lance_namespace_urllib3_client.models import (
    CreateNamespaceResponse,
    CreateTableTagResponse,
    CreateTableVersionResponse,
    DeclareTableResponse,
    DeleteTableTagResponse,
    DeregisterTableResponse,
    DescribeNamespaceResponse,
    DescribeTableResponse,
    DescribeTableVersionResponse,
    DropNamespaceResponse,
    DropTableResponse,
    GetTableTagVersionResponse,
    ListNamespacesResponse,
    ListTablesResponse,
    ListTableTagsResponse,
    ListTableVersionsResponse,
    TagContents,
    UpdateTableTagResponse,
)

from lake_platform.catalog.listings import Paging, warehouse_names
from lake_platform.catalog.namespace import BoundTableNamespace, int_field, request_field
from lake_platform.catalog.pending import PendingCommit
from lake_platform.catalog.principals import Principal
from lake_platform.catalog.provenance import Provenance
from lake_platform.catalog.pylance_commits import VersionCommits, ensure_published, mode_of, request_ids
from lake_platform.catalog.transaction_recovery import committed_head
from lake_platform.engine import lance_engine as engine
from lake_platform.errors import (
    InvalidInput,
    LakeError,
    NamespaceAlreadyExists,
    NamespaceNotFound,
    TableNotFound,
    Unsupported,
)
from lake_platform.naming import NamespaceName, ProjectName, TableName, WarehouseName
from lake_platform.registry import keys
from lake_platform.registry.records import (
    ProjectRecord,
    TableRecord,
    VersionRecord,
    decode,
)
from lake_platform.registry.store import Item

if TYPE_CHECKING:
    from lake_platform.catalog.catalog import Catalog


class LakeNamespace(LanceNamespace):
    def __init__(
        self,
        catalog: Catalog,
        principal: Principal | None = None,
        *,
        vend: Callable[[str, str], dict[str, str] | None] | None = None,
        commit: tuple[str, dict[str, object]] | None = None,
    ) -> None:
        """``vend(project, location)``: the storage options DescribeTable and DeclareTable hand
        the client (the REST server's choice, ``rest/credentials.py``); by default the
        catalog's own, as a process that has them anyway needs. ``commit``: the commit id and
        log detail of the one container create or drop made through this namespace (a REST
        request's idempotency key, ``rest/idempotency.py``)."""
        self.catalog = catalog
        self.principal = principal or catalog.principal
        #: Every catalog call is made as the namespace's principal.
        self.by = Provenance(principal=self.principal, commit_id=commit[0] if commit else None)
        self.detail = commit[1] if commit else {}
        self._commits = VersionCommits(catalog, self.principal)
        self._vend = vend

    def _vended(self, tname: TableName, location: str) -> dict[str, str] | None:
        if self._vend is not None:
            return self._vend(tname.project, location)
        return self.catalog.settings.storage_options(location) or None

    def namespace_id(self) -> str:
        return f"LakeNamespace {{ registry: {self.catalog.store.url!r}, principal: {self.principal.name!r} }}"

    # Every public operation runs through _call, which turns our typed errors into the spec's.
    def _call(self, fn: Any, *args: Any) -> Any:
        try:
            return fn(*args)
        except LakeError as exc:
            raise ns_errors.from_error_code(int(exc.code), exc.message) from None

    # -- containers ------------------------------------------------------------------------

    def list_namespaces(self, request: Any) -> ListNamespacesResponse:
        """Paged as REST pages (``listings.Paging``: ``limit``, ``page_token``, checked first)."""

        def listing() -> ListNamespacesResponse:
            asked = Paging.asked(request_field(request, "limit"), request_field(request, "page_token"))
            names, token = asked.of(self._namespace_names(request_ids(request), asked))
            return ListNamespacesResponse(namespaces=names, page_token=token)

        return self._call(listing)

    def _namespace_names(self, ident: list[str], asked: Paging) -> list[str]:
        store, who = self.catalog.store, self.principal
        if not ident:
            names = [decode(ProjectRecord, i.value).name for i in store.scan_prefix(keys.projects())]
            return [n for n in names if who.can(n, "read")]
        self._container(ident)
        if len(ident) == 1:  # a project's warehouses: few
            return warehouse_names(store, ident[0])
        # One page read from the registry, never the whole listing (nor what is nested in it).
        return self.catalog.reads.namespaces_in(
            ".".join(ident), after=asked.after, limit=asked.read_limit, by=self.by
        )

    def describe_namespace(self, request: Any) -> DescribeNamespaceResponse:
        return self._call(lambda: DescribeNamespaceResponse(properties=self._container(request_ids(request))))

    def namespace_exists(self, request: Any) -> None:
        self._call(self._container, request_ids(request))

    def create_namespace(self, request: Any) -> CreateNamespaceResponse:
        """``mode`` (any case, ``_`` optional): create (default), exist_ok (an existing one is
        answered as created), overwrite (refused: it would drop what the namespace holds)."""
        ident = request_ids(request)

        def create() -> CreateNamespaceResponse:
            mode = mode_of(request, "mode", ("create", "exist_ok", "overwrite"), "create")
            text = ".".join(ident)
            try:
                if len(ident) == 1:
                    self.catalog.containers.create_project(text, detail=self.detail, by=self.by)
                elif len(ident) == 2:
                    self.catalog.containers.create_warehouse(text, detail=self.detail, by=self.by)
                else:
                    self.catalog.containers.create_namespace(text, detail=self.detail, by=self.by)
            except NamespaceAlreadyExists:
                if mode == "exist_ok":
                    return CreateNamespaceResponse(properties=self._container(ident))
                if mode == "overwrite":
                    raise Unsupported(
                        "CreateNamespace mode overwrite: drop the namespace (to the trash) first, "
                        "then create it"
                    ) from None
                raise
            return CreateNamespaceResponse(properties={})

        return self._call(create)

    def drop_namespace(self, request: Any) -> DropNamespaceResponse:
        ident = request_ids(request)

        def drop() -> DropNamespaceResponse:
            cascade = mode_of(request, "behavior", ("restrict", "cascade"), "restrict") == "cascade"
            text = ".".join(ident)
            if len(ident) == 1:
                if cascade:
                    raise InvalidInput("a project has no cascade drop")
                self.catalog.containers.drop_project(text, detail=self.detail, by=self.by)
            elif len(ident) == 2:
                self.catalog.containers.drop_warehouse(text, detail=self.detail, by=self.by)
            else:
                self.catalog.cascade.drop_namespace(text, cascade=cascade, detail=self.detail, by=self.by)
            return DropNamespaceResponse(properties={})

        return self._call(drop)

    def _container(self, ident: list[str]) -> dict[str, str]:
        if not ident:
            return {}
        text = ".".join(ident)
        if len(ident) == 1:
            key, kind = keys.project(ProjectName.parse(text)), "project"
        elif len(ident) == 2:
            key, kind = keys.warehouse(WarehouseName.parse(text)), "warehouse"
        else:
            key, kind = keys.namespace(NamespaceName.parse(text)), "namespace"
        if not self.principal.can(ident[0], "read") or self.catalog.store.get(key) is None:
            raise NamespaceNotFound(f"{kind} {text} does not exist")
        return {"kind": kind}

    # -- tables ----------------------------------------------------------------------------

    def list_tables(self, request: Any) -> ListTablesResponse:
        """Paged as REST pages (``listings.Paging``: ``limit``, ``page_token``, checked first)."""

        def listing() -> ListTablesResponse:
            asked = Paging.asked(request_field(request, "limit"), request_field(request, "page_token"))
            ident = request_ids(request)
            if len(ident) < 3:
                raise InvalidInput("tables live in namespaces: give project, warehouse and namespace")
            self._container(ident)
            records = self.catalog.reads.tables_in(  # one page read from the registry
                ".".join(ident),
                after=asked.after,
                limit=asked.read_limit,
                declared=bool(request_field(request, "include_declared")),
                by=self.by,
            )
            page, token = asked.of([r.name.rsplit(".", 1)[1] for r in records])
            return ListTablesResponse(tables=page, page_token=token)

        return self._call(listing)

    def describe_table(self, request: Any) -> DescribeTableResponse:
        def describe() -> DescribeTableResponse:
            tname = self._table_name(request)
            record = self._record(tname, declared=True, head=True)
            version = int_field(request, "version", required=False)
            return DescribeTableResponse(
                location=record.location,
                table_uri=record.location,
                managed_versioning=True,
                version=version or record.current_version or None,
                storage_options=self._vended(tname, record.location),
                is_only_declared=record.current_version == 0,
            )

        return self._call(describe)

    def table_exists(self, request: Any) -> None:
        self._call(lambda: self._record(self._table_name(request)))

    def declare_table(self, request: Any) -> DeclareTableResponse:
        def declare() -> DeclareTableResponse:
            tname = self._table_name(request)
            if request_field(request, "location"):
                raise InvalidInput("locations are assigned by the catalog (unique per incarnation)")
            record = self.catalog.tables.declare_table(str(tname), by=self.by)
            return DeclareTableResponse(
                location=record.location,
                managed_versioning=True,
                storage_options=self._vended(tname, record.location),
            )

        return self._call(declare)

    def drop_table(self, request: Any) -> DropTableResponse:
        def drop() -> DropTableResponse:
            tname = self._table_name(request)
            record = self._record(tname, declared=True)
            self.catalog.trash.drop_table(str(tname), by=self.by)
            return DropTableResponse(id=tname.parts, location=record.location)

        return self._call(drop)

    def deregister_table(self, request: Any) -> DeregisterTableResponse:
        # Deregistering keeps the data: exactly a recoverable drop into the trash.
        def deregister() -> DeregisterTableResponse:
            tname = self._table_name(request)
            record = self._record(tname, declared=True)
            self.catalog.trash.drop_table(str(tname), by=self.by)
            return DeregisterTableResponse(id=tname.parts, location=record.location)

        return self._call(deregister)

    # -- versions: the managed-versioning bridge ----------------------------------------------

    def list_table_versions(self, request: Any) -> ListTableVersionsResponse:
        def listing() -> ListTableVersionsResponse:
            tname = self._table_name(request)
            record = self._record(tname, declared=True)
            base = None
            if record.current_version:
                record, item = self._listed_head(record)
                base = self._finish(tname, record, record.current_version, item)
            # The record was read just now (finishing touches only the version record): Lance's
            # "latest version?" needs no second read of it, nor of the version record.
            return self._bound_to(tname, record, fresh=True, base=base).list_table_versions(request)

        return self._call(listing)

    def describe_table_version(self, request: Any) -> DescribeTableVersionResponse:
        def describe() -> DescribeTableVersionResponse:
            tname = self._table_name(request)
            record = self._record(tname)
            version = int_field(request, "version")
            if version == record.current_version + 1:  # maybe a committed commit's its head lags
                record = self._record(tname, head=True)
            if version <= record.current_version:  # above the head: not reachable (branch_publish)
                self._finalize(tname, record, version)
            return self._bound_to(tname, record).describe_table_version(request)

        return self._call(describe)

    def create_table_version(
        self, request: Any, check: Callable[[TableRecord], None] | None = None
    ) -> CreateTableVersionResponse:
        """See ``VersionCommits.create``."""
        return self._call(lambda: self._commits.create(request, check))

    def _listed_head(self, record: TableRecord) -> tuple[TableRecord, Item | None]:
        """``record`` as DescribeTable sees it (a committed multi-table commit its head lags is
        seen, and completed: ``transaction_recovery.committed_head``), and the item of that
        version. The version key above the head is read in the same multi-get as the head's
        own, so a listing makes as many registry round trips as before; one more get only when
        the head was lagging."""
        store = self.catalog.store
        head, above = store.get_many(
            [
                keys.version(record.incarnation, v)
                for v in (record.current_version, record.current_version + 1)
            ]
        )
        seen = committed_head(store, record, above)
        if seen.current_version == record.current_version:
            return seen, head
        return seen, store.get(keys.version(seen.incarnation, seen.current_version))

    def _finalize(self, tname: TableName, record: TableRecord, version: int) -> VersionRecord | None:
        """``_finish`` of ``version``, its record read here."""
        return self._finish(
            tname, record, version, self.catalog.store.get(keys.version(record.incarnation, version))
        )

    def _finish(
        self, tname: TableName, record: TableRecord, version: int, item: Item | None
    ) -> VersionRecord | None:
        """Versions committed by pylance stay at their staging manifest until first read; finish
        Lance's protocol once so later opens never write (see docs/architecture.md). Returns the
        version's record (``item``) when it was already final (None when it had to be finished).
        One registered at its canonical path must have its file there (``ensure_published``)."""
        if item is None:
            return None
        ver = decode(VersionRecord, item.value, item.key)
        if not engine.is_staging_manifest(ver.manifest_path):
            known = self.catalog.published_versions.known(record.location, version)
            if ver.staged_from is not None and not known:
                ensure_published(self.catalog, tname, record, ver, item.revision)
            return ver
        pending = PendingCommit(
            commit_id=ver.commit_id, operation="commit", actor=self.principal.name, landed=[(version, "")]
        )
        self.catalog.manifests.finalize(record, pending)
        return None

    # -- tags ------------------------------------------------------------------------------

    def list_table_tags(self, request: Any) -> ListTableTagsResponse:
        def tags() -> ListTableTagsResponse:
            snap = self.catalog.reads.open_table(str(self._table_name(request)), by=self.by)
            found = engine.tag_details(snap.dataset)
            return ListTableTagsResponse(
                tags={t: TagContents(version=v, manifest_size=size) for t, (v, size) in found.items()}
            )

        return self._call(tags)

    def get_table_tag_version(self, request: Any) -> GetTableTagVersionResponse:
        def get() -> GetTableTagVersionResponse:
            snap = self.catalog.reads.open_table(str(self._table_name(request)), by=self.by)
            found = engine.tagged_versions(snap.dataset)
            tag = request_field(request, "tag")
            if tag not in found:
                from lake_platform.errors import TableTagNotFound

                raise TableTagNotFound(f"no tag {tag!r} on {snap.name}")
            return GetTableTagVersionResponse(version=found[tag])

        return self._call(get)

    def create_table_tag(self, request: Any) -> CreateTableTagResponse:
        def create() -> CreateTableTagResponse:
            tname = self._table_name(request)
            self.principal.require(tname.project, "write", f"tag {tname}")
            self.catalog.tags.create_tag(
                str(tname),
                str(request_field(request, "tag")),
                request_field(request, "version"),
                by=self.by,
            )
            return CreateTableTagResponse()

        return self._call(create)

    def delete_table_tag(self, request: Any) -> DeleteTableTagResponse:
        def delete() -> DeleteTableTagResponse:
            tname = self._table_name(request)
            self.principal.require(tname.project, "write", f"untag {tname}")
            self.catalog.tags.delete_tag(str(tname), str(request_field(request, "tag")), by=self.by)
            return DeleteTableTagResponse()

        return self._call(delete)

    def update_table_tag(self, request: Any) -> UpdateTableTagResponse:
        def update() -> UpdateTableTagResponse:
            tname = self._table_name(request)
            self.principal.require(tname.project, "write", f"tag {tname}")
            self.catalog.tags.create_tag(
                str(tname),
                str(request_field(request, "tag")),
                request_field(request, "version"),
                by=self.by,
                replace=True,
            )
            return UpdateTableTagResponse()

        return self._call(update)

    # -- helpers ---------------------------------------------------------------------------

    def _table_name(self, request: Any) -> TableName:
        return TableName.from_parts(request_ids(request))

    def _record(self, tname: TableName, declared: bool = False, *, head: bool = False) -> TableRecord:
        """``head``: as a reader sees it (``Reads.head``: a committed multi-table commit its
        head lags is seen, one more get), for answers naming the current version."""
        if not self.principal.can(tname.project, "read"):
            raise TableNotFound(f"table {tname} does not exist")
        if head:
            return self.catalog.reads.head(tname, declared=declared)
        return self.catalog.ctx.table(tname, declared=declared)[0]

    def _bound(self, request: Any) -> BoundTableNamespace:
        tname = self._table_name(request)
        return self._bound_to(tname, self._record(tname, declared=True))

    def _bound_to(
        self, tname: TableName, record: TableRecord, *, fresh: bool = False, base: VersionRecord | None = None
    ) -> BoundTableNamespace:
        return BoundTableNamespace(
            self.catalog.store,
            tname,
            record,
            0,
            storage_options=self.catalog.settings.storage_options(record.location),
            fresh=fresh,
            base=base,
        )
