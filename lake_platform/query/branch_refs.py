"""Branch reads in SQL: ``"t@branch:dev"`` (the branch's head) and ``"t@branch:dev@v3"``.

A branch moves independently of the catalog snapshot, so its head is read from the registry
per query (one ``get_many`` of the branch record and its version record), like REST's
read-your-writes head (``snapshot_head``): the request path's one registry read, only for a
query that names a branch. The ref carries the branch's chain id, dataset root and version, so a
ticket pins exactly the branch version planned and any replica serves it without the registry.
A plan that read a branch's head is never kept (``QueryEngine.plan``): the next query reads the
head again.
"""

from __future__ import annotations

from lake_platform.errors import TableBranchNotFound, TableVersionNotFound
from lake_platform.query.snapshot import CachedTable, TableRef
from lake_platform.registry import keys
from lake_platform.registry.records import BranchRecord, VersionRecord, decode
from lake_platform.registry.store import MetaStore


class BranchRefs:
    """Resolves branch selectors against the registry."""

    def __init__(self, store: MetaStore) -> None:
        self.store = store

    def resolve(
        self, cached: CachedTable, branch: str, version: int | None, at: str, sql_name: str
    ) -> TableRef:
        """The ref of ``branch``'s head (``version`` None) or of its ``version``, written ``at``.

        TableBranchNotFound: no such branch of this incarnation (or it is in the trash);
        TableVersionNotFound: the branch has no such version."""
        item = self.store.get(keys.branch(cached.name, branch))
        rec = decode(BranchRecord, item.value, item.key) if item is not None else None
        if rec is None or rec.table_incarnation != cached.record.incarnation or rec.state != "active":
            raise TableBranchNotFound(f"no branch {branch} on {sql_name}")
        wanted = version or rec.current_version
        found = None
        if rec.parent_version <= wanted <= rec.current_version:
            found = self.store.get(keys.version(rec.incarnation, wanted))
        if found is None:
            raise TableVersionNotFound(f"version {wanted} of branch {branch} of {sql_name} does not exist")
        ver = decode(VersionRecord, found.value, found.key)
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
