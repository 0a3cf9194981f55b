"""Which files under a table location something still references: the engine side of the orphan
scan and of version cleanup in older dataset roots.

Lance knows what each manifest names; the registry knows which versions are live. This module
answers "which files do these versions (and every branch) reference", relative to the table
location, without ever deciding liveness itself:

- ``tracked``: Lance's ``tracked_files`` (manifests, data, deletion, transaction and index files
  of every manifest on disk, streamed from Rust), filtered to the versions the caller calls live.
  A ``.txn`` file is attributed through its manifest, never by its name (whose prefix is the
  *read* version).
- ``snapshot_files``: the same for one opened snapshot, through the Python API, for a live
  version whose manifest only exists at its staging path (``tracked_files`` lists only canonical
  manifests).
- ``branch_files``: every version of a Lance branch under ``tree/<name>`` (the scan counts all
  of them live); branch datasets share main's older files.
- ``root_references``, ``latest_version``, ``index_uuids``: what given versions of one line
  (the table folder or a ``tree/<x>`` root) reference, for version cleanup in main's older
  dataset roots (``catalog/root_cleanup.py``).

Blob sidecars (``data/<stem>/*.blob``) are named in no manifest; callers treat them as part of
their data file ``data/<stem>.lance``.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import lance
import pyarrow as pa
import pyarrow.compute as pc

from lake_platform.engine import lance_engine


@dataclass
class References:
    """Referenced paths relative to the table location."""

    files: set[str] = field(default_factory=set)
    #: ``_indices/<uuid>`` directories (possibly under ``tree/<branch>/``): all their files are live.
    index_dirs: set[str] = field(default_factory=set)
    #: Main-branch versions whose manifest ``tracked_files`` read.
    versions_seen: set[int] = field(default_factory=set)
    #: Transaction uuids of versions read through the Python API (``snapshot_files``).
    txn_uuids: set[str] = field(default_factory=set)

    def update(self, other: References) -> None:
        self.files |= other.files
        self.index_dirs |= other.index_dirs
        self.versions_seen |= other.versions_seen
        self.txn_uuids |= other.txn_uuids


def _norm(uri: str) -> str:
    return uri.removeprefix("file://").rstrip("/")


def _relative(location: str, base_uri: str, path: str) -> str | None:
    """``path`` under ``base_uri`` as a path relative to ``location``; None if outside it."""
    loc, base = _norm(location), _norm(base_uri)
    if base == loc:
        return path
    if base.startswith(loc + "/"):
        return f"{base[len(loc) + 1 :]}/{path}"
    return None


def _index_dir(rel: str) -> str | None:
    head, sep, tail = rel.partition("_indices/")
    if not sep or "/" not in tail:
        return None
    return f"{head}_indices/{tail.split('/', 1)[0]}"


def tracked(
    ds: Any, location: str, live_versions: Iterable[int] | None, *, manifests: bool = True
) -> References:
    """Files referenced by the given versions' manifests (``None``: every manifest on disk).

    Lance attributes a manifest file to the version written *inside* it, so a stray copy under
    another name would count as that version's manifest: with ``manifests=False`` manifest files
    themselves are left out (the caller knows the live ones from the registry)."""
    refs = References()
    live = sorted(set(live_versions)) if live_versions is not None else None
    if live is not None and not live:
        return refs
    reader = ds.tracked_files(min_version=live[0] if live else None)
    wanted = pa.array(live, pa.int64()) if live is not None else None
    prefixes: dict[str, str | None] = {}
    for batch in reader:
        if wanted is not None:
            batch = batch.filter(pc.is_in(batch.column("version"), value_set=wanted))
        if batch.num_rows == 0:
            continue
        kinds = _decoded(batch.column("type"))
        if not manifests:
            batch = batch.filter(pc.not_equal(kinds, "manifest"))
            if batch.num_rows == 0:
                continue
            kinds = _decoded(batch.column("type"))
        refs.versions_seen.update(pc.unique(batch.column("version")).to_pylist())
        bases = batch.column("base_uri")
        if not isinstance(bases, pa.DictionaryArray):
            bases = bases.dictionary_encode()
        paths = batch.column("path")
        is_index = pc.equal(kinds, "index file")
        # Rows come per manifest; group them by base (one or two per batch) and add whole lists.
        for code, base in enumerate(bases.dictionary.to_pylist()):
            if base not in prefixes:
                prefixes[base] = _relative(location, base, "")
            prefix = prefixes[base]
            if prefix is None:
                continue  # another base path: not under this table's location
            mask = pc.equal(bases.indices, code)
            chosen = pc.filter(paths, mask).to_pylist()
            lead = f"{prefix.strip('/')}/" if prefix else ""
            refs.files.update(f"{lead}{p}" for p in chosen) if lead else refs.files.update(chosen)
            for p in pc.filter(paths, pc.and_(mask, is_index)).to_pylist():
                idx = _index_dir(f"{lead}{p}")
                if idx:
                    refs.index_dirs.add(idx)
    return refs


def _decoded(column: Any) -> Any:
    return column.dictionary_decode() if isinstance(column, pa.DictionaryArray) else column


def _list_indices(ds: Any) -> list[dict[str, Any]]:
    with warnings.catch_warnings():
        # describe_indices() does not give the uuid (the directory name) we need.
        warnings.simplefilter("ignore", DeprecationWarning)
        return list(ds.list_indices())


def snapshot_files(ds: Any, prefix: str = "") -> References:
    """Files one opened version references, read through the Python API (a fallback to ``tracked``).

    The transaction file is returned as its uuid (``txn_uuids``): match ``*-<uuid>.txn``.
    """
    refs = References()
    pre = f"{prefix.rstrip('/')}/" if prefix else ""
    for frag in ds.get_fragments():
        meta = frag.metadata
        for data_file in meta.data_files():
            if getattr(data_file, "base_id", None) is None:
                refs.files.add(f"{pre}data/{data_file.path}")
        if meta.deletion_file is not None and getattr(meta.deletion_file, "base_id", None) is None:
            refs.files.add(f"{pre}{meta.deletion_file.path(frag.fragment_id)}")
    for index in _list_indices(ds):
        refs.index_dirs.add(f"{pre}_indices/{index['uuid']}")
    try:
        refs.txn_uuids.add(str(ds.read_transaction(ds.version).uuid))
    except Exception:  # noqa: BLE001, S110 - no transaction file (very old datasets): nothing to keep
        pass
    return refs


def open_path(uri: str, storage_options: dict[str, str] | None = None) -> Any:
    """Open a dataset folder directly (branches under ``tree/``); for listing files only."""
    return lance.dataset(uri, storage_options=storage_options or None)


def branch_files(location: str, branch: str, storage_options: dict[str, str] | None = None) -> References:
    """Everything every version of ``branch`` references (its own files and main's it shares)."""
    uri = f"{location.rstrip('/')}/tree/{branch}"
    ds = open_path(uri, storage_options)
    refs = tracked(ds, location, None)
    # tracked_files leaves out index files a branch inherits: resolve them per branch version.
    for version in sorted(refs.versions_seen) or [ds.version]:
        try:
            snap = ds.checkout_version(version)
        except Exception:  # noqa: BLE001, S112 - a version without a readable manifest references nothing
            continue
        for index in _list_indices(snap):
            refs.index_dirs.add(f"_indices/{index['uuid']}")
            refs.index_dirs.add(f"tree/{branch}/_indices/{index['uuid']}")
    refs.versions_seen = set()  # branch versions are not main versions
    return refs


def root_references(
    folder: str, root: str, versions: Iterable[int], storage_options: dict[str, str] | None = None
) -> References:
    """Every file the given versions of the line at ``root`` (the table folder, or a branch's or
    a published line's ``tree/<x>`` under it) reference, manifests and transaction files
    included, relative to ``folder``; files a version shares with its parent line resolve to
    where they lie. Only versions with a final manifest are seen (``versions_seen``)."""
    return tracked(open_path(root, storage_options), folder, versions)


def latest_version(root: str, storage_options: dict[str, str] | None = None) -> int:
    """The newest version Lance finds at ``root``: the one that keeps it a dataset."""
    return int(open_path(root, storage_options).version)


def index_uuids(
    root: str, versions: Iterable[int], storage_options: dict[str, str] | None = None
) -> set[str]:
    """The uuids of every index the given versions of the line at ``root`` use, inherited ones
    included (``tracked_files`` leaves those out)."""
    ds = open_path(root, storage_options)
    found: set[str] = set()
    for version in sorted(set(versions)):
        found |= {str(index["uuid"]) for index in _list_indices(ds.checkout_version(version))}
    return found


def tags(ds: Any) -> dict[str, tuple[str | None, int]]:
    """Tag name → (branch or None for main, version)."""
    out: dict[str, tuple[str | None, int]] = {}
    for name, info in ds.tags.list().items():
        out[name] = (info.get("branch"), int(info["version"]))
    return out


def stat(location: str, rel: str, storage_options: dict[str, str] | None = None) -> tuple[int, float] | None:
    """(size, mtime epoch seconds) of one file under a table location; None if it is gone."""
    import pyarrow.fs as pafs

    fs, root = lance_engine.filesystem(location, storage_options)
    info = fs.get_file_info(f"{root.rstrip('/')}/{rel}")
    if info.type != pafs.FileType.File:
        return None
    mtime = info.mtime.timestamp() if info.mtime is not None else 0.0
    return int(info.size or 0), mtime


def delete(location: str, rel: str, storage_options: dict[str, str] | None = None) -> bool:
    """Delete one file under a table location; False if it was already gone."""
    fs, root = lance_engine.filesystem(location, storage_options)
    try:
        fs.delete_file(f"{root.rstrip('/')}/{rel}")
    except FileNotFoundError:
        return False
    return True
