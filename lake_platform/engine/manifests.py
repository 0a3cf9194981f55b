"""Manifest files of a table location: naming (V1/V2, final or staging), listing, publishing
a committed version at its canonical path (finalize, repair) and quarantining manifests written
around the registry."""

from __future__ import annotations

import datetime as dt
import filecmp
import os
import shutil
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from lake_platform.engine.storage import FileEntry, filesystem, filesystem_path, list_files, read_object
from lake_platform.lru import BoundedLRU


def final_manifest_name(version: int) -> str:
    # V2 naming: versions sort newest-first by name.
    return f"{(1 << 64) - 1 - version:020d}.manifest"


def repair_manifests(
    location: str, registered: Sequence[tuple[int, str]], storage_options: dict[str, str] | None = None
) -> int:
    """Give every registered version a final manifest next to its staging one.

    With managed versioning Lance keeps the staging manifest and may skip the final copy, but
    its cleanup only sees versions by their final manifests: a registered version without one
    would look absent, and the files only it references would look like garbage.
    """
    import pyarrow.fs as pafs

    fs, root = filesystem(location, storage_options)
    repaired = 0
    for version, manifest_path in registered:
        final = f"{root.rstrip('/')}/_versions/{final_manifest_name(version)}"
        if fs.get_file_info(final).type == pafs.FileType.File:
            continue
        fs.copy_file(filesystem_path(location, manifest_path), final)
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
        parsed = parse_manifest_name(entry.path.rpartition("/")[2])
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


def finalize_manifest(
    location: str, version: int, staging_path: str, storage_options: dict[str, str] | None = None
) -> str:
    """Materialize a committed version's manifest at its canonical path; return that path.

    With managed versioning Lance leaves the manifest at its staging path and asks the
    namespace to "update the index" (which the namespace protocol cannot express), so every
    later open would try to finish the job again, writing a stray copy each time. The catalog
    finishes it once: copy to the canonical path (content-identical, so a concurrent helper is
    harmless), then points the registry at it and removes the staging object.
    """
    import pyarrow.fs as pafs

    directory, _, name = staging_path.rpartition("/")
    if ".manifest-" not in name:
        return staging_path  # already canonical
    final_path = f"{directory}/{final_manifest_name(version)}"
    src, dst = filesystem_path(location, staging_path), filesystem_path(location, final_path)
    if not location.startswith("s3://"):
        # Local folders: a hard link is the copy (no bytes move), and it refuses to replace a
        # canonical manifest a helping reader may already have written.
        try:
            os.link(src, dst)
        except FileExistsError:
            # Ours already (a retried publish, a helper) only if the bytes are the same: a
            # manifest written around the registry can have the same size.
            if not os.path.samefile(src, dst) and not filecmp.cmp(src, dst, shallow=False):
                raise ManifestConflict(
                    f"canonical manifest for version {version} differs from the committed one"
                ) from None
        except OSError:  # no hard links on this filesystem
            if not os.path.exists(dst):
                shutil.copyfile(src, dst)
        return final_path
    fs, _ = filesystem(location, storage_options)
    info = fs.get_file_info(dst)
    if info.type != pafs.FileType.File:
        fs.copy_file(src, dst)
    elif info.size != fs.get_file_info(src).size or _read(fs, dst) != _read(fs, src):
        raise ManifestConflict(f"canonical manifest for version {version} differs from the committed one")
    return final_path


def _read(fs: object, path: str) -> bytes:
    with fs.open_input_file(path) as f:  # type: ignore[attr-defined]
        return bytes(f.read())


def manifest_size(
    location: str, manifest_path: str, storage_options: dict[str, str] | None = None
) -> int | None:
    """The size of a manifest (as the registry names it), or None when it is not on storage."""
    stat = _manifest_stat(location, manifest_path, storage_options)
    return stat[0] if stat is not None else None


def manifest_mtime(
    location: str, manifest_path: str, storage_options: dict[str, str] | None = None
) -> float | None:
    """When a manifest (an object-store path) was written, in epoch seconds; None when it is
    not on storage."""
    stat = _manifest_stat(location, manifest_path, storage_options)
    return stat[1] if stat is not None else None


