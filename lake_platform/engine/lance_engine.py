"""Lance operations. This package is the only code that imports ``lance``.

Every operation that creates a version goes through a namespace client with managed
versioning: Lance asks the namespace to register version N, so the registry arbitrates every
version number (invariant 2 by construction). The engine never decides what "latest" is.
"""

from __future__ import annotations

import datetime as dt
import os
import shutil
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

# Lance warns on every managed-versioning commit that it keeps the staging manifest; that is the
# design (the catalog publishes the canonical manifest itself, right after the registry commit),
# so silence that one logger unless the user chose levels.
os.environ.setdefault("LANCE_LOG", "warn,lance_table::io::commit::external_manifest=error")

import lance  # noqa: E402
import pyarrow as pa
import pyarrow.fs as pafs  # noqa: E402
from lance.commit import CommitConflictError
from lance.optimize import Compaction, CompactionOptions, CompactionTask, RewriteResult
from lance_namespace import LanceNamespace

#: Lance's own default; kept explicit so ingest and bench use the same file sizing.
MAX_ROWS_PER_FILE = 1_048_576

#: One Lance session per process: object-store connections and metadata caches are shared by
#: every open and write (on S3 this halves a small append's latency), with bounded caches.
_SESSION = lance.Session(index_cache_size_bytes=256 << 20, metadata_cache_size_bytes=256 << 20)


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


@dataclass(frozen=True)
class FileEntry:
    path: str  # relative to the table location
    size: int
    mtime: dt.datetime | None


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
    ds = lance.write_dataset(
        reader,
        namespace_client=namespace,
        table_id=list(table_id),
        mode=mode,
        storage_options=storage_options or None,
        max_rows_per_file=max_rows_per_file,
        session=_SESSION,
    )
    return int(ds.version)


def open_version(
    *, namespace: LanceNamespace, table_id: Sequence[str], version: int, storage_options: dict[str, str] | None = None
) -> lance.LanceDataset:
    """Open exactly ``version``, resolving its manifest through the namespace (the registry)."""
    return lance.dataset(
        namespace_client=namespace, table_id=list(table_id), version=version, storage_options=storage_options or None,
        session=_SESSION,
    )


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


def change_stats(ds: lance.LanceDataset, version: int) -> ChangeStats:
    """Files and bytes a committed version added and removed, read from its transaction."""
    try:
        txn = ds.read_transaction(version)
    except Exception:  # noqa: BLE001 - stats are informational; a missing txn must not fail a commit
        return ChangeStats()
    op = txn.operation
    added = [f for frag in getattr(op, "new_fragments", None) or getattr(op, "fragments", None) or [] for f in frag.files]
    removed_ids = set(getattr(op, "deleted_fragment_ids", None) or [])
    groups = getattr(op, "groups", None) or []
    for group in groups:
        added += [f for frag in group.new_fragments for f in frag.files]
        removed_ids |= {frag.id for frag in group.old_fragments}
    removed: list[Any] = []
    if removed_ids:
        try:
            old = ds.checkout_version(txn.read_version)
            removed = [f for frag in old.get_fragments() if frag.fragment_id in removed_ids for f in frag.metadata.files]
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


def plan_compaction(ds: lance.LanceDataset, *, target_rows_per_fragment: int) -> CompactionPlan:
    plan = Compaction.plan(ds, CompactionOptions(target_rows_per_fragment=target_rows_per_fragment))
    return CompactionPlan(int(plan.read_version), tuple(t.json() for t in plan.tasks))


def execute_compaction_task(ds: lance.LanceDataset, task_json: str) -> str:
    """Rewrite one task's fragments (no commit); returns the RewriteResult as JSON."""
    return CompactionTask.from_json(task_json).execute(ds).json()


def commit_compaction(ds: lance.LanceDataset, results: Sequence[str]) -> tuple[int, int, int]:
    """Commit rewritten fragments; returns (new version, fragments removed, fragments added).

    Raises :class:`StaleCompaction` when a newer commit conflicts (e.g. a delete on the
    compacted fragments): the plan is stale and must not overwrite it.
    """
    try:
        metrics = Compaction.commit(ds, [RewriteResult.from_json(r) for r in results])
    except CommitConflictError as exc:
        raise StaleCompaction(str(exc)) from exc
    except OSError as exc:
        if "conflict" in str(exc).lower() or "preempted" in str(exc).lower():
            raise StaleCompaction(str(exc)) from exc
        raise
    return int(ds.latest_version), int(metrics.fragments_removed), int(metrics.fragments_added)


