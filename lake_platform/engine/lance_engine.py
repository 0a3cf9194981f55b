"""Lance operations. This package is the only code that imports ``lance``.

Every operation that creates a version goes through a namespace client with managed
versioning: Lance asks the namespace to register version N, so the registry arbitrates every
version number (invariant 2 by construction). The engine never decides what "latest" is.
"""

from __future__ import annotations

import datetime as dt
import os
import shutil
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache
from typing import TYPE_CHECKING, Any

# Lance warns on every managed-versioning commit that it keeps the staging manifest; that is the
# design (the catalog publishes the canonical manifest itself, right after the registry commit),
# so silence that one logger unless the user chose levels. Set on import of this module, before
# anything (``lance_module`` or ``references``) imports lance.
os.environ.setdefault("LANCE_LOG", "warn,lance_table::io::commit::external_manifest=error")

if TYPE_CHECKING:
    import lance
    import pyarrow as pa
    from lance_namespace import LanceNamespace

# Callers reach every engine operation as ``lance_engine.<name>``; the storage and manifest
# helpers live in their own modules and are re-exported here.
from lake_platform.engine.manifests import PUBLISH_GRACE_SECONDS as PUBLISH_GRACE_SECONDS
from lake_platform.engine.manifests import QUARANTINE_DIR as QUARANTINE_DIR
from lake_platform.engine.manifests import ManifestConflict as ManifestConflict
from lake_platform.engine.manifests import ManifestFile as ManifestFile
from lake_platform.engine.manifests import await_published as await_published
from lake_platform.engine.manifests import canonical_manifest_path as canonical_manifest_path
from lake_platform.engine.manifests import canonical_manifests as canonical_manifests
from lake_platform.engine.manifests import finalize_manifest as finalize_manifest
from lake_platform.engine.manifests import is_staging_manifest as is_staging_manifest
from lake_platform.engine.manifests import manifest_exists as manifest_exists
from lake_platform.engine.manifests import manifest_size as manifest_size
from lake_platform.engine.manifests import manifest_version as manifest_version
from lake_platform.engine.manifests import manifests_above as manifests_above
from lake_platform.engine.manifests import manifests_on_disk as manifests_on_disk
from lake_platform.engine.manifests import quarantine_files as quarantine_files
from lake_platform.engine.manifests import quarantined_files as quarantined_files
from lake_platform.engine.manifests import read_manifest_message as read_manifest_message
from lake_platform.engine.manifests import repair_manifests as repair_manifests
from lake_platform.engine.manifests import split_manifest_file
from lake_platform.engine.manifests import versions_on_disk as versions_on_disk
from lake_platform.engine.panics import EnginePanic as EnginePanic
from lake_platform.engine.panics import engine_call
from lake_platform.engine.schemas import SchemaMemo
from lake_platform.engine.storage import FileEntry as FileEntry
from lake_platform.engine.storage import filesystem as filesystem
from lake_platform.engine.storage import list_files as list_files
from lake_platform.engine.storage import list_folders as list_folders
from lake_platform.engine.storage import remove_files as remove_files

#: Lance's own default; kept explicit so ingest and bench use the same file sizing.
MAX_ROWS_PER_FILE = 1_048_576

#: The schemas of manifests this process has read (``manifest_schema``).
MANIFEST_SCHEMAS = SchemaMemo()


@cache
def lance_module() -> Any:
    """``lance``, imported on first use: it loads pandas and takes seconds, and commands that
    only read the registry (``lake table list``) must start without it."""
    import lance

    return lance


@cache
def lance_session() -> Any:
    """One Lance session per process: object-store connections and metadata caches are shared by
    every open and write (on S3 this halves a small append's latency), with bounded caches."""
    return lance_module().Session(index_cache_size_bytes=256 << 20, metadata_cache_size_bytes=256 << 20)


@dataclass(frozen=True)
class VersionStats:
    version: int
    rows: int
    fragments: int
    data_files: int
    data_bytes: int


