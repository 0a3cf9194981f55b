"""Whose files a table folder holds: the guard every whole-folder deletion passes first.

A purge deletes a table's whole folder, recursively. RegisterTable now adopts only a folder no
other table's lies in or around (``register``), but an older release adopted folders such as
``<root>/ns2``, where namespace ``ns2``'s tables are later created (``<root>/ns2/t-<id>.lance``):
those registrations are still in registries, and purging one would delete the other tables'
files. So before a folder is deleted, every other table registered or in the trash (their
branches live inside their folders) in a warehouse whose root overlaps it is looked at; the
deletion is refused (InvalidTableState, naming them) when

- another table's folder lies inside it (or is it), or
- it lies inside one of Lance's own folders of another table (``data/``, ``_versions/``, ...),
  whose files it would take with it.

A folder inside another table's but outside Lance's folders there (an adopted folder's later
neighbour) holds only its own table's files and is deleted as before.
"""

from __future__ import annotations

from lake_platform.catalog import roots
from lake_platform.errors import InvalidTableState
from lake_platform.registry import keys
from lake_platform.registry.records import TableRecord, TrashRecord, WarehouseRecord, decode
from lake_platform.registry.store import MetaStore

#: The folders Lance keeps inside a dataset (a branch's dataset lies under ``tree/``).
_LANCE_FOLDERS = frozenset({"data", "_versions", "_transactions", "_deletions", "_indices", "_refs", "tree"})


def _root_of(location: str) -> roots.Root:
    return roots.canonical(location.removeprefix("file://"), strict=False)


def _claims(store: MetaStore, folder: roots.Root) -> list[TableRecord]:
    """Every table registered or in the trash in a warehouse whose root overlaps ``folder``."""
    found: list[TableRecord] = []
    for item in store.scan_prefix(keys.warehouses()):
        warehouse = decode(WarehouseRecord, item.value, item.key)
        if not _root_of(warehouse.root).overlaps(folder):
            continue
        project, name = warehouse.name.split(".", 1)
        found += [
            decode(TableRecord, i.value, i.key) for i in store.scan_prefix(keys.tables_under([project, name]))
        ]
        for i in store.scan_prefix(keys.trash_prefix(f"{warehouse.name}.")):
            trashed = decode(TrashRecord, i.value, i.key)
            if trashed.table is not None:
                found.append(trashed.table)
    return found


def overlapping(store: MetaStore, record: TableRecord) -> list[str]:
    """The other tables (by name) whose files deleting ``record``'s whole folder would take."""
    folder = _root_of(record.folder_uri)
    names: set[str] = set()
    for other in _claims(store, folder):
        if other.incarnation == record.incarnation:
            continue
        theirs = _root_of(other.folder_uri)
        if theirs.within(folder):
            names.add(other.name)
        elif folder.within(theirs) and folder.parts[len(theirs.parts)] in _LANCE_FOLDERS:
            names.add(other.name)
    return sorted(names)


def _inside(store: MetaStore, record: TableRecord) -> dict[str, str]:
    """The other tables registered or in the trash whose folders lie inside ``record``'s: each
    folder (relative to ``record``'s, ``a/b``) with the table's name."""
    folder = _root_of(record.folder_uri)
    found: dict[str, str] = {}
    for other in _claims(store, folder):
        theirs = _root_of(other.folder_uri)
        if other.incarnation != record.incarnation and theirs.within(folder) and theirs != folder:
            found["/".join(theirs.parts[len(folder.parts) :])] = other.name
    return found


def folders_inside(store: MetaStore, record: TableRecord) -> list[str]:
    """The folders (relative to ``record``'s) of the other tables inside ``record``'s folder:
    their files are theirs, whatever their paths look like from here (a namespace ``data`` or
    ``tree`` puts them under names Lance uses)."""
    return sorted(_inside(store, record))


def in_lance_folders(store: MetaStore, record: TableRecord) -> list[str]:
    """The other tables (by name) whose folders lie inside one of Lance's own folders of
    ``record`` (a namespace ``data`` under an adopted folder): Lance's version cleanup of
    ``record`` takes the files there that its manifests do not name, theirs included."""
    return sorted({n for rel, n in _inside(store, record).items() if rel.split("/")[0] in _LANCE_FOLDERS})


def refuse_overlap(store: MetaStore, record: TableRecord, doing: str) -> None:
    """Raise InvalidTableState, naming them, when ``doing`` (deleting ``record``'s folder) would
    take another table's files; nothing has been deleted then."""
    others = overlapping(store, record)
    if others:
        raise InvalidTableState(
            f"refusing to {doing}: its folder {record.folder_uri} holds files of "
            f"{', '.join(others)} (registered by an older release around or inside another table's "
            "folder); nothing was deleted. Drop those tables first, or remove this table's own "
            "files by hand"
        )