def is_rewrite(ds: lance.LanceDataset, version: int) -> bool:
    """Whether ``version`` was committed by a compaction's Rewrite (not its ReserveFragments)."""
    return type(ds.read_transaction(version).operation).__name__ == "Rewrite"


class StaleCompaction(Exception):
    """Lance refused to rebase a compaction onto newer commits."""


def delete_rows(ds: lance.LanceDataset, predicate: str) -> None:
    ds.delete(predicate)


def tagged_versions(ds: lance.LanceDataset) -> dict[str, int]:
    return {name: int(info["version"]) for name, info in ds.tags.list().items()}


def tag_details(ds: lance.LanceDataset) -> dict[str, tuple[int, int]]:
    """Tag name → (version, manifest size)."""
    return {name: (int(info["version"]), int(info.get("manifest_size") or 0)) for name, info in ds.tags.list().items()}


def create_tag(ds: lance.LanceDataset, tag: str, version: int) -> None:
    ds.tags.create(tag, version)


def update_tag(ds: lance.LanceDataset, tag: str, version: int) -> None:
    ds.tags.update(tag, version)


def delete_tag(ds: lance.LanceDataset, tag: str) -> None:
    ds.tags.delete(tag)


def schema_of(ds: lance.LanceDataset) -> pa.Schema:
    return ds.schema


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


def _filesystem(location: str, storage_options: dict[str, str] | None) -> tuple[pafs.FileSystem, str]:
    if location.startswith("s3://"):
        opts = storage_options or {}
        endpoint = opts.get("aws_endpoint", "")
        fs = pafs.S3FileSystem(
            access_key=opts.get("aws_access_key_id") or None,
            secret_key=opts.get("aws_secret_access_key") or None,
            region=opts.get("aws_region") or "us-east-1",
            endpoint_override=endpoint.split("://", 1)[-1] or None,
            scheme="http" if endpoint.startswith("http://") else "https",
        )
        return fs, location.removeprefix("s3://")
    return pafs.LocalFileSystem(), location.removeprefix("file://")


def _object_path(location: str, manifest_path: str) -> str:
    """Lance reports manifest paths as object-store paths (no scheme, no leading slash)."""
    if location.startswith("s3://"):
        bucket = location.removeprefix("s3://").split("/", 1)[0]
        return f"{bucket}/{manifest_path}"
    return "/" + manifest_path.lstrip("/")


def remove_files(location: str, manifest_paths: Sequence[str], storage_options: dict[str, str] | None = None) -> int:
    """Remove the given staging manifests; missing ones are fine (idempotent)."""
    # Locally a plain unlink: far cheaper than going through pyarrow's filesystem (benchmarks.md).
    delete = os.remove if not location.startswith("s3://") else _filesystem(location, storage_options)[0].delete_file
    removed = 0
    for path in manifest_paths:
        try:
            delete(_object_path(location, path))
            removed += 1
        except FileNotFoundError:
            pass
    return removed


def list_files(location: str, storage_options: dict[str, str] | None = None, *,
               under: str = "") -> Iterator[FileEntry]:
    """Every file under a table location (or only under its folder ``under``), paths relative
    to the location, with size and mtime."""
    fs, root = _filesystem(location, storage_options)
    folder = f"{root.rstrip('/')}/{under.strip('/')}" if under else root
    try:
        infos = fs.get_file_info(pafs.FileSelector(folder, recursive=True, allow_not_found=True))
    except FileNotFoundError:
        return
    prefix = root.rstrip("/") + "/"
    for info in infos:
        if info.type == pafs.FileType.File:
            yield FileEntry(info.path.removeprefix(prefix), int(info.size or 0), info.mtime)


def list_folders(location: str, storage_options: dict[str, str] | None = None) -> list[tuple[str, float | None]]:
    """The folders directly under ``location`` (names, with their mtime where the store has
    one): one delimiter listing on S3, never a recursive walk of the bucket."""
    fs, root = _filesystem(location, storage_options)
    try:
        infos = fs.get_file_info(pafs.FileSelector(root, recursive=False, allow_not_found=True))
    except FileNotFoundError:
        return []
    return sorted((info.base_name, info.mtime.timestamp() if info.mtime is not None else None)
                  for info in infos if info.type == pafs.FileType.Directory)


def remove_table(location: str, storage_options: dict[str, str] | None = None) -> None:
    """Destroy a table's storage. Callers deregister first (invariant 4)."""
    if location.startswith("s3://"):
        # Lance deletes every object under a dataset root. pyarrow's delete_dir would too, but it
        # then writes an empty "<parent>/" marker object whenever the parent prefix became empty.
        try:
            lance.LanceDataset.drop(location, storage_options=storage_options or None, ignore_not_found=True)
            return
        except ValueError:
            pass  # not a dataset root (e.g. a failed create's leftovers): delete whatever is there
        fs, root = _filesystem(location, storage_options)
        try:
            fs.delete_dir(root)
        except FileNotFoundError:
            pass
        return
    shutil.rmtree(location.removeprefix("file://"), ignore_errors=True)