@dataclass(frozen=True)
class ChangeStats:
    """What one committed version added and removed (from Lance's transaction file)."""

    files_added: int = 0
    files_removed: int = 0
    bytes_added: int = 0
    bytes_removed: int = 0


@dataclass(frozen=True)
class CompactionPlan:
    read_version: int
    tasks: tuple[str, ...]  # CompactionTask JSON, shippable to other processes


@engine_call
def write(
    reader: pa.RecordBatchReader,
    *,
    namespace: LanceNamespace,
    table_id: Sequence[str],
    mode: str,
    storage_options: dict[str, str] | None = None,
    max_rows_per_file: int = MAX_ROWS_PER_FILE,
) -> int:
    """Stream ``reader`` into the table; return the committed version."""
    ds = lance_module().write_dataset(
        reader,
        namespace_client=namespace,
        table_id=list(table_id),
        mode=mode,
        storage_options=storage_options or None,
        max_rows_per_file=max_rows_per_file,
        session=lance_session(),
    )
    return int(ds.version)


@engine_call
def open_version(
    *,
    namespace: LanceNamespace,
    table_id: Sequence[str],
    version: int,
    storage_options: dict[str, str] | None = None,
) -> lance.LanceDataset:
    """Open exactly ``version``, resolving its manifest through the namespace (the registry)."""
    return lance_module().dataset(
        namespace_client=namespace,
        table_id=list(table_id),
        version=version,
        storage_options=storage_options or None,
        session=lance_session(),
    )


@engine_call
def version_stats(ds: lance.LanceDataset) -> VersionStats:
    rows = files = size = 0
    frags = ds.get_fragments()
    for frag in frags:
        meta = frag.metadata
        for f in meta.files:
            files += 1
            size += int(f.file_size_bytes or 0)
    rows = ds.count_rows()
    return VersionStats(int(ds.version), rows, len(frags), files, size)


@engine_call
def change_stats(ds: lance.LanceDataset, version: int) -> ChangeStats:
    """Files and bytes a committed version added and removed, read from its transaction."""
    try:
        txn = ds.read_transaction(version)
    except Exception:  # noqa: BLE001 - stats are informational; a missing txn must not fail a commit
        return ChangeStats()
    op = txn.operation
    added = [
        f
        for frag in getattr(op, "new_fragments", None) or getattr(op, "fragments", None) or []
        for f in frag.files
    ]
    removed_ids = set(getattr(op, "deleted_fragment_ids", None) or [])
    groups = getattr(op, "groups", None) or []
    for group in groups:
        added += [f for frag in group.new_fragments for f in frag.files]
        removed_ids |= {frag.id for frag in group.old_fragments}
    removed: list[Any] = []
    if removed_ids:
        try:
            old = ds.checkout_version(txn.read_version)
            removed = [
                f
                for frag in old.get_fragments()
                if frag.fragment_id in removed_ids
                for f in frag.metadata.files
            ]
        except Exception:  # noqa: BLE001
            removed = []
    if type(op).__name__ == "Overwrite":
        try:
            old = ds.checkout_version(version - 1)
            removed = [f for frag in old.get_fragments() for f in frag.metadata.files]
        except Exception:  # noqa: BLE001
            removed = []
    return ChangeStats(
        files_added=len(added),
        files_removed=len(removed),
        bytes_added=sum(int(f.file_size_bytes or 0) for f in added),
        bytes_removed=sum(int(f.file_size_bytes or 0) for f in removed),
    )


@engine_call
def plan_compaction(ds: lance.LanceDataset, *, target_rows_per_fragment: int) -> CompactionPlan:
    lance_module()
    from lance.optimize import Compaction, CompactionOptions

    plan = Compaction.plan(ds, CompactionOptions(target_rows_per_fragment=target_rows_per_fragment))
    return CompactionPlan(int(plan.read_version), tuple(t.json() for t in plan.tasks))


@engine_call
def execute_compaction_task(ds: lance.LanceDataset, task_json: str) -> str:
    """Rewrite one task's fragments (no commit); returns the RewriteResult as JSON."""
    lance_module()
    from lance.optimize import CompactionTask

    return CompactionTask.from_json(task_json).execute(ds).json()