def _manifest_stat(
    location: str, manifest_path: str, storage_options: dict[str, str] | None
) -> tuple[int, float] | None:
    """(size, modification time in epoch seconds) of a manifest: a stat locally, a HEAD on S3;
    None when it is not on storage."""
    import pyarrow.fs as pafs

    if not location.startswith("s3://"):
        try:
            found = os.stat(filesystem_path(location, manifest_path))
        except FileNotFoundError:
            return None
        return found.st_size, found.st_mtime
    fs, _ = filesystem(location, storage_options)
    info = fs.get_file_info(filesystem_path(location, manifest_path))
    if info.type != pafs.FileType.File:
        return None
    return int(info.size or 0), info.mtime.timestamp() if info.mtime is not None else 0.0


def manifest_exists(location: str, manifest_path: str, storage_options: dict[str, str] | None = None) -> bool:
    """Whether a version's manifest (as the registry names it) is still on storage: a stat
    locally, a HEAD on S3."""
    import pyarrow.fs as pafs

    if not location.startswith("s3://"):
        return os.path.exists(filesystem_path(location, manifest_path))
    fs, _ = filesystem(location, storage_options)
    return fs.get_file_info(filesystem_path(location, manifest_path)).type == pafs.FileType.File


#: Where manifests written around the registry are moved (never deleted): outside Lance's own
#: folders, so Lance never builds on them and the orphan scan never reclaims them.
QUARANTINE_DIR = "_quarantine"

#: How long a read waits for the manifest of a version committed moments ago: a writer puts it at
#: its canonical path right after the registry commit (a hard link locally, a copy on S3).
PUBLISH_GRACE_SECONDS = 1.0
_FIRST_PAUSE, _LONGEST_PAUSE = 0.002, 0.1


def await_published(
    location: str,
    manifest_path: str,
    committed_at_ms: int | None,
    storage_options: dict[str, str] | None = None,
    *,
    pause: Callable[[float], None] = time.sleep,
    grace: float | None = None,
) -> bool:
    """Whether the manifest at ``manifest_path`` appeared while waiting for its writer to
    publish it. A read that finds a version registered and its file not there yet may be
    between the writer's registry commit and its link: for a version committed less than
    ``grace`` (default ``PUBLISH_GRACE_SECONDS``) ago, check at growing intervals (2 ms,
    doubling to 100 ms) until the grace is over. False at once for an older version (gone, or
    its writer stopped) and for an unknown commit time. Only for a read's error path: a read
    that finds its file waits for nothing."""
    if committed_at_ms is None:
        return False
    grace = PUBLISH_GRACE_SECONDS if grace is None else grace
    deadline = time.monotonic() + grace - max(0.0, time.time() - committed_at_ms / 1000)
    wait = _FIRST_PAUSE
    while time.monotonic() < deadline:
        pause(min(wait, max(0.0, deadline - time.monotonic())))
        if manifest_exists(location, manifest_path, storage_options):
            return True
        wait = min(wait * 2, _LONGEST_PAUSE)
    return False


def is_staging_manifest(manifest_path: str) -> bool:
    """Lance's staging manifests are ``<name>.manifest-<uuid>``; canonical ones end in ``.manifest``."""
    return ".manifest-" in manifest_path.rsplit("/", 1)[-1]


def canonical_manifest_path(manifest_path: str, version: int) -> str:
    """The canonical (V2) manifest path of ``version``, in the same form as ``manifest_path``."""
    return f"{manifest_path.rpartition('/')[0]}/{final_manifest_name(version)}"


def parse_manifest_name(name: str) -> tuple[int, bool] | None:
    """(version, staging) for a manifest file name: V1 ``N.manifest`` or V2 (``u64::MAX - N``,
    20 digits), final or staging (``.manifest-<uuid>``); None for anything else, including
    Lance's temporary ``#k`` copies."""
    stem, dot, rest = name.partition(".manifest")
    if not dot or not stem.isdigit() or (rest and not rest.startswith("-")):
        return None
    return ((1 << 64) - 1 - int(stem) if len(stem) == 20 else int(stem)), bool(rest)


def manifest_version(path: str) -> int | None:
    """The version a canonical (final) manifest file stands for, by its path or name; None for
    anything else (a staging manifest, another file)."""
    parsed = parse_manifest_name(path.rpartition("/")[2])
    return parsed[0] if parsed is not None and not parsed[1] else None


