"""Lance's table branches: the engine side of the catalog's branches (``catalog/branches.py``).

A branch is Lance's own: ``create_branch`` writes one manifest under ``<root>/tree/<name>`` that
references the parent's files through a base path, plus a small ref (``_refs/branches/<name>.json``)
that Lance's cleanup honours (it never removes a file a branch still references) and the orphan
scan reads. No data file is copied. Writes to the branch dataset put their files under
``tree/<name>``; the registry, not Lance, decides which of its versions exist.

A stock client (lancedb, pylance) finds a branch's dataset by its name, ``tree/<name>``, and
refuses a manifest recorded for another name, so the catalog gives the Lance branch the registry
branch's name whenever that name is free in Lance (``name_free``).
"""

from __future__ import annotations

from dataclasses import dataclass

import lance

from lake_platform.engine.manifests import manifest_size
from lake_platform.engine.panics import engine_call
from lake_platform.engine.storage import list_files, table_object_root


@dataclass(frozen=True)
class MadeBranch:
    """A Lance branch just made: its dataset root, and its first version's manifest."""

    location: str
    version: int
    manifest_path: str
    manifest_size: int | None


@engine_call
def create_branch(
    root: str, lance_branch: str, version: int, storage_options: dict[str, str] | None = None
) -> MadeBranch:
    """Branch the dataset at ``root`` (main's or a branch's) at ``version``, a registered one
    whose manifest is published. Opened by path: Lance refuses to branch a dataset opened
    through a managed-versioning namespace (its commit path has no clone)."""
    ds = lance.dataset(root, version=version, storage_options=storage_options or None)
    made = ds.create_branch(lance_branch, version, storage_options=storage_options or None)
    location = str(made.uri)
    # As Lance names manifests to a namespace: an object-store path, V2 file naming.
    path = f"{table_object_root(location)}/_versions/{(1 << 64) - 1 - version:020d}.manifest"
    return MadeBranch(location, version, path, manifest_size(location, path, storage_options))


@engine_call
def delete_branch(folder: str, lance_branch: str, storage_options: dict[str, str] | None = None) -> bool:
    """Delete a Lance branch and its files. False when another branch still builds on it (Lance
    refuses: its files are shared); True when it is gone (or never was)."""
    ds = lance.dataset(folder, storage_options=storage_options or None)
    if lance_branch not in ds.branches.list():
        return True
    try:
        ds.branches.delete(lance_branch)
    except Exception as exc:  # noqa: BLE001 - Lance's ref conflict has no type of its own
        if "referenced by" in str(exc):
            return False
        raise
    return True


def branch_names(folder: str, storage_options: dict[str, str] | None = None) -> list[str]:
    """The Lance branches of the dataset at ``folder``."""
    ds = lance.dataset(folder, storage_options=storage_options or None)
    return sorted(ds.branches.list())


def name_free(folder: str, name: str, storage_options: dict[str, str] | None = None) -> bool:
    """Whether a Lance branch ``name`` can be made fresh at ``<folder>/tree/<name>``: no Lance
    branch of that name (a live or trashed branch's, or main's line after it was published) and
    no manifest left under its ``_versions`` (a purge killed after Lance dropped the ref), whose
    version numbers a new branch's commits would meet. A staging manifest or transaction file a
    refused client commit left there (``<n>.manifest-<uuid>``, ``_transactions/``) does not
    count: no commit writes those names again, and the orphan scan reports them."""
    if name in branch_names(folder, storage_options):
        return False
    versions = list_files(folder, storage_options, under=f"tree/{name}/_versions")
    return not any(f.path.endswith(".manifest") for f in versions)
