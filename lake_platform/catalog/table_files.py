"""A table's files stay inside the table: the check every commit passes before it is registered.

A staged manifest names its files itself, and a Lance client writes it (over REST, a remote
client; in process, pylance). Registered as it is, a manifest pointing into another table's
folder (a shallow clone of it, or its manifest copied) would let this table's readers read that
table's rows, whatever the catalog's permissions say. So a version is registered only if every
data file, deletion file, index and row-id file its manifest references lies under the table's
own location: no extra base paths (Lance's ``base_paths``: shallow clones, multi-base tables,
``initial_bases``/``target_bases``), no reference by ``base_id``, no path that is absolute,
carries a scheme or climbs out with ``..``. Refused as InvalidInput, before the lease, with
nothing registered; the staged manifest is left where it is (the orphan scan reports it).

Nor is a version registered whose manifest adds a file that is gone (``added_files``,
``require_added``): a data file, a deletion file, a file an index lists. A Lance client writes
its files before it commits, perhaps long before, and an orphan reclaim past its age gate takes
files no registered version names (or the client never wrote them). Registered, the version
would be the table's current one and would not read (Lance: Not found), or its index would fail
every query it serves. Checked under the lease (a reclaim holds it while it deletes), for the
files the commit adds only: one existence check each, against the parent version's manifest,
read once before the lease. An index that lists no files (older Lance writers, inline system
indexes) is not checked: which files it needs is not known.

One exception: a branch's manifests (Lance's ``tree/<branch>`` datasets, and main's line after a
branch was published into it) reference the files they share with their parent through base
paths naming the table's own folder or another branch under it. With ``folder`` given, base
paths that are that folder or lie under its ``tree/`` are inside the table.
"""

from __future__ import annotations

import posixpath
from collections.abc import Sequence

from lake_platform.engine.manifest_paths import ManifestPaths, manifest_paths
from lake_platform.engine.manifests import canonical_manifest_path, parse_manifest_name
from lake_platform.engine.storage import read_object
from lake_platform.errors import InvalidInput


def check_manifest(
    location: str,
    manifest_path: str,
    storage_options: dict[str, str] | None = None,
    *,
    raw: bytes | None = None,
    folder: str | None = None,
    version: int | None = None,
) -> ManifestPaths:
    """Refuse (InvalidInput) the staged manifest at ``manifest_path`` unless everything it
    references lies inside the table at ``location``. ``raw``: its bytes, when the caller has
    read them. A manifest that is missing or cannot be parsed is refused too: nothing unchecked
    is registered (storage trouble reading it is raised as the OSError it is). ``folder``: the
    table's folder, when ``location`` is a branch's dataset root inside it. ``version``: the
    version it is committed as, which the manifest must say it is (``require_version``).
    Returns what it references."""
    try:
        if raw is None:
            raw = read_object(location, manifest_path, storage_options)
        paths = manifest_paths(raw, manifest_path)
    except FileNotFoundError:
        raise InvalidInput(f"manifest {manifest_path.rpartition('/')[2]} does not exist") from None
    except ValueError:
        raise InvalidInput(f"{manifest_path.rpartition('/')[2]} is not a Lance manifest") from None
    require_inside(paths, manifest_path, folder)
    if version is not None and paths.version != version:
        # Lance reads the version from the manifest, not its name: registered as another, the
        # table reads as that version and every Lance client's next commit is refused (it
        # builds on the version the manifest says), leaving the table unwritable.
        raise InvalidInput(
            f"manifest {manifest_path.rpartition('/')[2]} says it is version {paths.version} of "
            f"the table, not {version}: a manifest is committed as the version Lance wrote it as"
        )
    return paths


def parent_manifest(
    location: str, manifest_path: str, parent: int, storage_options: dict[str, str] | None = None
) -> bytes | None:
    """The manifest file of version ``parent`` of the staged manifest's line (0: none), read at
    its canonical path beside the staged one (no registry read; one the registry left at its
    staging path is read there by Lance's clients too): None when there is none. Before the
    lease: a commit whose parent moved on meanwhile is refused anyway (its version is no
    longer the next)."""
    if parent <= 0:
        return None
    try:
        return read_object(location, canonical_manifest_path(manifest_path, parent), storage_options)
    except FileNotFoundError:
        return None


