"""A snapshot never holds part of an atomic multi-table commit.

``load_snapshot`` reads the table records with a prefix scan, which pages (SQLite: one query per
page; DynamoDB: a Query is not isolated from a TransactWriteItems), so a multi-table commit
landing during the scan could be seen in some tables and not in others. Each version such a
commit makes names the other tables and their versions (``VersionRecord.transaction``): a table
seen at that version whose siblings were seen at older ones has them read again, in one
consistent multi-get (``MetaStore.get_many``: one SQLite read transaction, one DynamoDB
TransactGetItems), which sees the whole commit since it had landed already. A head version the
earlier version scan missed (committed after it) is read the same way, so its siblings are known.

A commit larger than one registry write (``catalog.transaction_chunks``) moves its heads in
several writes after its commit point, so a sibling can still be behind after the re-read (its
head not moved yet, or never, its writer killed). Its version then sits above its head, and the
head that names it also names the commit's transaction record (``VersionRecord.transaction_id``):
read once per transaction, ``committed`` means the sibling is viewed at its new version (its
version record, and the new schema the record carries), as the next writer will move its head;
a record gone means the heads all moved meanwhile, and the next round reads them.

Such a commit's writer can stop (killed, or the registry refusing the head moves, which its
caller is answered as committed all the same) right after the commit point with no head moved:
then no head names it, and only its committed record leads to its versions. A load therefore
also takes the committed transaction records (``committed_transactions``: a cold load scans
them, few as they are, since a record is deleted once its heads moved; a refresh reads those the
change feed names, which announces the commit point) and views every table of each at its new
version, so a Flight SQL or ``lake sql`` query after a commit answered as made sees all of it,
as a single-table reader does (``transaction_recovery.committed_head``). A table read at a
version older than the one the commit started from (read before an earlier commit of it) is
read again first, so that earlier commit is held whole too.

Its writer puts each new version's manifest at its canonical path only after the registry step
(``transaction.Transaction._publish``), and its caller is answered after that: a writer killed
at the commit point leaves versions registered at canonical paths with no file there, which no
reader can open without writing (Lance, handed the staging manifest, copies it to the canonical
path; opened from the manifest's bytes, it looks for the index section at the missing path).
So a commit whose heads all lag is viewed at its new versions only once every one of them is
published (``published``: one stat per such table); until then every one of its tables stays
at the version it started from, its last published state, and the commit's id is returned in
``held`` so that each refresh reads the record again (publishing writes no registry record)
until it is published, or its heads moved (the next writer, ``lake table repair``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence

from lake_platform.naming import TableName
from lake_platform.registry import keys
from lake_platform.registry.records import (
    TableRecord,
    TransactionRecord,
    TransactionTable,
    VersionRecord,
    decode,
)
from lake_platform.registry.store import MetaStore, get_all

log = logging.getLogger(__name__)

#: Rounds of re-reads at most: each one only follows commits that landed during the load.
MAX_ROUNDS = 8

#: Whether a version registered at its canonical manifest path before its writer put the file
#: there (``VersionRecord.staged_from``) is published: (location read from, its record).
Published = Callable[[str, VersionRecord], bool]


def manifests_on_storage(storage_options: Callable[[str], dict[str, str]]) -> Published:
    """``Published`` by a stat (a HEAD on S3) of the version's canonical manifest, with
    ``storage_options`` of its location (``LakeSettings.storage_options``). A storage error
    counts as not published: the commit is then held whole at its last published state, and
    the next refresh asks again."""
    from lake_platform.engine.manifests import manifest_exists

    def published(location: str, ver: VersionRecord) -> bool:
        try:
            return manifest_exists(location, ver.manifest_path, storage_options(location))
        except Exception:  # noqa: BLE001 - unreachable storage: asked again by the next refresh
            log.warning("cannot check the manifest of %s version %s", location, ver.version, exc_info=True)
            return False

    return published


def committed_transactions(store: MetaStore) -> list[TransactionRecord]:
    """Every committed transaction record: commits over several registry writes past their
    commit point whose heads may lag (one registry read; a record goes once its heads moved)."""
    found = (decode(TransactionRecord, i.value, i.key) for i in store.scan_prefix(keys.transaction("")))
    return [txn for txn in found if txn.state == "committed"]


def complete_transactions(
    store: MetaStore,
    records: list[TableRecord],
    versions: dict[str, dict[int, VersionRecord]],
    committed: Sequence[TransactionRecord] = (),
    published: Published | None = None,
    held: set[str] | None = None,
) -> list[TableRecord]:
    """``records`` with every table a visible multi-table commit wrote at least at the version it
    got there; ``versions`` (by incarnation, then number) gains the head versions read.
    ``committed``: committed transaction records read after ``records`` (their tables not in
    ``records`` are left out). ``published``: a commit none of whose heads moved is viewed only
    when its versions are (None: not checked); ``held`` gains the ids of those held back."""
    held = held if held is not None else set()
    by_name = {r.name: r for r in records}
    _read_missing_heads(store, list(by_name.values()), versions)
    for _ in range(MAX_ROUNDS):
        behind = _behind(by_name, versions)
        older = _older(by_name, committed)
        if not behind and not older:
            break
        fresh: list[TableRecord] = []
        wanted = [keys.table(TableName.parse(n)) for n in sorted(set(behind) | older)]
        fresh += [decode(TableRecord, i.value, i.key) for i in get_all(store, wanted) if i is not None]
        for record in fresh:
            held = by_name.get(record.name)
            by_name[record.name] = not_behind(held, record) if held is not None else record
        _read_missing_heads(store, fresh, versions)
        still = _behind(by_name, versions)
        for txn_id in sorted({t for t in still.values() if t is not None}):
            _view_committed(store, txn_id, by_name, versions)
    for txn in committed:
        _view(store, txn, by_name, versions, published, held)
    return list(by_name.values())


def not_behind(held: TableRecord, read: TableRecord) -> TableRecord:
    """``read``, a table record read again, at the version ``held`` (the snapshot's) is at when
    that is later in the same incarnation: a head never goes back, so ``read`` lags a committed
    commit the snapshot viewed through its record (a write that leaves the head, such as a
    protection flip, rewrites the record before the commit's heads move). Its other fields are
    ``read``'s."""
    if not _ahead(held, read):
        return read
    return read.model_copy(
        update={"current_version": held.current_version, "schema_ipc_b64": held.schema_ipc_b64}
    )


def _older(by_name: dict[str, TableRecord], committed: Sequence[TransactionRecord]) -> set[str]:
    """The tables of ``committed`` read below the version their commit started from."""
    return {
        t.name
        for txn in committed
        for t in txn.tables
        if (r := by_name.get(t.name)) is not None
        and r.incarnation == t.incarnation
        and r.current_version < t.from_version
    }


def _ahead(held: TableRecord | None, read: TableRecord) -> bool:
    """Whether ``held`` (viewed through a committed record) is past ``read`` of the same
    incarnation: a head never goes back, so ``read`` lags it."""
    return (
        held is not None
        and held.incarnation == read.incarnation
        and held.current_version > read.current_version
    )


def _behind(
    by_name: dict[str, TableRecord], versions: dict[str, dict[int, VersionRecord]]
) -> dict[str, str | None]:
    """The tables seen behind a commit another table's head holds, each with that commit's
    transaction record id (None: it landed in one registry write)."""
    behind: dict[str, str | None] = {}
    for record in by_name.values():
        head = versions.get(record.incarnation, {}).get(record.current_version)
        for name, version in head.transaction.items() if head is not None else ():
            sibling = by_name.get(name)
            if sibling is None or sibling.current_version < version:
                behind[name] = behind.get(name) or head.transaction_id
    return behind


def _view_committed(
    store: MetaStore,
    txn_id: str,
    by_name: dict[str, TableRecord],
    versions: dict[str, dict[int, VersionRecord]],
) -> None:
    """The tables of a committed transaction still behind, viewed at their new versions."""
    item = store.get(keys.transaction(txn_id))
    txn = decode(TransactionRecord, item.value, item.key) if item is not None else None
    if txn is not None:
        _view(store, txn, by_name, versions)  # gone: every head moved meanwhile (the next round reads them)


def _view(
    store: MetaStore,
    txn: TransactionRecord,
    by_name: dict[str, TableRecord],
    versions: dict[str, dict[int, VersionRecord]],
    published: Published | None = None,
    held: set[str] | None = None,
) -> None:
    """``txn``'s tables held at the version it started from, viewed at their new versions
    when it is committed (its version records read, and the new schema the record carries):
    with ``published``, and none of its heads moved, only once all of them are published
    (else none is, and ``held`` gains its id)."""
    if txn.state != "committed":
        return
    lagging = [
        t
        for t in txn.tables
        if (r := by_name.get(t.name)) is not None
        and r.incarnation == t.incarnation
        and t.from_version <= r.current_version < t.to_version
    ]
    found = [
        decode(VersionRecord, item.value, item.key)
        for item in get_all(store, [keys.version(t.incarnation, t.to_version) for t in lagging])
        if item is not None
    ]
    if published is not None and not _moved(txn, by_name):
        unread = [
            v for v in found if v.staged_from is not None and not _published(v, by_name, lagging, published)
        ]
        if unread:
            if held is not None:
                held.add(txn.txn_id)
            return
    for ver in found:
        t = next(t for t in lagging if t.incarnation == ver.incarnation)
        updates: dict[str, object] = {"current_version": ver.version}
        if t.schema_ipc_b64 is not None:
            updates["schema_ipc_b64"] = t.schema_ipc_b64
        by_name[t.name] = by_name[t.name].model_copy(update=updates)
        versions.setdefault(ver.incarnation, {})[ver.version] = ver


def _moved(txn: TransactionRecord, by_name: dict[str, TableRecord]) -> bool:
    """Whether one of ``txn``'s heads moved (then its versions are what readers hold already,
    published or not: a moved head is never taken back)."""
    return any(
        r.incarnation == t.incarnation and r.current_version >= t.to_version
        for t in txn.tables
        if (r := by_name.get(t.name)) is not None
    )


def _published(
    ver: VersionRecord,
    by_name: dict[str, TableRecord],
    lagging: Sequence[TransactionTable],
    published: Published,
) -> bool:
    t = next(t for t in lagging if t.incarnation == ver.incarnation)
    return published(ver.location or by_name[t.name].folder_uri, ver)


def _read_missing_heads(
    store: MetaStore, records: Sequence[TableRecord], versions: dict[str, dict[int, VersionRecord]]
) -> None:
    missing = [
        keys.version(r.incarnation, r.current_version)
        for r in records
        if r.current_version > 0 and r.current_version not in versions.get(r.incarnation, {})
    ]
    for item in get_all(store, missing):
        if item is not None:
            ver = decode(VersionRecord, item.value, item.key)
            versions.setdefault(ver.incarnation, {})[ver.version] = ver
