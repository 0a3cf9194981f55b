"""Adopting an existing Lance dataset as a table (the Lance Namespace's RegisterTable).

The dataset stays where it is and becomes a new incarnation of the table: its newest canonical
version is registered (older versions are not: the registry's history starts at the adoption,
and cleanup never touches what it does not know). Only a location the catalog could have given
the table is adopted:

- inside the table's warehouse root (canonicalised as warehouse roots are, ``roots.py``: a
  symlink resolved, ``..`` refused), never the root itself; so never the results area, the
  inbox or the platform's own files, which no warehouse root overlaps;
- never a folder a namespace's tables would be put in (every segment below the root a
  namespace name, ``<root>/ns2``): at least one segment no namespace can have;
- neither inside nor around another table's location, registered or in the trash (an expiring
  trash entry deletes its folder);
- a Lance dataset whose newest manifest keeps every file inside it (``table_files``: no shallow
  clone of another table).

Admin, like the other operations that decide where a table's data lives. One registry
transaction (table record, version record, commit-log entry ``register``), conditional on the
name being free and the namespace still there.
"""

from __future__ import annotations

from lake_platform.catalog import folder_claims, roots
from lake_platform.catalog.context import CatalogContext, Log, check_commit_id
from lake_platform.catalog.provenance import UNSTATED, Provenance
from lake_platform.catalog.results import CommitResult
from lake_platform.catalog.table_files import check_manifest
from lake_platform.engine import lance_engine as engine
from lake_platform.engine import manifests as engine_manifests
from lake_platform.errors import ConditionFailed, InvalidInput, NamespaceNotFound, TableAlreadyExists
from lake_platform.naming import SEGMENT, TableName
from lake_platform.registry import keys
from lake_platform.registry.records import TableRecord, VersionRecord, new_id
from lake_platform.registry.store import ABSENT, Check, Put


class Registrations:
    def __init__(self, ctx: CatalogContext) -> None:
        self.ctx = ctx

    def register_table(
        self,
        name: str,
        location: str,
        *,
        detail: dict[str, object] | None = None,
        by: Provenance = UNSTATED,
    ) -> CommitResult:
        """``detail`` goes into the log entry (an idempotent request's key and digest), and the
        commit is ``by.commit_id`` when given: one that landed already is refused with the rest
        (its marker), which a keyed caller looks up (``rest/idempotency.once``)."""
        # pyarrow loads on use: registry-only commands import catalog without it (cli/test_fast.py)
        from lake_platform.catalog.arrow_io import schema_to_ipc

        who = self.ctx.who(by.principal)
        tname = TableName.parse(name)
        if not isinstance(location, str) or not location.strip():
            raise InvalidInput("location is required (the Lance dataset's folder or s3:// prefix)")
        ns_item = self.ctx.require_parent(tname, who=who)
        who.require(tname.project, "admin", f"register a table in {tname.namespace_name}")
        if self.ctx.store.get(keys.table(tname)) is not None:
            raise TableAlreadyExists(f"table {tname} already exists")
        where = self._adoptable(tname, roots.canonical(location.removeprefix("file://")))
        storage = self.ctx.storage(where)
        found = engine_manifests.canonical_manifests(where, storage)
        if not found:
            raise InvalidInput(f"no Lance dataset at {location} (no manifest in its _versions/)")
        version = max(found)
        manifest_path = f"{_store_path(where)}/{found[version][0]}"
        check_manifest(where, manifest_path, storage)
        try:
            schema = engine.manifest_schema(where, manifest_path, storage)
        except ValueError:
            raise InvalidInput(f"the newest manifest at {location} is not a Lance manifest") from None
        incarnation, actor = new_id(), self.ctx.actor(by.actor, who)
        commit_id = check_commit_id(by.commit_id)
        record = TableRecord(
            name=str(tname),
            incarnation=incarnation,
            location=where,
            current_version=version,
            schema_ipc_b64=TableRecord.encode_schema(schema_to_ipc(schema)),
            created_by=actor,
        )
        stem = found[version][0].rpartition("/")[2].partition(".")[0]
        registered = VersionRecord(
            incarnation=incarnation,
            version=version,
            manifest_path=manifest_path,
            naming_scheme="V2" if len(stem) == 20 else "V1",
            commit_id=commit_id,
        )
        ops = [
            Put(keys.table(tname), record.encode(), ABSENT),
            Put(keys.version(incarnation, version), registered.encode(), ABSENT),
            Check(ns_item.key, ns_item.revision),
        ]
        if folder_claims.is_odd(roots.canonical(where, strict=False), self._root(tname)):
            ops.append(folder_claims.odd_folder_put(incarnation, str(tname), where))
        entry = Log(
            str(tname),
            "register",
            actor,
            commit_id=commit_id,
            incarnation=incarnation,
            to_version=version,
            detail={**(detail or {}), "location": where},
        )
        try:
            self.ctx.commit(ops, log=entry)
        except ConditionFailed as exc:
            if exc.key == keys.table(tname):
                raise TableAlreadyExists(f"table {tname} already exists") from None
            raise NamespaceNotFound(
                f"namespace {tname.namespace_name} changed during the registration"
            ) from None
        return CommitResult(commit_id, str(tname), "register", None, version)

    def _root(self, tname: TableName) -> roots.Root:
        return roots.canonical(self.ctx.warehouse(tname.warehouse_name).root, strict=False)

    def _adoptable(self, tname: TableName, where: roots.Root) -> str:
        """``where`` as a location, if the table may live there (module docstring)."""
        root = self._root(tname)
        if not where.within(root) or where == root:
            raise InvalidInput(f"the location is not inside warehouse {tname.warehouse_name}'s root")
        inner = where.parts[len(root.parts) :]
        if all(SEGMENT.fullmatch(part) for part in inner):
            # The folder of namespace ".".join(inner): its tables would be put inside the adopted
            # one, and a purge of it (recursive) or an orphan reclaim would take their files.
            raise InvalidInput(
                f"the location is where the tables of namespace {'.'.join(inner)} would be put; adopt "
                "a folder whose name no namespace can have (e.g. ending in .lance)"
            )
        for other in folder_claims.every_claim(self.ctx.store, where):
            if roots.canonical(other.folder_uri.removeprefix("file://"), strict=False).overlaps(where):
                raise InvalidInput(f"the location overlaps table {other.name}'s")
        return str(where)


def _store_path(location: str) -> str:
    """A location as object-store paths name it (what version records hold): no scheme, no
    bucket, no leading slash."""
    if location.startswith(roots.S3):
        return location[len(roots.S3) :].partition("/")[2].rstrip("/")
    return location.lstrip("/").rstrip("/")