def added_files(paths: ManifestPaths, parent_raw: bytes | None) -> tuple[str, ...]:
    """The files (relative to the table's root: ``ManifestPaths.own_files``) the staged
    manifest (``paths``: what it references) names and its parent's manifest file
    (``parent_raw``, ``parent_manifest``; None, or not a manifest: every file) does not: those
    the commit adds."""
    known: set[str] = set()
    if parent_raw is not None:
        try:
            known = set(manifest_paths(parent_raw, "parent").own_files)
        except ValueError:
            pass
    return tuple(p for p in dict.fromkeys(paths.own_files) if p not in known)


def require_added(
    location: str, added: Sequence[str], manifest_path: str, storage_options: dict[str, str] | None = None
) -> None:
    """Under the lease: refuse (InvalidInput, naming the file) a commit whose manifest adds a
    file (``added_files``) that is not there, before anything is registered."""
    from lake_platform.engine import references  # loads the engine: not for registry-only use

    for path in added:
        if references.stat(location, path, storage_options) is None:
            raise InvalidInput(
                f"manifest {manifest_path.rpartition('/')[2]} adds {_kind(path)} {path} which is gone "
                "(an orphan reclaim takes files no registered version names once older than its "
                "age gate): nothing was committed; write the data again"
            )


def _kind(path: str) -> str:
    if path.startswith("_deletions/"):
        return "deletion file"
    return "index file" if path.startswith("_indices/") else "data file"


def require_version(manifest_path: str, version: int) -> None:
    """Refuse (InvalidInput) a staged manifest sent as a version other than the one Lance wrote
    it as (its file name says: Lance names a staged manifest by its version). A client retrying
    a refused commit under the next number would register a manifest built on an older version,
    which no longer reads as the one it is registered as."""
    name = manifest_path.rpartition("/")[2]
    parsed = parse_manifest_name(name)
    if parsed is not None and parsed[0] != version:
        raise InvalidInput(
            f"manifest {name} is version {parsed[0]} of the table, not {version}: a commit that "
            "lost to another is staged again by the client (Lance rebuilds it on the new version)"
        )


def require_inside(paths: ManifestPaths, manifest_path: str, folder: str | None = None) -> None:
    """Refuse (InvalidInput, naming the first offending reference as the manifest writes it) a
    manifest whose references leave the table (``folder``: base paths into it are allowed)."""
    # The manifest by its file name, a base path by its id: a location (perhaps another
    # tenant's) is never echoed to the client.
    where = f"manifest {manifest_path.rpartition('/')[2]}"
    inside = {base_id for base_id, path in paths.base_paths if folder and _in_folder(path, folder)}
    for base_id, _ in paths.base_paths:
        if base_id in inside:
            continue
        raise InvalidInput(
            f"{where} adds base path {base_id}: a table's files must lie inside its own location "
            "(no shallow clones, no extra base paths)"
        )
    for what, base_id in paths.based:
        if base_id in inside:
            continue
        raise InvalidInput(f"{where}: {what} refers to base path {base_id}, outside this table's location")
    for path in paths.data_files:
        if not _inside(posixpath.join("data", path), "data/"):
            raise InvalidInput(f"{where}: data file {path!r} lies outside this table's data/ folder")
    for path in (*paths.external_files, *paths.own_files):
        if not _inside(path, ""):
            raise InvalidInput(f"{where}: file {path!r} lies outside this table's location")


def _inside(path: str, under: str) -> bool:
    """Whether ``path``, relative to the table's root, stays under ``under`` there: no scheme,
    no absolute path, no ``..`` (object stores and Lance resolve paths differently, so a path
    that needs resolving at all is refused), no backslash or percent-escape another resolver
    might read as a separator."""
    if not path or path.startswith("/") or any(c in path for c in ":\\%"):
        return False
    parts = path.split("/")
    if any(p in ("", ".", "..") for p in parts):
        return False
    return posixpath.normpath(path).startswith(under) or not under


def _in_folder(base: str, folder: str) -> bool:
    """Whether a base path is the table's folder or a branch dataset under its ``tree/``."""
    base, folder = (u.removeprefix("file://").rstrip("/") for u in (base, folder))
    if base == folder:
        return True
    rest = base.removeprefix(folder + "/tree/")
    return rest != base and _inside(rest, "")
