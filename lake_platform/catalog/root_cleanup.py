"""Version cleanup's files outside main's current dataset root.

A table's line can move between dataset roots: publishing a branch points main at the branch's
root (``<folder>/tree/<branch>-<id>``), and main's older versions stay where they were written
(the table folder itself, or an earlier published branch's root). Lance's cleanup works on one
dataset and never deletes a file under another root, even one only its removed versions named
through a base path. So after Lance's cleanup of the current root, version cleanup reclaims here
what the removed versions referenced anywhere else under the table folder, unless something
still live references it:

- a registered version of main (any root; tagged and ticket-window versions are registered);
- any version of any branch record of this incarnation, live, in the trash or being purged.

Each root keeps its newest manifest (Lance's current version there): it keeps the root a
dataset, as Lance's own cleanup keeps a dataset's latest version, for the branch refs that hang
from the table folder and the orphan scan that opens every Lance branch. Liveness is read under
main's lease, after the removed versions left the registry; a line whose live versions cannot all
be read (a manifest only at its staging path that cannot be repaired) makes the step reclaim
nothing and say so.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field

from lake_platform.catalog.context import CatalogContext
from lake_platform.engine import manifests as engine_manifests
from lake_platform.engine.storage import list_files, table_object_root
from lake_platform.naming import TableName
from lake_platform.registry import keys
from lake_platform.registry.records import BranchRecord, TableRecord, VersionRecord, decode

log = logging.getLogger(__name__)


@dataclass
class RootCandidates:
    """What the removed versions referenced outside the current root (read before Lance's
    cleanup deletes their manifests), and the manifests that keep each old root a dataset."""

    files: set[str] = field(default_factory=set)
    keep: set[str] = field(default_factory=set)
    #: Why the step reclaims nothing this time (an old root could not be read), if it does not.
    skipped: str | None = None


def root_prefix(folder: str, root: str) -> str:
    """``root`` relative to the table folder, as ``orphan_files.split`` prefixes paths: ``""``
    for the folder itself, ``tree/<x>/`` for a branch's root."""
    head, tail = folder.rstrip("/"), root.rstrip("/")
    return "" if tail == head else tail.removeprefix(head + "/") + "/"


def split(rel: str) -> tuple[str, str]:
    """A path under the table folder as (its root's prefix, the path inside that root):
    ``tree/<x>/data/f`` is (``tree/<x>/``, ``data/f``), ``data/f`` is (``""``, ``data/f``)."""
    parts = rel.split("/")
    if len(parts) > 2 and parts[0] == "tree":
        return f"tree/{parts[1]}/", "/".join(parts[2:])
    return "", rel


def manifest_rel(folder: str, manifest_path: str) -> str | None:
    """The registry's manifest path (an object-store path) relative to the table folder."""
    head = table_object_root(folder) + "/"
    path = manifest_path.lstrip("/")
    return path.removeprefix(head) if path.startswith(head) else None


def _by_root(versions: Iterable[VersionRecord], default: str) -> dict[str, list[VersionRecord]]:
    grouped: dict[str, list[VersionRecord]] = defaultdict(list)
    for v in versions:
        grouped[v.location or default].append(v)
    return grouped


def candidates(ctx: CatalogContext, record: TableRecord, doomed: list[VersionRecord]) -> RootCandidates:
    """Every file the doomed versions reference outside main's current root, with their staging
    manifests there; read before Lance's cleanup removes the current root's doomed manifests."""
    # Lance comes in with the engine's reference reader: only a cleanup that reclaims needs it.
    from lake_platform.engine import references as refs_mod

    folder = record.folder_uri
    found = RootCandidates()
    if record.location.rstrip("/") == folder.rstrip("/"):
        return found  # main never left the table folder: every version is Lance's cleanup's
    storage = ctx.storage(folder)
    current = root_prefix(folder, record.location)
    try:
        for root, versions in _by_root(doomed, folder).items():
            numbers = [v.version for v in versions]
            engine_manifests.repair_manifests(root, [(v.version, v.manifest_path) for v in versions], storage)
            found.files |= refs_mod.root_references(folder, root, numbers, storage).files
            prefix = root_prefix(folder, root)
            if prefix != current:
                found.files |= {rel for v in versions if (rel := manifest_rel(folder, v.manifest_path))}
                newest = refs_mod.latest_version(root, storage)
                found.keep.add(f"{prefix}_versions/{engine_manifests.final_manifest_name(newest)}")
    except Exception as exc:  # noqa: BLE001 - garbage left for a later cleanup never fails this one
        log.warning("cleanup of %s leaves older roots alone: %s", record.name, exc)
        return RootCandidates(skipped=str(exc).splitlines()[0][:200] if str(exc) else type(exc).__name__)
    found.files = {f for f in found.files if split(f)[0] != current and f not in found.keep}
    return found