def canonical_manifests(location: str, storage_options: dict[str, str] | None = None) -> dict[int, list[str]]:
    """Version -> canonical manifest files (``_versions/<name>``) on storage: one listing of
    ``_versions/``, which is what Lance itself lists to find the newest version."""
    found: dict[int, list[str]] = {}
    for name in _version_names(location, storage_options):
        version = manifest_version(name)
        if version is not None:
            found.setdefault(version, []).append(f"_versions/{name}")
    return found


#: Keys per S3 listing request (first, later): the versions above the registered one and that one
#: come first, and a page costs by its keys (botocore parses ~1,000 in ~0.1 s); later: S3's most.
S3_LIST_KEYS = (64, 1000)


def names_not_older(
    location: str,
    version: int,
    storage_options: dict[str, str] | None = None,
    *,
    s3_keys: tuple[int, int] = S3_LIST_KEYS,
) -> list[str]:
    """The names in ``_versions/`` of manifests (final or staging) of ``version`` and above,
    from one listing, and perhaps some older ones: what :func:`manifests_above` and
    :func:`staging_manifests` read. ``s3_keys``: keys per S3 request (first, later)."""
    threshold = f"{(1 << 64) - 1 - version:020d}"
    s3 = location.startswith("s3://") and not _s3_directory_bucket(location)
    if s3 and not _S3_SHORT.get(location):
        names, whole = _s3_names_not_older(location, threshold, storage_options, s3_keys)
        if whole:
            _S3_SHORT.put(location, True)
        return names
    every = _version_names(location, storage_options)
    if s3 and len(every) > s3_keys[0]:
        _S3_SHORT.remove(location)  # grown: the listing that skips the history, next time
    return [n for n in every if not _older(n, threshold)]


def manifests_above(
    location: str,
    version: int,
    storage_options: dict[str, str] | None = None,
    *,
    names: Sequence[str] | None = None,
) -> tuple[list[str], bool]:
    """(canonical manifests of versions above ``version``, sorted; whether ``version`` has a
    canonical manifest): what a writer's settle needs, from one listing of ``_versions/``.

    Cheaper than :func:`canonical_manifests` on a long history: a V2 name's 20-digit stem is
    ``u64::MAX - N``, so a stem above ``version``'s stem is an older version and is skipped by
    one string comparison, without parsing; on S3 the older versions are not even listed (one
    or two requests, however long the history). ``names``: that listing
    (:func:`names_not_older`), when the caller has made it."""
    if names is None:
        names = names_not_older(location, version, storage_options)
    above, has = [], False
    for name in names:
        found = manifest_version(name)
        if found is None:
            continue
        if found > version:
            above.append(f"_versions/{name}")
        elif found == version:
            has = True
    return sorted(above), has


def _older(name: str, threshold: str) -> bool:
    """Whether ``name`` is a V2 manifest (final or staging) of a version older than the one
    whose stem is ``threshold``, or a 20-character stem above it that is no version at all (not
    all digits, or above u64::MAX). A V1 staging manifest, whose first ".manifest" comes
    earlier, is not skipped: it is parsed like any other name."""
    return name[20:29] == ".manifest" and name[:20] > threshold


#: Every V2 name of a real version (1 and up) sorts before this stem, u64::MAX's.
_V2_END = f"{(1 << 64) - 1:020d}"
#: S3 locations whose last listing fit in the first request: listed whole by pyarrow next time,
#: which costs less than botocore for one page (2.9 against 5.3 ms measured on SeaweedFS, 20
#: versions). A hint only: either way the same names come back.
_S3_SHORT: BoundedLRU[str, bool] = BoundedLRU(4096)


def _s3_directory_bucket(location: str) -> bool:
    """An S3 Express directory bucket (``<name>--<zone>--x-s3``) lists keys in no particular
    order and takes no ``StartAfter``: it gets the full listing."""
    return location.removeprefix("s3://").partition("/")[0].endswith("--x-s3")


