"""A table version's fragments, and a read-only view of that version restricted to some of them.

pylance 14.0.2's DataFusion provider (``FFILanceTableProvider``) scans every fragment of the
dataset it is given and takes no fragment list, and a filter on ``_rowaddr`` does not prune
fragments (measured: all fragments scanned). What pylance does take is a serialized manifest
(``LanceDataset(..., serialized_manifest=...)``, the form a dataset is pickled in for distributed
readers). So a part of a snapshot is the same version opened from its own manifest with the
other fragments left out: no copy, no write, the same files, the full provider (projection and
filter pushdown, statistics) over exactly those fragments.

The manifest is edited at the protobuf wire level: ``Manifest.fragments`` is field 2 (repeated
``DataFragment``), and a fragment's id is its field 1. Every other field is kept byte for byte.
"""

from __future__ import annotations

from collections.abc import Collection, Iterator
from dataclasses import dataclass
from typing import Any

from lake_platform.errors import InvalidTableState

_FRAGMENTS_FIELD = 2  # Manifest.fragments
_ID_FIELD = 1  # DataFragment.id
_VARINT, _I64, _LEN, _I32 = 0, 1, 2, 5


@dataclass(frozen=True)
class FragmentSize:
    """One fragment of a version: its id, live rows (deletions subtracted) and data bytes."""

    id: int
    rows: int
    bytes: int


def fragment_sizes(ds: Any) -> list[FragmentSize]:
    """The version's fragments in manifest order, sized from the manifest alone (no I/O)."""
    out = []
    for frag in ds.get_fragments():
        meta = frag.metadata
        deleted = meta.deletion_file.num_deleted_rows if meta.deletion_file is not None else 0
        size = sum(int(f.file_size_bytes or 0) for f in meta.files)
        out.append(FragmentSize(int(meta.id), max(0, int(meta.physical_rows) - int(deleted or 0)), size))
    return out


def restricted(ds: Any, keep: Collection[int], storage_options: dict[str, str] | None) -> Any:
    """``ds`` (an opened version) seen through only the fragments whose ids are in ``keep``."""
    import lance

    try:
        manifest = ds.__getstate__()[3]
    except Exception as exc:  # noqa: BLE001 - a pylance without the pickled form
        raise InvalidTableState(f"cannot read the manifest of {ds.uri}: {exc}") from None
    return lance.LanceDataset(
        ds.uri,
        version=ds.version,
        storage_options=storage_options,
        serialized_manifest=keep_fragments(manifest, frozenset(keep)),
        session=ds.session(),
    )


def keep_fragments(manifest: bytes, keep: frozenset[int]) -> bytes:
    """The serialized manifest without the fragments whose ids are not in ``keep``."""
    out = bytearray()
    for field, wire, start, body, end in _fields(manifest):
        if field == _FRAGMENTS_FIELD and wire == _LEN and _fragment_id(manifest[body:end]) not in keep:
            continue
        out += manifest[start:end]
    return bytes(out)


def _fragment_id(fragment: bytes) -> int:
    for field, wire, _start, body, _end in _fields(fragment):
        if field == _ID_FIELD and wire == _VARINT:
            return _varint(fragment, body)[0]
    return 0  # proto3 leaves a zero id out


def _fields(buf: bytes) -> Iterator[tuple[int, int, int, int, int]]:
    """(field number, wire type, start, start of the value, end) of each top-level field."""
    pos = 0
    size = len(buf)
    while pos < size:
        start = pos
        key, pos = _varint(buf, pos)
        field, wire = key >> 3, key & 7
        body = pos
        if wire == _VARINT:
            _, pos = _varint(buf, pos)
        elif wire == _I64:
            pos += 8
        elif wire == _I32:
            pos += 4
        elif wire == _LEN:
            length, body = _varint(buf, pos)
            pos = body + length
        else:
            raise InvalidTableState(f"unexpected protobuf wire type {wire} in a Lance manifest")
        if pos > size:
            raise InvalidTableState("truncated Lance manifest")
        yield field, wire, start, body, pos


def _varint(buf: bytes, pos: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        if pos >= len(buf):
            raise InvalidTableState("truncated Lance manifest")
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return result, pos
        shift += 7


__all__ = ["FragmentSize", "fragment_sizes", "keep_fragments", "restricted"]