@engine_call
def commit_compaction(ds: lance.LanceDataset, results: Sequence[str]) -> tuple[int, int, int]:
    """Commit rewritten fragments; returns (new version, fragments removed, fragments added).

    Raises :class:`StaleCompaction` when a newer commit conflicts (e.g. a delete on the
    compacted fragments): the plan is stale and must not overwrite it.
    """
    lance_module()
    from lance.commit import CommitConflictError
    from lance.optimize import Compaction, RewriteResult

    try:
        metrics = Compaction.commit(ds, [RewriteResult.from_json(r) for r in results])
    except CommitConflictError as exc:
        raise StaleCompaction(str(exc)) from exc
    except OSError as exc:
        if "conflict" in str(exc).lower() or "preempted" in str(exc).lower():
            raise StaleCompaction(str(exc)) from exc
        raise
    return int(ds.latest_version), int(metrics.fragments_removed), int(metrics.fragments_added)


@engine_call
def compaction_outputs(results: Sequence[str]) -> list[tuple[str, int]]:
    """The data files the rewrite results add in the dataset's own root, as (path relative to
    the root, size in bytes; 0: not recorded)."""
    lance_module()
    from lance.optimize import RewriteResult

    return [
        (f"data/{f.path}", int(f.file_size_bytes or 0))
        for r in results
        for fragment in RewriteResult.from_json(r).new_fragments
        for f in fragment.files
        if getattr(f, "base_id", None) is None
    ]


@engine_call
def is_rewrite(ds: lance.LanceDataset, version: int) -> bool:
    """Whether ``version`` was committed by a compaction's Rewrite (not its ReserveFragments)."""
    try:
        op = ds.read_transaction(version).operation
    except TypeError as exc:
        # pylance 14.0.2 cannot build the Python form of a Rewrite that remapped indexes
        # (``LanceOperation.RewrittenIndex`` misses arguments); only a Rewrite carries those.
        if "RewrittenIndex" in str(exc):
            return True
        raise
    return type(op).__name__ == "Rewrite"


class StaleCompaction(Exception):
    """Lance refused to rebase a compaction onto newer commits."""


@engine_call
def delete_rows(ds: lance.LanceDataset, predicate: str) -> int:
    """Delete the rows ``predicate`` selects: one commit, or none when it selects none (Lance
    would commit an empty version). Returns the rows it selected."""
    selected = int(ds.count_rows(filter=predicate))
    if selected:
        ds.delete(predicate)
    return selected


@engine_call
def update_schema_metadata(ds: lance.LanceDataset, values: dict[str, str | None]) -> dict[str, str]:
    """Merge ``values`` into the schema metadata (a None value removes its key); commits a version."""
    return dict(ds.update_schema_metadata(values) or {})


@engine_call
def tagged_versions(ds: lance.LanceDataset) -> dict[str, int]:
    return {name: int(info["version"]) for name, info in ds.tags.list().items()}


@engine_call
def tag_details(ds: lance.LanceDataset) -> dict[str, tuple[int, int]]:
    """Tag name → (version, manifest size)."""
    return {
        name: (int(info["version"]), int(info.get("manifest_size") or 0))
        for name, info in ds.tags.list().items()
    }


@engine_call
def create_tag(ds: lance.LanceDataset, tag: str, version: int) -> None:
    ds.tags.create(tag, version)


@engine_call
def update_tag(ds: lance.LanceDataset, tag: str, version: int) -> None:
    ds.tags.update(tag, version)


@engine_call
def delete_tag(ds: lance.LanceDataset, tag: str) -> None:
    ds.tags.delete(tag)


@engine_call
def evolve_schema(
    ds: lance.LanceDataset,
    *,
    widened: Sequence[tuple[str, pa.DataType]] = (),
    added: Sequence[pa.Field] = (),
) -> None:
    """Change a table's columns ahead of an append: cast columns to wider types (Lance rewrites
    those columns of every fragment, one commit), then add all-null columns (metadata only, one
    commit). Each commit goes through ``ds``'s namespace."""
    import pyarrow as pa

    if widened:
        ds.alter_columns(*[{"path": name, "data_type": t} for name, t in widened])
    if added:
        ds.add_columns(pa.schema(list(added)))