def _s3_names_not_older(
    location: str, threshold: str, storage_options: dict[str, str] | None, keys: tuple[int, int]
) -> tuple[list[str], bool]:
    """The names in ``_versions/`` on S3 except older V2 versions' manifests, without listing
    those: S3 lists keys in lexicographic order, and V2 stems (``u64::MAX - N``) put the newest
    version first. So once a page reaches the first older version, the listing jumps past the
    V2 block (``StartAfter`` u64::MAX's stem) to the names after it (V1 names from "2" up,
    anything else), instead of paging through the whole history: at most two requests while
    fewer than a page of names sit above the registered version, where a full listing takes one
    per 1,000 versions kept. V1 names that sort before the block ("1...") come on the first
    page, before it. Also returns whether the first request listed the whole folder."""
    from botocore.exceptions import BotoCoreError, ClientError

    from lake_platform.engine.storage import s3_client

    bucket, _, root = location.removeprefix("s3://").partition("/")
    prefix = f"{root.strip('/')}/_versions/" if root.strip("/") else "_versions/"
    client = s3_client(storage_options)
    request: dict[str, Any] = {"Bucket": bucket, "Prefix": prefix, "MaxKeys": keys[0]}
    names: list[str] = []
    try:
        while True:
            page = client.list_objects_v2(**request)
            reached_older = False
            last = ""
            for obj in page.get("Contents", ()):
                name = obj["Key"][len(prefix) :]
                last = name
                if "/" in name:
                    continue  # not a file of _versions/ itself
                if _older(name, threshold):
                    reached_older = True
                    continue
                names.append(name)
            if not page.get("IsTruncated"):
                return names, "StartAfter" not in request and "ContinuationToken" not in request
            request = {"Bucket": bucket, "Prefix": prefix, "MaxKeys": keys[1]}
            if reached_older and last < _V2_END:
                request["StartAfter"] = prefix + _V2_END
            else:
                request["ContinuationToken"] = page["NextContinuationToken"]
    except (BotoCoreError, ClientError) as exc:
        # As pyarrow's filesystem reports storage trouble (the callers' retry rules read it).
        raise OSError(f"listing s3://{bucket}/{prefix}: {exc}") from exc


def _version_names(location: str, storage_options: dict[str, str] | None) -> list[str]:
    import pyarrow.fs as pafs

    if not location.startswith("s3://"):
        try:
            return os.listdir(f"{location.removeprefix('file://')}/_versions")
        except FileNotFoundError:
            return []
    fs, root = filesystem(location, storage_options)
    infos = fs.get_file_info(pafs.FileSelector(f"{root}/_versions", allow_not_found=True))
    return [i.base_name for i in infos if i.type == pafs.FileType.File]


def quarantine_files(
    location: str, paths: Sequence[str], tag: str, storage_options: dict[str, str] | None = None
) -> list[str]:
    """Move files (relative paths) to ``_quarantine/<tag>/<path>``; return the new paths.

    A move, not a delete: a manifest written around the registry is evidence an operator may
    want, but Lance must stop seeing it (it builds every commit on the newest manifest on disk).
    """
    moved = []
    if location.startswith("s3://"):
        fs, root = filesystem(location, storage_options)
    else:
        fs, root = None, location.removeprefix("file://")
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


#: The tail of every Lance manifest file: u64 position of the manifest message, u16 major and
#: u16 minor format version, then this magic.
_MAGIC = b"LANC"


def read_manifest_message(
    location: str, manifest_path: str, storage_options: dict[str, str] | None = None
) -> bytes:
    """The serialized manifest (the protobuf message Lance itself hands around as
    ``serialized_manifest``) from a manifest file, staging or final, without opening the
    dataset: one read of the file, no listing and no write. ValueError if the file is not a
    manifest Lance wrote."""
    return split_manifest_file(read_object(location, manifest_path, storage_options), manifest_path)


def split_manifest_file(raw: bytes, manifest_path: str) -> bytes:
    """The manifest message inside a manifest file's bytes; ValueError if they are not one."""
    if len(raw) < 16 or raw[-4:] != _MAGIC:
        raise ValueError(f"{manifest_path} is not a Lance manifest (no footer)")
    pos = int.from_bytes(raw[-16:-8], "little")
    if pos + 4 > len(raw) - 16:
        raise ValueError(f"{manifest_path}: manifest position {pos} is outside the file")
    length = int.from_bytes(raw[pos : pos + 4], "little")
    if pos + 4 + length > len(raw) - 16:
        raise ValueError(f"{manifest_path}: manifest length {length} runs past the footer")
    return raw[pos + 4 : pos + 4 + length]
