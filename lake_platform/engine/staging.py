"""Staging manifests (``_versions/<name>.manifest-<uuid>``) in a listing of ``_versions/``:
which versions they stand for, where they are as object-store paths, how old they are. What
the catalog needs to remove the ones a killed commit left (``catalog/manifests.py``)."""

from __future__ import annotations

import os
from collections.abc import Sequence

from lake_platform.engine.manifests import _manifest_version, _parse_manifest_name
from lake_platform.engine.storage import _filesystem, _object_path


def staging_manifests(location: str, names: Sequence[str]) -> list[tuple[int, str]]:
    """(version, object-store path as Lance reports manifest paths) of the staging manifests
    among ``names`` (file names in the table's ``_versions/``), by version."""
    root = _root_path(location)
    found = [
        (parsed[0], f"{root}/_versions/{name}")
        for name in names
        if (parsed := _parse_manifest_name(name)) is not None and parsed[1]
    ]
    return sorted(found)


def canonical_versions(names: Sequence[str]) -> set[int]:
    """The versions that have a canonical manifest among ``names``."""
    return {v for name in names if (v := _manifest_version(name)) is not None}


def manifest_mtime(
    location: str, manifest_path: str, storage_options: dict[str, str] | None = None
) -> float | None:
    """When a manifest (an object-store path) was written, in epoch seconds; None when it is
    not on storage."""
    import pyarrow.fs as pafs

    if not location.startswith("s3://"):
        try:
            return os.path.getmtime(_object_path(location, manifest_path))
        except FileNotFoundError:
            return None
    fs, _ = _filesystem(location, storage_options)
    info = fs.get_file_info(_object_path(location, manifest_path))
    if info.type != pafs.FileType.File:
        return None
    return info.mtime.timestamp() if info.mtime is not None else 0.0


def _root_path(location: str) -> str:
    """The table's root as an object-store path (no scheme, no bucket), as Lance reports
    manifest paths."""
    if location.startswith("s3://"):
        return location.removeprefix("s3://").split("/", 1)[1].rstrip("/")
    return location.removeprefix("file://").strip("/")
