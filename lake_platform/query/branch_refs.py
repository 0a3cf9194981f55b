"""Branch reads in SQL: ``"t@branch:dev"`` (the branch's head) and ``"t@branch:dev@v3"``.

A branch moves independently of the catalog snapshot, so its head is read from the registry
per query (the branch record and its version record, through the catalog's
``branches.branch_version``: the catalog is the door to the registry), like REST's
read-your-writes head (``snapshot_head``): the request path's one registry read, only for a
query that names a branch. The ref carries the branch's chain id, dataset root and version, so a
ticket pins exactly the branch version planned and any replica serves it without the registry.
A plan that read a branch's head is never kept (``QueryEngine.plan``): the next query reads the
head again.
"""

from __future__ import annotations

from lake_platform.catalog.branches import branch_version
from lake_platform.errors import TableBranchNotFound, TableVersionNotFound
from lake_platform.query.snapshot import CachedTable, TableRef
from lake_platform.registry.store import MetaStore


class BranchRefs:
    """Resolves branch selectors against the registry."""

    def __init__(self, store: MetaStore) -> None:
        self.store = store

    def resolve(self, cached: CachedTable, branch: str, version: int | None, at: str) -> TableRef:
        """The ref of ``branch``'s head (``version`` None) or of its ``version``, written ``at``.

        TableBranchNotFound: no such branch of this incarnation (or it is in the trash);
        TableVersionNotFound: the branch has no such version."""
        try:
            rec, ver = branch_version(self.store, cached.name, cached.record.incarnation, branch, version)
        except TableBranchNotFound:
            raise TableBranchNotFound(f"no branch {branch} on {cached.name}") from None
        except TableVersionNotFound:
            raise TableVersionNotFound(
                f"version {version} of branch {branch} of {cached.name} does not exist"
            ) from None
        return TableRef(
            name=rec.name,
            engine=rec.engine,
            location=ver.location or rec.location,
            incarnation=rec.incarnation,
            version=ver.version,
            manifest_path=ver.manifest_path,
            manifest_size=ver.manifest_size,
            e_tag=ver.e_tag,
            committed_at_ms=ver.committed_at_ms,
            at=at,
        )


__all__ = ["BranchRefs"]
