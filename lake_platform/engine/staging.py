"""Staging manifests (``_versions/<name>.manifest-<uuid>``) in a listing of ``_versions/``:
which versions they stand for and where they are as object-store paths (how old one is:
``manifests.manifest_mtime``). What the catalog needs to remove the ones a killed commit left
(``catalog/manifests.py``)."""

from __future__ import annotations

from collections.abc import Sequence

from lake_platform.engine.manifests import manifest_version, parse_manifest_name
from lake_platform.engine.storage import table_object_root


def staging_manifests(location: str, names: Sequence[str]) -> list[tuple[int, str]]:
    """(version, object-store path as Lance reports manifest paths) of the staging manifests
    among ``names`` (file names in the table's ``_versions/``), by version."""
    root = table_object_root(location)
    found = [
        (parsed[0], f"{root}/_versions/{name}")
        for name in names
        if (parsed := parse_manifest_name(name)) is not None and parsed[1]
    ]
    return sorted(found)


def canonical_versions(names: Sequence[str]) -> set[int]:
    """The versions that have a canonical manifest among ``names``."""
    return {v for name in names if (v := manifest_version(name)) is not None}
