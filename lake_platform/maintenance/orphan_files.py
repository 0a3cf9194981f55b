"""What a file under a table's location is, for the orphan scan (``orphans``): live (a live
or tagged version, a branch, a live data file's blob sidecar, Lance's bookkeeping), young (an
in-flight write), unknown (outside Lance's folders), or an orphan candidate. No I/O: the scan
hands in what the registry, the manifests and the listing said."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

LANCE_DIRS = frozenset({"data", "_versions", "_transactions", "_deletions", "_indices"})


def split(rel: str) -> tuple[str, str]:
    """``tree/<branch>/data/x`` → (``tree/<branch>/``, ``data/x``); main files have prefix ``""``."""
    parts = rel.split("/")
    if parts[0] != "tree":
        return "", rel
    for i in range(2, len(parts)):
        if parts[i] in LANCE_DIRS or parts[i] == "_refs":
            return "/".join(parts[:i]) + "/", "/".join(parts[i:])
    return "/".join(parts[:-1]) + "/", parts[-1]


def manifest_rel(location: str, manifest_path: str) -> str | None:
    """The registry's manifest path (an object-store path) relative to the table location."""
    if location.startswith("s3://"):
        root = location.removeprefix("s3://").split("/", 1)[-1]
    else:
        root = location.removeprefix("file://")
    root = root.strip("/")
    path = manifest_path.lstrip("/")
    if path.startswith(root + "/"):
        return path[len(root) + 1 :]
    if "/_versions/" in "/" + path:
        return "_versions/" + ("/" + path).split("/_versions/", 1)[1]
    return None


def canonical(version: int) -> str:
    from lake_platform.engine import lance_engine as engine

    return engine.canonical_manifest_path("_versions/", version)


@dataclass
class Live:
    """Everything a scan keeps: what the registry, the manifests and the branches reference.
    Plain data, so the listing can be split into chunks classified in other processes."""

    table: str
    incarnation: str
    location: str
    current_version: int
    live_versions: int
    tagged_versions: list[int]
    branches: list[str]
    refs: Any  # engine.references.References
    live_manifests: set[str]
    started: float = 0.0
    #: Lance branches no registry record names (a create killed before its registry commit):
    #: name -> the newest mtime of its ref and its files. Their files count as live; the reclaim
    #: deletes such a branch whole, through Lance, once it is past the age gate.
    unknown_branches: dict[str, float] = field(default_factory=dict)
    #: Other tables' folders inside this one (``folder_claims.folders_inside``: a table an older
    #: release adopted at a namespace's folder): their files are never this table's orphans.
    foreign: tuple[str, ...] = ()

    @property
    def live_data(self) -> set[str]:
        return {p for p in self.refs.files if p.endswith(".lance")}


@dataclass
class Chunk:
    """One part of a scan's listing, classified: counts and every orphan candidate."""

    files: int = 0
    counts: dict[str, int] = field(default_factory=lambda: {"live": 0, "young": 0, "unknown": 0})
    candidates: dict[str, tuple[int, float]] = field(default_factory=dict)


def classify_listing(listing: list[Any], live: Live, min_age: timedelta, now: float) -> Chunk:
    found = Chunk(files=len(listing))
    live_data = live.live_data
    min_age_s = min_age.total_seconds()
    for entry in listing:
        if in_folders(entry.path, live.foreign):
            found.counts["unknown"] += 1
            continue
        kind = classify(entry.path, live.refs, live.live_manifests, live_data)
        if kind != "candidate":
            found.counts[kind] += 1
            continue
        mtime = entry.mtime.timestamp() if entry.mtime is not None else now
        if now - mtime < min_age_s:
            found.counts["young"] += 1
            continue
        found.candidates[entry.path] = (entry.size, mtime)
    return found


def in_folders(rel: str, folders: tuple[str, ...]) -> bool:
    """Whether ``rel`` lies inside one of ``folders`` (all relative to the table's folder)."""
    return any(rel.startswith(f + "/") for f in folders)


def classify(rel: str, refs: Any, live_manifests: set[str], live_data: set[str]) -> str:
    prefix, inner = split(rel)
    top = inner.split("/", 1)[0]
    if top == "_refs" or inner == "_versions/latest_version_hint.json":
        return "live"
    if top not in LANCE_DIRS or "/" not in inner:
        return "unknown"
    if rel in refs.files or (not prefix and rel in live_manifests):
        return "live"
    if top == "_indices":
        uuid = inner.split("/", 2)[1]
        return "live" if f"{prefix}_indices/{uuid}" in refs.index_dirs else "candidate"
    if top == "_transactions" and refs.txn_uuids:
        stem = inner.rsplit("/", 1)[-1].removesuffix(".txn")
        if any(stem.endswith("-" + u) for u in refs.txn_uuids):
            return "live"
    if top == "data":
        parts = inner.split("/")
        if len(parts) == 3 and parts[2].endswith(".blob"):
            return "live" if f"{prefix}data/{parts[1]}.lance" in live_data else "candidate"
    return "candidate"
