"""Where a warehouse may live: the allowed-roots rule.

A warehouse root is canonicalised (a local folder with its symlinks resolved, or
``s3://bucket/prefix`` with its segments checked; a ``..`` segment is refused, never
normalised away), then must lie inside one of ``LAKE_WAREHOUSE_ROOTS`` (scheme and bucket
compared exactly, paths segment by segment) and must neither contain nor sit inside another
warehouse's root, the results area, the inbox, or the platform's own files. ``LAKE_HOME`` holds
those files, so a root inside it is allowed only under an allowed root that is itself a
subfolder of the home (the default ``<home>/warehouse``).

A project's admin (any principal but the operator's local admin) is held to two more rules,
``PermissionDenied`` when broken: an explicit root lies inside the project's own folder of the
innermost allowed root holding it (``<allowed root>/<project>/...``, where default roots go),
and no root holds files when the warehouse is made (nothing another tenant left is adoptable).

The rule is the same for every door (CLI, REST, Python, the demo) because ``create_warehouse``
applies it before it writes anything; ``Containers.root_violations`` reports registrations
made before the rule (or under wider settings) that break it.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from lake_platform.engine.storage import holds_files
from lake_platform.errors import InvalidInput, PermissionDenied
from lake_platform.settings import LakeSettings
from lake_platform.settings.lake import S3_BUCKET

S3 = "s3://"
FILE = "file://"


@dataclass(frozen=True)
class Root:
    """A canonical storage root: ``scheme`` "file" or "s3", the bucket ("" for a folder), and
    the path's segments."""

    scheme: str
    bucket: str
    parts: tuple[str, ...]

    def within(self, other: Root) -> bool:
        """Whether this root is ``other`` or lies under it."""
        return (
            self.scheme == other.scheme
            and self.bucket == other.bucket
            and self.parts[: len(other.parts)] == other.parts
        )

    def overlaps(self, other: Root) -> bool:
        return self.within(other) or other.within(self)

    def __str__(self) -> str:
        if self.scheme == "s3":
            return S3 + "/".join((self.bucket, *self.parts))
        return "/" + "/".join(self.parts)


#: What an S3 prefix segment may hold (a bucket: settings.lake.S3_BUCKET): the object store
#: reading a location as a URL percent-decodes its path (``%2E%2E`` is ``..``, ``%2F`` a
#: slash), reads a backslash as a slash and cuts it at ``?`` and ``#``, so anything else could
#: name a place other than the one compared here.
_S3_SEGMENT = re.compile(r"[A-Za-z0-9._=+,@~!-]+")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def canonical(root: str, *, strict: bool = True) -> Root:
    """The canonical form of a warehouse root; InvalidInput for what is not a folder or
    ``s3://bucket[/prefix]``, for any ``..`` segment, for an S3 segment an object store would
    decode or cut (``_S3_SEGMENT``), and for control characters. ``strict=False``: a root
    already registered, read as written without the character rules (an older release took
    it; ``root_violations`` reports it), so it neither blocks nor escapes the overlap checks."""
    if root.startswith(S3):
        bucket, _, prefix = root[len(S3) :].rstrip("/").partition("/")
        parts = tuple(prefix.split("/")) if prefix else ()
        if not bucket or any(p in ("", ".", "..") for p in parts):
            raise InvalidInput(f"invalid storage root {root!r}: expected s3://bucket/prefix without '..'")
        if strict and (not S3_BUCKET.fullmatch(bucket) or not all(_S3_SEGMENT.fullmatch(p) for p in parts)):
            raise InvalidInput(
                f"invalid storage root {root!r}: a bucket is 3-63 lower-case letters, digits, '.' "
                "and '-'; a prefix's segments letters, digits and ._=+,@~!- (no %, \\, ?, #, space)"
            )
        return Root("s3", bucket, parts)
    if "://" in root and not root.startswith(FILE):
        raise InvalidInput(f"unsupported storage root {root!r}: use a local folder or s3://bucket/prefix")
    if strict and _CONTROL.search(root):
        raise InvalidInput(f"invalid storage root {root!r}: control characters are not allowed")
    if root.startswith(FILE) and not root.startswith(FILE + "/"):
        raise InvalidInput(
            f"invalid storage root {root!r}: a file:// root is an absolute path, file:///folder"
        )
    path = Path(root.removeprefix(FILE)).expanduser()
    if ".." in path.parts:
        raise InvalidInput(f"storage root {root!r} refused: '..' is not allowed in a warehouse root")
    # resolve() follows every symlink, so a link pointing out of an allowed root is seen as
    # where it points.
    return Root("file", "", path.resolve().parts[1:])


