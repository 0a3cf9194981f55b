"""Every file a manifest makes its readers open, read from the manifest file's bytes.

A commit a Lance client stages names its files itself: a data file's path, an extra base path
(Lance's ``base_paths``, for shallow clones and multi-base tables) that data files, deletion
files and indexes point into by ``base_id``, files holding row ids or row versions. The catalog
lists them (``manifest_paths``) to refuse, before registering, a version that would read files
outside its table. Read through the partial protobuf views (``engine/protobuf.py``): Lance's
public Python API opens a dataset only at a registered version, and does not expose its base
paths. Fields, from Lance's ``table.proto``:

- ``Manifest``: ``fragments`` (2), ``index_section`` (6, a position in the file),
  ``base_paths`` (18: ``BasePath.id`` 1, ``path`` 4);
- ``DataFragment``: ``files`` (2), ``deletion_file`` (3), ``external_row_ids`` (6),
  ``external_last_updated_at_versions`` (8), ``external_created_at_versions`` (10),
  ``overlays`` (11: ``DataOverlayFile.data_file`` 1);
- ``DataFile``: ``path`` (1, under ``data/``), ``base_id`` (7); ``DeletionFile.base_id`` (7);
  ``ExternalFile.path`` (1, under the table's root);
- ``IndexSection.indices`` (1): ``IndexMetadata.base_id`` (9).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cache
from typing import Any

from lake_platform.engine.manifests import split_manifest_file
from lake_platform.engine.protobuf import message_class, parse


@dataclass
class ManifestPaths:
    """What one manifest references. Paths are as the manifest writes them (relative to
    ``data/`` for data files, to the table's root for external files), not yet checked."""

    #: ``BasePath`` entries: (id, path). A table's own manifests have none.
    base_paths: list[tuple[int, str]] = field(default_factory=list)
    data_files: list[str] = field(default_factory=list)
    #: The data files in the dataset's own ``data/`` folder (no base path): those a commit
    #: can add (a branch names the files it shares with its parent by base path).
    own_data_files: list[str] = field(default_factory=list)
    external_files: list[str] = field(default_factory=list)
    #: (what, base id) for every data file, deletion file and index that names a base path.
    based: list[tuple[str, int]] = field(default_factory=list)


@cache
def _views() -> dict[str, Any]:
    return {
        "manifest": message_class(
            "ManifestFiles",
            {2: ("fragments", "bytes"), 6: ("index_section", "uint64"), 18: ("base_paths", "bytes")},
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
        "deletion_file": message_class("DeletionFileBase", {7: ("base_id", "uint64")}),
        "external_file": message_class("ExternalFilePath", {1: ("path", "string")}),
        "index_section": message_class("IndexSectionPart", {1: ("indices", "bytes")}),
        "index": message_class("IndexMetadataBase", {3: ("name", "string"), 9: ("base_id", "uint64")}),
    }


def manifest_paths(raw: bytes, manifest_path: str) -> ManifestPaths:
    """What the manifest file ``raw`` (its bytes, read from ``manifest_path``) references.
    ValueError if the bytes are not a Lance manifest."""
    views = _views()
    manifest = parse(views["manifest"], split_manifest_file(raw, manifest_path), manifest_path)
    found = ManifestPaths()
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
                found.own_data_files.append(path)
        for deletion_raw in frag.deletion_file:
            deletion = parse(views["deletion_file"], deletion_raw, f"{manifest_path}: a deletion file")
            if len(deletion.base_id):
                found.based.append((f"the deletion file of fragment {frag_id}", int(deletion.base_id[-1])))
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
    return found
