"""A Lance dataset's fields by id, and the field ids its data files hold (Lance's public API:
``LanceDataset.lance_schema``, ``FragmentMetadata.files``).

Lance binds a data file's columns to the schema by field id, not by name. A manifest can so
rename a column by renaming its id (metadata only), and a careless or hostile one can make
existing files read wrongly: a field id kept with another type, an id its files still hold (a
column dropped, metadata only) given to a new column, a non-nullable column over rows that have
no value for it. ``catalog/staged_schema.py`` compares a staged manifest with its parent by these
facts.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class FieldFacts:
    """One field of a Lance schema (a column or a nested field)."""

    #: Its names from the top, dot-joined.
    path: str
    #: Its own type: a leaf's Arrow type, a nested field's kind (struct, list, ...) without its
    #: children (each child is a field of its own).
    kind: str
    nullable: bool
    #: Its id and every descendant's: a data file holds a nested field's values under its leaves.
    ids: frozenset[int]


def fields_by_id(ds: Any) -> dict[int, FieldFacts]:
    """Every field of ``ds``'s schema (a ``LanceDataset``), nested ones too, by field id."""
    out: dict[int, FieldFacts] = {}

    def visit(field: Any, prefix: str) -> frozenset[int]:
        arrow = field.to_arrow()
        path = f"{prefix}{field.name()}"
        ids = frozenset({field.id()}).union(*(visit(c, path + ".") for c in field.children()))
        out[field.id()] = FieldFacts(path, _kind(arrow.type), arrow.nullable, ids)
        return ids

    for field in ds.lance_schema.fields():
        visit(field, "")
    return out


def data_file_fields(ds: Any) -> dict[str, frozenset[int]]:
    """The field ids each data file of ``ds`` holds, by its path (as the manifest writes it)."""
    return {df.path: frozenset(df.fields) for frag in ds.get_fragments() for df in frag.metadata.files}


def fragment_fields(ds: Any) -> list[tuple[int, frozenset[int]]]:
    """For each fragment of ``ds``: its physical row count and the field ids its files hold."""
    out = []
    for frag in ds.get_fragments():
        meta = frag.metadata
        held = frozenset().union(*(frozenset(df.fields) for df in meta.files))
        out.append((int(meta.physical_rows or 0), held))
    return out


def _kind(arrow_type: Any) -> str:
    if arrow_type.num_fields == 0:
        return str(arrow_type)
    size = getattr(arrow_type, "list_size", None)
    return f"{type(arrow_type).__name__}[{size}]" if size is not None else type(arrow_type).__name__