def table_provider(ds: lance.LanceDataset) -> Any:
    """A DataFusion table provider bound to exactly this dataset's version."""
    return lance.FFILanceTableProvider(ds)


def scanner(ds: lance.LanceDataset, **kwargs: Any) -> Any:
    return ds.scanner(**kwargs)


def _final_manifest_name(version: int) -> str:
    # V2 naming: versions sort newest-first by name.
    return f"{(1 << 64) - 1 - version:020d}.manifest"


def repair_manifests(location: str, registered: Sequence[tuple[int, str]], storage_options: dict[str, str] | None = None) -> int:
    """Give every registered version a final manifest next to its staging one.

    With managed versioning Lance keeps the staging manifest and may skip the final copy, but
    its cleanup only sees versions by their final manifests: a registered version without one
    would look absent, and the files only it references would look like garbage.
    """
    fs, root = _filesystem(location, storage_options)
    repaired = 0
    for version, manifest_path in registered:
        final = f"{root.rstrip('/')}/_versions/{_final_manifest_name(version)}"
        if fs.get_file_info(final).type == pafs.FileType.File:
            continue
        fs.copy_file(_object_path(location, manifest_path), final)
        repaired += 1
    return repaired


def versions_on_disk(location: str, storage_options: dict[str, str] | None = None) -> list[int]:
    """Every version that has a manifest (final or staging) under the location, ascending.

    Used to prove that no commit bypassed the registry: the newest version on disk must be the
    registered one.
    """
    return sorted({m.version for m in manifests_on_disk(location, storage_options)})


@dataclass(frozen=True)
class ManifestFile:
    version: int
    path: str  # relative to the table location
    staging: bool  # ``<name>.manifest-<uuid>``: written by a commit that may not have registered
    mtime: dt.datetime | None


def manifests_on_disk(location: str, storage_options: dict[str, str] | None = None) -> list[ManifestFile]:
    """Every manifest file under ``_versions/`` (V1 or V2 naming, final or staging), by version."""
    found = []
    for entry in list_files(location, storage_options, under="_versions"):
        parsed = _parse_manifest_name(entry.path.rpartition("/")[2])
        if parsed is not None:
            found.append(ManifestFile(parsed[0], entry.path, parsed[1], entry.mtime))
    return sorted(found, key=lambda m: (m.version, m.path))


def quarantined_files(location: str, storage_options: dict[str, str] | None = None) -> list[FileEntry]:
    """What the write path moved aside (``_quarantine/<tag>/...``): manifests written around the
    registry, kept as evidence until an operator removes them."""
    return sorted(list_files(location, storage_options, under=QUARANTINE_DIR), key=lambda e: e.path)


class ManifestConflict(RuntimeError):
    """A different manifest already sits at a committed version's canonical path (written
    around the registry): the committed one cannot be published there."""


def finalize_manifest(location: str, version: int, staging_path: str, storage_options: dict[str, str] | None = None) -> str:
    """Materialize a committed version's manifest at its canonical path; return that path.

    With managed versioning Lance leaves the manifest at its staging path and asks the
    namespace to "update the index" (which the namespace protocol cannot express), so every
    later open would try to finish the job again, writing a stray copy each time. The catalog
    finishes it once: copy to the canonical path (content-identical, so a concurrent helper is
    harmless), then points the registry at it and removes the staging object.
    """
    directory, _, name = staging_path.rpartition("/")
    if ".manifest-" not in name:
        return staging_path  # already canonical
    final_path = f"{directory}/{_final_manifest_name(version)}"
    src, dst = _object_path(location, staging_path), _object_path(location, final_path)
    if not location.startswith("s3://"):
        # Local folders: a hard link is the copy (no bytes move), and it refuses to replace a
        # canonical manifest a helping reader may already have written.
        try:
            os.link(src, dst)
        except FileExistsError:
            if os.path.getsize(dst) != os.path.getsize(src):
                raise ManifestConflict(
                    f"canonical manifest for version {version} differs from the committed one") from None
        except OSError:  # no hard links on this filesystem
            if not os.path.exists(dst):
                shutil.copyfile(src, dst)
        return final_path
    fs, _ = _filesystem(location, storage_options)
    info = fs.get_file_info(dst)
    if info.type != pafs.FileType.File:
        fs.copy_file(src, dst)
    elif info.size != fs.get_file_info(src).size:
        raise ManifestConflict(f"canonical manifest for version {version} differs from the committed one")
    return final_path


