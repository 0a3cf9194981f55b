"""Object-store plumbing under a table location: the filesystem for a location, listing,
removing files. No Lance calls; the manifest and table operations build on it."""

from __future__ import annotations

import datetime as dt
import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from lake_platform.lru import BoundedLRU

if TYPE_CHECKING:
    import pyarrow.fs as pafs


@dataclass(frozen=True)
class FileEntry:
    path: str  # relative to the table location
    size: int
    mtime: dt.datetime | None


def filesystem(location: str, storage_options: dict[str, str] | None) -> tuple[pafs.FileSystem, str]:
    # Imported in each function: registry-only commands (lake table list) start without pyarrow.
    import pyarrow.fs as pafs

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


#: boto3 clients by their options: making one costs tens of milliseconds (it loads the service
#: model), and a client is safe to share between threads. Few distinct option sets exist in a
#: process (one per storage root's settings), so a handful of entries is plenty.
_S3_CLIENTS: BoundedLRU[tuple[tuple[str, str], ...], Any] = BoundedLRU(8)


def s3_client(storage_options: dict[str, str] | None) -> Any:
    """A boto3 S3 client for these storage options (those of ``LakeSettings.storage_options``),
    made once per process for each distinct set. For what pyarrow's filesystem cannot do: a
    listing from a given key, or stopped after its first page; pre-signed URLs. Its responses
    carry timestamps (``LastModified``) as the text S3 sent, unparsed."""
    opts = storage_options or {}

    def make() -> Any:
        import boto3
        import botocore.session
        from botocore.config import Config

        # A session of its own: making clients from boto3's shared default session is not
        # thread-safe. Timestamps stay text: botocore parses each with dateutil (~0.3 ms a key
        # of a listing), and none of our calls reads them.
        core = botocore.session.get_session()
        core.get_component("response_parser_factory").set_parser_defaults(timestamp_parser=str)
        return boto3.session.Session(botocore_session=core).client(
            "s3",
            config=Config(signature_version="s3v4", retries={"mode": "standard"}),
            endpoint_url=opts.get("aws_endpoint") or None,
            region_name=opts.get("aws_region") or "us-east-1",
            aws_access_key_id=opts.get("aws_access_key_id") or None,
            aws_secret_access_key=opts.get("aws_secret_access_key") or None,
        )

    return _S3_CLIENTS.get_or_make(tuple(sorted(opts.items())), make)


def filesystem_path(location: str, manifest_path: str) -> str:
    """Lance reports manifest paths as object-store paths (no scheme, no leading slash)."""
    if location.startswith("s3://"):
        bucket = location.removeprefix("s3://").split("/", 1)[0]
        return f"{bucket}/{manifest_path}"
    return "/" + manifest_path.lstrip("/")


def table_object_root(location: str) -> str:
    """A table's root as an object-store path (no scheme, no bucket, no slashes around it), as
    Lance reports the paths of a table's manifests and transaction files."""
    if location.startswith("s3://"):
        return location.removeprefix("s3://").split("/", 1)[1].rstrip("/")
    return location.removeprefix("file://").strip("/")


def read_object(location: str, object_path: str, storage_options: dict[str, str] | None = None) -> bytes:
    """The whole object at ``object_path`` (an object-store path as Lance reports it, under the
    table at ``location``): one read, no listing. FileNotFoundError if it is not there."""
    path = filesystem_path(location, object_path)
    if location.startswith("s3://"):
        fs, _ = filesystem(location, storage_options)
        with fs.open_input_file(path) as f:
            return bytes(f.read())
    with open(path, "rb") as f:
        return f.read()


def remove_files(
    location: str, manifest_paths: Sequence[str], storage_options: dict[str, str] | None = None
) -> int:
    """Remove the given staging manifests; missing ones are fine (idempotent)."""
    # Locally a plain unlink: far cheaper than going through pyarrow's filesystem (benchmarks.md).
    delete = (
        os.remove
        if not location.startswith("s3://")
        else filesystem(location, storage_options)[0].delete_file
    )
    removed = 0
    for path in manifest_paths:
        try:
            delete(filesystem_path(location, path))
            removed += 1
        except FileNotFoundError:
            pass
    return removed


def list_files(
    location: str, storage_options: dict[str, str] | None = None, *, under: str = "", recursive: bool = True
) -> Iterator[FileEntry]:
    """Every file under a table location (or only under its folder ``under``; with
    ``recursive=False`` only the files directly in it), paths relative to the location, with
    size and mtime."""
    import pyarrow.fs as pafs

    fs, root = filesystem(location, storage_options)
    folder = f"{root.rstrip('/')}/{under.strip('/')}" if under else root
    try:
        infos = fs.get_file_info(pafs.FileSelector(folder, recursive=recursive, allow_not_found=True))
    except FileNotFoundError:
        return
    prefix = root.rstrip("/") + "/"
    for info in infos:
        if info.type == pafs.FileType.File:
            yield FileEntry(info.path.removeprefix(prefix), int(info.size or 0), info.mtime)


def holds_files(location: str, storage_options: dict[str, str] | None = None) -> bool:
    """Whether anything but empty folders is under ``location`` (a missing one holds nothing).
    Stops at the first file: one listing of at most one key on S3, never a walk of the bucket;
    locally a symlink counts as a file (it is not followed)."""
    if location.startswith("s3://"):
        bucket, _, prefix = location.removeprefix("s3://").rstrip("/").partition("/")
        listed = s3_client(storage_options).list_objects_v2(
            Bucket=bucket, Prefix=f"{prefix}/" if prefix else "", MaxKeys=1
        )
        return bool(listed.get("Contents"))

    def walk(folder: str) -> bool:
        try:
            with os.scandir(folder) as entries:
                return any(not e.is_dir(follow_symlinks=False) or walk(e.path) for e in entries)
        except FileNotFoundError:  # gone meanwhile, or never there
            return False
        except NotADirectoryError:  # a file where the folder would be
            return True

    return walk(location.removeprefix("file://"))


def list_folders(
    location: str, storage_options: dict[str, str] | None = None
) -> list[tuple[str, float | None]]:
    """The folders directly under ``location`` (names, with their mtime where the store has
    one): one delimiter listing on S3, never a recursive walk of the bucket."""
    import pyarrow.fs as pafs

    fs, root = filesystem(location, storage_options)
    try:
        infos = fs.get_file_info(pafs.FileSelector(root, recursive=False, allow_not_found=True))
    except FileNotFoundError:
        return []
    return sorted(
        (info.base_name, info.mtime.timestamp() if info.mtime is not None else None)
        for info in infos
        if info.type == pafs.FileType.Directory
    )
