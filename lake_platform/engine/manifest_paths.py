"""Every file a manifest makes its readers open, read from the manifest file's bytes.

A commit a Lance client stages names its files itself: a data file's path, an extra base path
(Lance's ``base_paths``, for shallow clones and multi-base tables) that data files, deletion
files and indexes point into by ``base_id``, files holding row ids or row versions. The catalog
lists them (``manifest_paths``) to refuse, before registering, a version that would read files
outside its table. Read through the partial protobuf views (``engine/protobuf.py``): Lance's
public Python API opens a dataset only at a registered version, and does not expose its base
paths. Fields, from Lance's ``table.proto``:

- ``Manifest``: ``fragments`` (2), ``version`` (3), ``index_section`` (6, a position in the file),
  ``base_paths`` (18: ``BasePath.id`` 1, ``path`` 4);
- ``DataFragment``: ``files`` (2), ``deletion_file`` (3), ``external_row_ids`` (6),
  ``external_last_updated_at_versions`` (8), ``external_created_at_versions`` (10),
  ``overlays`` (11: ``DataOverlayFile.data_file`` 1);
- ``DataFile``: ``path`` (1, under ``data/``), ``base_id`` (7); ``ExternalFile.path`` (1, under
  the table's root);
- ``DeletionFile``: ``file_type`` (1: 0 ``.arrow``, 1 ``.bin``), ``read_version`` (2), ``id`` (3),
  ``base_id`` (7); its file is ``_deletions/<fragment id>-<read_version>-<id>.<ext>``;
- ``IndexSection.indices`` (1): ``IndexMetadata.uuid`` (1: ``UUID.uuid`` 1, 16 bytes), ``name``
  (3), ``base_id`` (9), ``files`` (10: ``IndexFile.path`` 1, relative to ``_indices/<uuid>/``).
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from functools import cache
from typing import Any

from lake_platform.engine.manifests import split_manifest_file
from lake_platform.engine.protobuf import message_class, parse


@dataclass
class ManifestPaths:
    """What one manifest references. Paths are as the manifest writes them (relative to
    ``data/`` for data files, to the table's root for external files), not yet checked."""

    #: The version the manifest says it is (``Manifest.version``): what Lance reports and
    #: builds its next commit on, whatever the file is named.
    version: int = 0
    #: ``BasePath`` entries: (id, path). A table's own manifests have none.
    base_paths: list[tuple[int, str]] = field(default_factory=list)
    data_files: list[str] = field(default_factory=list)
    #: The files in the dataset's own folders (no base path), relative to its root: data files
    #: (``data/...``), deletion files (``_deletions/...``) and the files an index lists
    #: (``_indices/<uuid>/...``; an index that lists none names none here). Those are what a
    #: commit can add (a branch names the files it shares with its parent by base path).
    own_files: list[str] = field(default_factory=list)
    external_files: list[str] = field(default_factory=list)
    #: (what, base id) for every data file, deletion file and index that names a base path.
    based: list[tuple[str, int]] = field(default_factory=list)


@cache
def _views() -> dict[str, Any]:
    return {
        "manifest": message_class(
            "ManifestFiles",
            {
                2: ("fragments", "bytes"),
                3: ("version", "uint64"),
                6: ("index_section", "uint64"),
                18: ("base_paths", "bytes"),
            },
        ),
        "base_path": message_class("BasePathPart", {1: ("id", "uint64"), 4: ("path", "string")}),
        "fragment": message_class(
            "DataFragmentFiles",
            {
                1: ("id", "uint64"),
                2: ("files", "bytes"),
                3: ("deletion_file", "bytes"),
                6: ("external_row_ids", "bytes"),
                8: ("external_last_updated_at_versions", "bytes"),
                10: ("external_created_at_versions", "bytes"),
                11: ("overlays", "bytes"),
            },
        ),
        "data_file": message_class("DataFilePath", {1: ("path", "string"), 7: ("base_id", "uint64")}),
        "overlay": message_class("DataOverlayFilePart", {1: ("data_file", "bytes")}),
        "deletion_file": message_class(
            "DeletionFileBase",
            {
                1: ("file_type", "uint64"),
                2: ("read_version", "uint64"),
                3: ("id", "uint64"),
                7: ("base_id", "uint64"),
            },
        ),
        "external_file": message_class("ExternalFilePath", {1: ("path", "string")}),
        "index_section": message_class("IndexSectionPart", {1: ("indices", "bytes")}),
        "index": message_class(
            "IndexMetadataBase",
            {1: ("uuid", "bytes"), 3: ("name", "string"), 9: ("base_id", "uint64"), 10: ("files", "bytes")},
        ),
        "uuid": message_class("UuidPart", {1: ("uuid", "bytes")}),
        "index_file": message_class("IndexFilePath", {1: ("path", "string")}),
    }


def _last(values: Any, default: Any = 0) -> Any:
    """A repeated view's value (the last one wins, as protobuf's own parsers read it)."""
    return values[-1] if len(values) else default


def manifest_paths(raw: bytes, manifest_path: str) -> ManifestPaths:
    """What the manifest file ``raw`` (its bytes, read from ``manifest_path``) references.
    ValueError if the bytes are not a Lance manifest."""
    views = _views()
    manifest = parse(views["manifest"], split_manifest_file(raw, manifest_path), manifest_path)
    found = ManifestPaths(version=int(_last(manifest.version)))
    for entry_raw in manifest.base_paths:
        entry = parse(views["base_path"], entry_raw, f"{manifest_path}: a base path")
        found.base_paths.append(
            (int(entry.id[-1]) if len(entry.id) else 0, entry.path[-1] if entry.path else "")
        )
    for frag_raw in manifest.fragments:
        frag = parse(views["fragment"], frag_raw, f"{manifest_path}: a fragment")
        frag_id = int(frag.id[-1]) if len(frag.id) else 0
        files = list(frag.files)
        for overlay_raw in frag.overlays:
            files += parse(views["overlay"], overlay_raw, f"{manifest_path}: an overlay").data_file
        for file_raw in files:
            data_file = parse(views["data_file"], file_raw, f"{manifest_path}: a data file")
            path = data_file.path[-1] if data_file.path else ""
            found.data_files.append(path)
            if len(data_file.base_id):
                found.based.append((f"data file {path!r}", int(data_file.base_id[-1])))
            else:
                found.own_files.append(f"data/{path}")
        for deletion_raw in frag.deletion_file:
            deletion = parse(views["deletion_file"], deletion_raw, f"{manifest_path}: a deletion file")
            if len(deletion.base_id):
                found.based.append((f"the deletion file of fragment {frag_id}", int(deletion.base_id[-1])))
            else:
                ext = "bin" if int(_last(deletion.file_type)) == 1 else "arrow"
                found.own_files.append(
                    f"_deletions/{frag_id}-{int(_last(deletion.read_version))}-{int(_last(deletion.id))}.{ext}"
                )
        for external_raw in (
            *frag.external_row_ids,
            *frag.external_last_updated_at_versions,
            *frag.external_created_at_versions,
        ):
            external = parse(views["external_file"], external_raw, f"{manifest_path}: an external file")
            found.external_files.append(external.path[-1] if external.path else "")
    if len(manifest.index_section):
        pos = int(manifest.index_section[-1])
        if pos + 4 > len(raw):
            raise ValueError(f"{manifest_path}: index section position {pos} is outside the file")
        length = int.from_bytes(raw[pos : pos + 4], "little")
        section = parse(views["index_section"], raw[pos + 4 : pos + 4 + length], f"{manifest_path}: indexes")
        for index_raw in section.indices:
            index = parse(views["index"], index_raw, f"{manifest_path}: an index")
            if len(index.base_id):
                name = index.name[-1] if index.name else "?"
                found.based.append((f"index {name!r}", int(index.base_id[-1])))
            elif len(index.files):
                folder = _index_folder(index.uuid, manifest_path)
                for file_raw in index.files:
                    index_file = parse(views["index_file"], file_raw, f"{manifest_path}: an index file")
                    found.own_files.append(f"{folder}/{_last(index_file.path, '')}")
    return found


def _index_folder(uuid_raw: Any, manifest_path: str) -> str:
    """``_indices/<uuid>`` of an index's ``uuid`` field; ValueError if it holds no UUID."""
    raw = parse(_views()["uuid"], _last(uuid_raw, b""), f"{manifest_path}: an index uuid").uuid
    try:
        return f"_indices/{uuid.UUID(bytes=_last(raw, b''))}"
    except ValueError:
        raise ValueError(f"{manifest_path}: an index's uuid is not 16 bytes") from None