@engine_call
def drop_columns(ds: lance.LanceDataset, names: Sequence[str]) -> None:
    """Drop columns from the schema (metadata only: the data stays in the files until a
    compaction rewrites them, and older versions still show it)."""
    ds.drop_columns(list(names))


@engine_call
def rename_column(ds: lance.LanceDataset, old: str, new: str) -> None:
    ds.alter_columns({"path": old, "name": new})


@engine_call
def schema_of(ds: lance.LanceDataset) -> pa.Schema:
    return ds.schema


@engine_call
def manifest_schema(
    location: str,
    manifest_path: str,
    storage_options: dict[str, str] | None = None,
    *,
    raw: bytes | None = None,
) -> pa.Schema:
    """The Arrow schema a manifest file (staging or final) describes, read from the file alone:
    no namespace call, no listing, and, unlike opening a staging manifest through the
    namespace, nothing written. A commit can so record its schema in the same registry
    transaction as its version: one read of the file (none when the caller passes its bytes as
    ``raw``), and a dataset opened from the message only for a schema this process has not seen
    (``schemas.py``). ValueError if the file is not a Lance manifest."""
    if raw is None:
        message = read_manifest_message(location, manifest_path, storage_options)
    else:
        message = split_manifest_file(raw, manifest_path)

    def decode(message: bytes) -> pa.Schema:
        ds = lance_module().LanceDataset(
            location,
            storage_options=storage_options or None,
            serialized_manifest=message,
            session=lance_session(),
        )
        return ds.schema

    # Opening decodes every fragment; a schema seen before is known by its own bytes (schemas.py).
    return MANIFEST_SCHEMAS.schema(message, decode)


@engine_call
def cleanup_versions(ds: lance.LanceDataset, versions: Sequence[int]) -> dict[str, int]:
    """Remove exactly ``versions`` (never the current one, never a tagged one) and the files
    only they reference. The caller has already taken them out of the registry."""
    if not versions:
        return {"old_versions": 0, "bytes_removed": 0, "data_files_removed": 0}
    stats = ds.cleanup_old_versions(
        older_than=dt.timedelta(0), versions=list(versions), error_if_tagged_old_versions=False
    )
    return {
        "old_versions": int(stats.old_versions),
        "bytes_removed": int(stats.bytes_removed),
        "data_files_removed": int(stats.data_files_removed),
    }


@engine_call
def remove_table(location: str, storage_options: dict[str, str] | None = None) -> None:
    """Destroy a table's storage. Callers deregister first (invariant 4). A file that cannot
    be deleted raises (OSError): the caller's record of the folder must not say it is gone."""
    if location.startswith("s3://"):
        # Lance deletes every object under a dataset root. pyarrow's delete_dir would too, but it
        # then writes an empty "<parent>/" marker object whenever the parent prefix became empty.
        try:
            lance_module().LanceDataset.drop(
                location, storage_options=storage_options or None, ignore_not_found=True
            )
            return
        except ValueError:
            pass  # not a dataset root (e.g. a failed create's leftovers): delete whatever is there
        fs, root = filesystem(location, storage_options)
        try:
            fs.delete_dir(root)
        except FileNotFoundError:
            pass
        return
    shutil.rmtree(location.removeprefix("file://"), onerror=_raise_unless_gone)


def _raise_unless_gone(func: Any, path: str, exc_info: Any) -> None:
    """rmtree's error handler: an entry already gone (another deleter, a folder never made) is
    what was wanted; any other error is raised."""
    if not isinstance(exc_info[1], FileNotFoundError):
        raise exc_info[1]


@engine_call
def table_provider(ds: lance.LanceDataset) -> Any:
    """A DataFusion table provider bound to exactly this dataset's version."""
    return lance_module().FFILanceTableProvider(ds)


@engine_call
def scanner(ds: lance.LanceDataset, **kwargs: Any) -> Any:
    return ds.scanner(**kwargs)
