"""The catalog: the one authority every entry point (CLI, Dagster, Flight, REST) goes through.

``Catalog`` builds the services over one shared ``CatalogContext`` (``ctx``) and exposes them;
each service does one job: ``containers`` (projects, warehouses, namespaces), ``cascade``
(namespace drops), ``tables`` (the write path), ``schemas`` (a table's schema and what
inputs do to it), ``reads`` (the read path), ``manifests``
(finalize and repair), ``versions`` (compaction, cleanup, purge), ``indexes``, ``tags``,
``trash``, ``policies``, ``access`` (users and tokens), ``alter`` (explicit schema changes),
``restores`` (a table back to an older version), ``renames`` (a table's registration under
a new name), ``rows`` (updates, merge-inserts and replace-where of a table's rows), ``registrations``
(adopting an existing Lance dataset), ``branches``, ``branch_writes``, ``branch_publish``, ``branch_trash``,
``branch_compaction``, ``branch_changes``, ``branch_versions``, ``branch_history`` and ``branch_indexes``
(branches of a table: create, list, open; writes and publishing; delete, undrop, purge; compaction;
updates, merge-inserts, deletes and schema changes; a Lance client's staged manifest committed on a
branch; a branch restored, its versions deleted; its indexes built, refreshed, dropped),
``inventory`` (what the registry names, for scans) and ``reports`` (maintenance reports and
events). Every change ends in a registry commit with a commit-log entry
(``CatalogContext.commit``); every destructive step is conditional.
"""

from __future__ import annotations

from lake_platform.catalog.access import Access
from lake_platform.catalog.alter import Alter
from lake_platform.catalog.branch_changes import BranchChanges
from lake_platform.catalog.branch_compaction import BranchCompaction
from lake_platform.catalog.branch_history import BranchHistory
from lake_platform.catalog.branch_indexes import BranchIndexes
from lake_platform.catalog.branch_publish import BranchPublish
from lake_platform.catalog.branch_trash import BranchTrash
from lake_platform.catalog.branch_versions import BranchVersions
from lake_platform.catalog.branch_writes import BranchWrites
from lake_platform.catalog.branches import Branches
from lake_platform.catalog.cascade import NamespaceDrops
from lake_platform.catalog.clock import Clock, SystemClock
from lake_platform.catalog.containers import Containers
from lake_platform.catalog.context import CatalogContext, Hook, Log
from lake_platform.catalog.engine_commits import EngineCommits
from lake_platform.catalog.gate import WriteGate
from lake_platform.catalog.indexes import Indexes
from lake_platform.catalog.inventory import Inventory
from lake_platform.catalog.manifests import Manifests
from lake_platform.catalog.policies import Policies
from lake_platform.catalog.principals import LOCAL_ADMIN, Principal
from lake_platform.catalog.provenance import Provenance
from lake_platform.catalog.published_versions import PublishedVersions
from lake_platform.catalog.reads import Reads, TableSnapshot
from lake_platform.catalog.register import Registrations
from lake_platform.catalog.rename import Renames
from lake_platform.catalog.reports import Reports
from lake_platform.catalog.restore import Restores
from lake_platform.catalog.row_changes import RowChanges
from lake_platform.catalog.schemas import Schemas
from lake_platform.catalog.tables import Tables
from lake_platform.catalog.tags import Tags
from lake_platform.catalog.transaction import Transaction
from lake_platform.catalog.trash import Trash
from lake_platform.catalog.versions import Versions
from lake_platform.registry.factory import open_metastore
from lake_platform.registry.store import MetaStore
from lake_platform.settings import LakeSettings

__all__ = ["Catalog", "Hook", "Log", "Provenance", "TableSnapshot"]


class Catalog:
    """Every service operation takes an optional ``by: Provenance`` (who asks: default the
    catalog's own ``principal``, the local admin for the CLI; the actor, run and commit id its
    change is logged under) and checks, in order: identity, shape, parent, permission,
    conflict."""

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
        self.policies = Policies(self.ctx)
        self.manifests = Manifests(self.ctx)
        self.reads = Reads(self.ctx, self.manifests)
        commits = EngineCommits(self.ctx, self.manifests, self.reads)
        self.schemas = Schemas(self.ctx, commits)
        self.tables = Tables(self.ctx, commits, self.schemas)
        self.versions = Versions(self.ctx, commits, self.reads)
        self.indexes = Indexes(self.ctx, commits, self.reads)
        self.tags = Tags(self.ctx, self.reads)
        self.trash = Trash(self.ctx, self.policies, self.versions)
        self.containers = Containers(self.ctx, self.policies, self.trash)
        self.cascade = NamespaceDrops(self.ctx, self.policies, self.trash)
        self.access = Access(self.ctx)
        self.alter = Alter(self.ctx, commits)
        self.restores = Restores(self.ctx, commits)
        self.renames = Renames(self.ctx, self.policies)
        self.rows = RowChanges(self.ctx, commits, self.schemas)
        self.registrations = Registrations(self.ctx)
        self.inventory = Inventory(self.ctx)
        self.reports = Reports(self.ctx)
        self.branches = Branches(self.ctx, self.reads)
        self.branch_writes = BranchWrites(self.ctx, self.branches, commits, self.schemas)
        self.branch_publish = BranchPublish(self.ctx, self.branches)
        self.branch_trash = BranchTrash(self.ctx, self.branches, self.policies)
        self.branch_compaction = BranchCompaction(self.ctx, self.branches, commits)
        self.branch_changes = BranchChanges(self.ctx, self.branches, commits)
        self.branch_versions = BranchVersions(self.ctx, self.branches, commits)
        self.branch_history = BranchHistory(self.ctx, self.branches, commits)
        self.branch_indexes = BranchIndexes(self.ctx, self.branches, commits)
        #: The versions Lance clients' commits and listings through this catalog found published.
        self.published_versions = PublishedVersions()
        self.trash.also_expire = self.branch_trash.expire_branches

    def transaction(self, *, by: Provenance | None = None) -> Transaction:
        """An atomic multi-table commit: ``with catalog.transaction() as tx: tx.append(...)``
        (``transaction``): every table's new version becomes visible together, or none does."""
        return Transaction(self.tables, by if by is not None else Provenance())

    def close(self) -> None:
        self.gate.close()
        self.store.close()

    def __enter__(self) -> Catalog:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
