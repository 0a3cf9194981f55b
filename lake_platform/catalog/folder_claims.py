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

Looking at every table on every purge, version cleanup and orphan scan would make each of them
cost the whole warehouse. It need not: a folder of the shape the catalog gives a table,
``<root>/<ns>/.../<table>-<id>.lance`` (namespace segments, then a last one no namespace can
have), can neither hold nor lie in another of that shape. So only an *odd* folder (anything
else, which only RegisterTable makes) can be involved, and RegisterTable files one
``OddFolderRecord`` per odd folder it adopts. A check of a table with a folder of the catalog's
shape reads those records (and a warehouse whose root lies inside the folder, or around it
other than the table's own): when none overlaps, nothing is claimed; when one does, the
warehouses are looked at in full as before. Odd folders registered by an older release are
indexed once, by the first check that finds the registry unmarked (``keys.odd_folders_indexed``).
"""

from __future__ import annotations

from collections.abc import Iterator

from lake_platform.catalog import roots
from lake_platform.errors import ConditionFailed, InvalidTableState
from lake_platform.naming import SEGMENT
from lake_platform.registry import keys
from lake_platform.registry.records import OddFolderRecord, TableRecord, TrashRecord, WarehouseRecord, decode
from lake_platform.registry.store import Delete, MetaStore, Put

#: The folders Lance keeps inside a dataset (a branch's dataset lies under ``tree/``).
_LANCE_FOLDERS = frozenset({"data", "_versions", "_transactions", "_deletions", "_indices", "_refs", "tree"})


def _root_of(location: str) -> roots.Root:
    return roots.canonical(location.removeprefix("file://"), strict=False)


def is_odd(folder: roots.Root, root: roots.Root) -> bool:
    """Whether ``folder`` is not of the shape the catalog gives a table's folder under ``root``
    (module docstring): outside it or the root itself, a namespace's folder, or inside a folder
    no namespace can have."""
    if not folder.within(root) or folder == root:
        return True
    inner = folder.parts[len(root.parts) :]
    return not all(SEGMENT.fullmatch(p) for p in inner[:-1]) or bool(SEGMENT.fullmatch(inner[-1]))


def odd_folder_put(incarnation: str, name: str, folder: str) -> Put:
    """The op RegisterTable adds to its transaction for an odd folder it adopts."""
    record = OddFolderRecord(incarnation=incarnation, name=name, folder=folder)
    return Put(keys.odd_folder(incarnation), record.encode(), None)


def _warehouses(store: MetaStore) -> Iterator[WarehouseRecord]:
    for item in store.scan_prefix(keys.warehouses()):
        yield decode(WarehouseRecord, item.value, item.key)


def _registered(store: MetaStore, prefix: str) -> Iterator[TableRecord]:
    """Every table registered or in the trash whose name starts with ``prefix`` (dotted)."""
    for i in store.scan_prefix(keys.tables_under(prefix.split(".") if prefix else ())):
        yield decode(TableRecord, i.value, i.key)
    for i in store.scan_prefix(keys.trash_prefix(f"{prefix}." if prefix else "")):
        trashed = decode(TrashRecord, i.value, i.key)
        if trashed.table is not None:
            yield trashed.table


def _odd_folders(store: MetaStore) -> list[OddFolderRecord]:
    if store.get(keys.odd_folders_indexed()) is None:
        _index_older_registrations(store)
    return [decode(OddFolderRecord, i.value, i.key) for i in store.scan_prefix(keys.odd_folders())]


def _index_older_registrations(store: MetaStore) -> None:
    """File the odd folders an older release registered (it filed none), then mark the
    registry: the one pass that looks at every table. Two processes doing it at once write the
    same records."""
    homes = {w.name: _root_of(w.root) for w in _warehouses(store)}
    for table in _registered(store, ""):
        home = homes.get(".".join(table.name.split(".")[:2]))
        if home is None or is_odd(_root_of(table.folder_uri), home):
            store.transact([odd_folder_put(table.incarnation, table.name, table.folder_uri)])
    store.transact([Put(keys.odd_folders_indexed(), b"{}", None)])


def _forget_purged(store: MetaStore, odd: OddFolderRecord) -> None:
    """Delete the record of a purged table's odd folder (its incarnation has no version record
    left; RegisterTable writes both in one transaction), so checks near it stop looking at
    every table."""
    if next(iter(store.scan_prefix(keys.versions(odd.incarnation))), None) is not None:
        return
    item = store.get(keys.odd_folder(odd.incarnation))
    if item is not None:
        try:
            store.transact([Delete(item.key, item.revision)])
        except ConditionFailed:
            pass


def _claims(store: MetaStore, record: TableRecord) -> list[TableRecord]:
    return claims(store, _root_of(record.folder_uri), record.name, record.incarnation)


def claims(store: MetaStore, folder: roots.Root, name: str, incarnation: str = "") -> list[TableRecord]:
    """Every table registered or in the trash that may overlap ``folder``, the folder of table
    ``name`` (incarnation ``incarnation``, if it has one yet): the tables of each warehouse whose
    root overlaps it, or none when the folder and every odd one keep apart (module docstring)."""
    home = ".".join(name.split(".")[:2])
    near = [w for w in _warehouses(store) if _root_of(w.root).overlaps(folder)]
    if all(w.name == home and not is_odd(folder, _root_of(w.root)) for w in near):
        odd = [o for o in _odd_folders(store) if o.incarnation != incarnation]
        touching = [o for o in odd if _root_of(o.folder).overlaps(folder)]
        if not touching:
            return []
        for o in touching:
            _forget_purged(store, o)
    return [table for w in near for table in _registered(store, w.name)]


def every_claim(store: MetaStore, folder: roots.Root) -> list[TableRecord]:
    """Every table registered or in the trash in a warehouse whose root overlaps ``folder``:
    what RegisterTable checks a new location against (a folder of the catalog's shape can equal
    an adopted one, which ``claims`` does not look for: no two tables ever share one)."""
    return [
        t for w in _warehouses(store) if _root_of(w.root).overlaps(folder) for t in _registered(store, w.name)
    ]


def overlapping(store: MetaStore, record: TableRecord) -> list[str]:
    """The other tables (by name) whose files deleting ``record``'s whole folder would take."""
    folder = _root_of(record.folder_uri)
    names: set[str] = set()
    for other in _claims(store, record):
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
    for other in _claims(store, record):
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