def _live_lines(ctx: CatalogContext, tname: TableName, record: TableRecord) -> dict[str, list[VersionRecord]]:
    """Every registered version of main and of every branch record of this incarnation (any
    state), by the root it is read from."""
    lines = _by_root(
        (
            decode(VersionRecord, i.value, i.key)
            for i in ctx.store.scan_prefix(keys.versions(record.incarnation))
        ),
        record.folder_uri,
    )
    for item in ctx.store.scan_prefix(keys.branches_of(tname)):
        branch = decode(BranchRecord, item.value, item.key)
        if branch.table_incarnation != record.incarnation:
            continue
        chain = ctx.store.scan_prefix(keys.versions(branch.incarnation))
        for root, versions in _by_root(
            (decode(VersionRecord, i.value, i.key) for i in chain), branch.location
        ).items():
            lines[root].extend(versions)
    return lines


def reclaim(
    ctx: CatalogContext, tname: TableName, record: TableRecord, found: RootCandidates
) -> dict[str, int]:
    """Under main's lease, after the doomed versions left the registry: delete every candidate
    that no registered version of main or of a branch references (blob sidecars of a deleted
    data file with it). Returns the files and bytes removed, or ``other_roots_skipped`` when a
    live version could not be read (nothing is removed then)."""
    stats = {"other_roots_files_removed": 0, "other_roots_bytes_removed": 0}
    if found.skipped is not None:
        return {**stats, "other_roots_skipped": 1}
    if not found.files:
        return stats
    try:
        _delete_unreferenced(ctx, tname, record, found, stats)
    except Exception as exc:  # noqa: BLE001 - what is left is garbage a later cleanup takes
        log.warning("cleanup of %s stopped in older roots: %s", record.name, exc)
        stats["other_roots_skipped"] = 1
    return stats


def _delete_unreferenced(
    ctx: CatalogContext, tname: TableName, record: TableRecord, found: RootCandidates, stats: dict[str, int]
) -> None:
    """Read what every registered line references, then delete the candidates none does,
    counting into ``stats``."""
    # Lance comes in with the engine's reference reader: only a cleanup that reclaims needs it.
    from lake_platform.engine import references as refs_mod

    folder = record.folder_uri
    storage = ctx.storage(folder)
    live = refs_mod.References()
    lines = _live_lines(ctx, tname, record)
    for root, versions in lines.items():
        engine_manifests.repair_manifests(root, [(v.version, v.manifest_path) for v in versions], storage)
        refs = refs_mod.root_references(folder, root, [v.version for v in versions], storage)
        if {v.version for v in versions} - refs.versions_seen:
            stats["other_roots_skipped"] = 1  # liveness unknown: keep everything
            return
        live.update(refs)
        live.files |= {rel for v in versions if (rel := manifest_rel(folder, v.manifest_path))}
    doomed = sorted(found.files - live.files)
    if any(split(f)[1].startswith("_indices/") for f in doomed):
        used = set().union(
            *(refs_mod.index_uuids(r, [v.version for v in vs], storage) for r, vs in lines.items())
        )
        doomed = [f for f in doomed if not _index_in(f, used)]
    for rel in doomed:
        prefix, inner = split(rel)
        extra = []
        if inner.startswith("data/") and inner.endswith(".lance"):
            sidecars = f"{prefix}{inner.removesuffix('.lance')}"
            extra = [e.path for e in list_files(folder, storage, under=sidecars)]
        for path in [rel, *extra]:
            seen = refs_mod.stat(folder, path, storage)
            if seen is not None and refs_mod.delete(folder, path, storage):
                stats["other_roots_files_removed"] += 1
                stats["other_roots_bytes_removed"] += seen[0]


def _index_in(rel: str, used: set[str]) -> bool:
    _, inner = split(rel)
    parts = inner.split("/")
    return len(parts) > 2 and parts[0] == "_indices" and parts[1] in used