def manifest_size(location: str, manifest_path: str, storage_options: dict[str, str] | None = None) -> int | None:
    """The size of a manifest (as the registry names it), or None when it is not on storage."""
    if not location.startswith("s3://"):
        try:
            return os.path.getsize(_object_path(location, manifest_path))
        except FileNotFoundError:
            return None
    fs, _ = _filesystem(location, storage_options)
    info = fs.get_file_info(_object_path(location, manifest_path))
    return int(info.size or 0) if info.type == pafs.FileType.File else None


def manifest_exists(location: str, manifest_path: str, storage_options: dict[str, str] | None = None) -> bool:
    """Whether a version's manifest (as the registry names it) is still on storage: a stat
    locally, a HEAD on S3."""
    if not location.startswith("s3://"):
        return os.path.exists(_object_path(location, manifest_path))
    fs, _ = _filesystem(location, storage_options)
    return fs.get_file_info(_object_path(location, manifest_path)).type == pafs.FileType.File


#: Where manifests written around the registry are moved (never deleted): outside Lance's own
#: folders, so Lance never builds on them and the orphan scan never reclaims them.
QUARANTINE_DIR = "_quarantine"


def is_staging_manifest(manifest_path: str) -> bool:
    """Lance's staging manifests are ``<name>.manifest-<uuid>``; canonical ones end in ``.manifest``."""
    return ".manifest-" in manifest_path.rsplit("/", 1)[-1]


def canonical_manifest_path(manifest_path: str, version: int) -> str:
    """The canonical (V2) manifest path of ``version``, in the same form as ``manifest_path``."""
    return f"{manifest_path.rpartition('/')[0]}/{_final_manifest_name(version)}"


def _parse_manifest_name(name: str) -> tuple[int, bool] | None:
    """(version, staging) for a manifest file name: V1 ``N.manifest`` or V2 (``u64::MAX - N``,
    20 digits), final or staging (``.manifest-<uuid>``); None for anything else, including
    Lance's temporary ``#k`` copies."""
    stem, dot, rest = name.partition(".manifest")
    if not dot or not stem.isdigit() or (rest and not rest.startswith("-")):
        return None
    return ((1 << 64) - 1 - int(stem) if len(stem) == 20 else int(stem)), bool(rest)


def _manifest_version(name: str) -> int | None:
    """The version a canonical (final) manifest name stands for, else None."""
    parsed = _parse_manifest_name(name)
    return parsed[0] if parsed is not None and not parsed[1] else None


def canonical_manifests(location: str, storage_options: dict[str, str] | None = None) -> dict[int, list[str]]:
    """Version -> canonical manifest files (``_versions/<name>``) on storage: one listing of
    ``_versions/``, which is what Lance itself lists to find the newest version."""
    found: dict[int, list[str]] = {}
    if not location.startswith("s3://"):
        try:
            names = [e.name for e in os.scandir(f"{location.removeprefix('file://')}/_versions")]
        except FileNotFoundError:
            return found
    else:
        fs, root = _filesystem(location, storage_options)
        infos = fs.get_file_info(pafs.FileSelector(f"{root}/_versions", allow_not_found=True))
        names = [i.base_name for i in infos if i.type == pafs.FileType.File]
    for name in names:
        version = _manifest_version(name)
        if version is not None:
            found.setdefault(version, []).append(f"_versions/{name}")
    return found


def quarantine_files(location: str, paths: Sequence[str], tag: str,
                     storage_options: dict[str, str] | None = None) -> list[str]:
    """Move files (relative paths) to ``_quarantine/<tag>/<path>``; return the new paths.

    A move, not a delete: a manifest written around the registry is evidence an operator may
    want, but Lance must stop seeing it (it builds every commit on the newest manifest on disk).
    """
    moved = []
    fs, root = (None, location.removeprefix("file://")) if not location.startswith("s3://") else _filesystem(
        location, storage_options)
    for path in paths:
        target = f"{QUARANTINE_DIR}/{tag}/{path}"
        src, dst = f"{root.rstrip('/')}/{path}", f"{root.rstrip('/')}/{target}"
        try:
            if fs is None:
                os.makedirs(os.path.dirname(dst), exist_ok=True)
                os.rename(src, dst)
            else:
                fs.move(src, dst)
        except FileNotFoundError:
            continue  # someone else moved it already
        moved.append(target)
    return moved