def allowed(settings: LakeSettings) -> list[Root]:
    """``LAKE_WAREHOUSE_ROOTS`` canonicalised (default: ``LAKE_WAREHOUSE_ROOT`` alone)."""
    return [canonical(r.strip()) for r in settings.warehouse_roots.split(",") if r.strip()]


def _reserved(settings: LakeSettings) -> list[tuple[Root, str]]:
    """The platform's own areas no warehouse may overlap, each with how to name it."""
    areas = [
        (settings.results_root, "the results area"),
        (settings.inbox_location(), "the inbox"),
    ]
    if settings.registry_url.startswith("sqlite:///"):
        areas.append((settings.registry_url.removeprefix("sqlite:///"), "the registry"))
    if settings.audit_log not in ("", "-", "off"):
        areas.append((settings.audit_log, "the audit log"))
    return [(canonical(area), what) for area, what in areas]


def violation(root: Root, settings: LakeSettings, others: Iterable[Root]) -> str | None:
    """The rule ``root`` breaks (None: it may be a warehouse root). ``others``: the roots of
    every other registered warehouse."""
    permitted = allowed(settings)
    inside = [a for a in permitted if root.within(a)]
    if not inside:
        listed = ", ".join(str(a) for a in permitted)
        return f"it is outside the allowed warehouse roots (LAKE_WAREHOUSE_ROOTS: {listed})"
    home = canonical(Path(settings.home).expanduser().as_posix())
    if home.within(root):
        return f"it contains LAKE_HOME ({home}), which holds the registry and the platform's own files"
    if root.within(home) and not any(a.within(home) and a != home for a in inside):
        return f"it is inside LAKE_HOME ({home}), which holds the registry and the platform's own files"
    for area, what in _reserved(settings):
        if root.overlaps(area):
            return f"it {_relation(root, area)} {what} ({area})"
    for other in others:
        if root.overlaps(other):
            return f"it {_relation(root, other)} another warehouse's root"
    return None


def project_folder(root: Root, project: str, settings: LakeSettings) -> Root | None:
    """The folder of ``project`` in the innermost allowed root holding ``root``: where a
    project's own warehouses live (``<LAKE_WAREHOUSE_ROOT>/<project>/<warehouse>`` by default).
    None when no allowed root holds it (``violation`` says so)."""
    inside = [a for a in allowed(settings) if root.within(a)]
    if not inside:
        return None
    # The innermost: with nested allowed roots (/data and /data/wh) a project named "wh" must not
    # own every project's folders under /data/wh.
    nearest = max(inside, key=lambda a: len(a.parts))
    return Root(nearest.scheme, nearest.bucket, (*nearest.parts, project))


def require_tenant_root(root: Root, project: str, settings: LakeSettings) -> None:
    """PermissionDenied unless ``root`` lies in ``project``'s folder of its allowed root. Only the
    operator (the local admin) places a warehouse elsewhere: a project admin rooting one at
    ``<root>/q/w`` would take the place q's default warehouse ``q.w`` is put (that create then
    refused as inside another warehouse's root), or a project's folder not made yet."""
    folder = project_folder(root, project, settings)
    if folder is not None and not root.within(folder):
        raise PermissionDenied(
            f"warehouse root {root} refused: a project's admin may root a warehouse only inside its "
            f"project's folder ({folder}); another place is the platform operator's to choose"
        )


def require_empty(root: Root, storage_options: dict[str, str]) -> None:
    """PermissionDenied when files are under ``root``: whatever is there (a dropped warehouse's
    leftovers, an older release's tables, anyone's data) is not the project's to adopt with
    RegisterTable. Only the operator roots a warehouse at a folder holding files."""
    if holds_files(str(root), storage_options):
        raise PermissionDenied(
            f"warehouse root {root} refused: it holds files (an earlier warehouse's leftovers or data "
            "nothing registered); only the platform operator may root a warehouse at a folder that is "
            "not empty"
        )


def _relation(root: Root, other: Root) -> str:
    if root == other:
        return "is"
    return "contains" if other.within(root) else "is inside"


def require_allowed(root: Root, settings: LakeSettings, others: Iterable[Root]) -> None:
    """Raise InvalidInput naming ``root`` and the rule it breaks."""
    problem = violation(root, settings, others)
    if problem is not None:
        raise InvalidInput(f"warehouse root {root} refused: {problem}")
