"""What a staged manifest commits, read from its transaction.

A Lance client that commits through the catalog (``CreateTableVersion``) hands over only a staged
manifest; which operation made it (an append, an overwrite, a column drop, ...) and the fragments
it wrote are recorded in the transaction Lance wrote beside it (``table.proto``:
``Manifest.transaction_file`` (12), a file under ``_transactions/``, or ``transaction_section``
(21), inline in the manifest file; ``transaction.proto``: the ``operation`` oneof, fields
100-116, and ``transaction_properties`` (4), a string map a writer may set with
``write_dataset(transaction_properties=...)``; ``Append`` and ``Overwrite`` carry their new
``DataFragment``s as field 1, each with its ``files`` (2, ``DataFile.file_size_bytes`` 6) and
``physical_rows`` (4)). The catalog reads it for every such commit: the commit log then says
what the client did (its operation and the rows, files and bytes it added), a commit that
changes the schema is governed as the matching CLI operation is, and an idempotency key in its
properties makes a retry return the first outcome.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cache
from typing import Any

from lake_platform.engine.manifests import split_manifest_file
from lake_platform.engine.protobuf import message_class, parse
from lake_platform.engine.storage import read_object, table_object_root

#: ``Transaction.operation``'s field numbers (transaction.proto), by the names used here.
OPERATIONS = {
    100: "append",
    101: "delete",
    102: "overwrite",
    103: "create_index",
    104: "rewrite",
    105: "merge",
    106: "restore",
    107: "reserve_fragments",
    108: "update",
    109: "project",
    110: "update_config",
    111: "data_replacement",
    112: "update_mem_wal_state",
    113: "clone",
    114: "update_bases",
    115: "data_overlay",
    116: "append_fri_transitions",
}


#: The operations whose message lists the fragments they add as field 1 (``fragments``).
_ADDING = ("append", "overwrite")


@dataclass(frozen=True)
class StagedChange:
    """What one transaction commits. The counts are those of the fragments an append or an
    overwrite adds (0 for other operations, whose transactions name no new data this way)."""

    operation: str | None  # None: no transaction recorded, or none naming an operation known here
    rows_added: int = 0
    files_added: int = 0
    bytes_added: int = 0
    #: The transaction's properties (``transaction_properties``; the commit message is
    #: ``__lance_commit_message``): what a client says about its commit.
    properties: dict[str, str] = field(default_factory=dict)
    #: The files (data, deletion and index files, relative to the table's root) the manifest
    #: names and its parent's does not: set by the catalog (``table_files.added_files``),
    #: which checks them under the lease.
    added_files: tuple[str, ...] = ()
    #: Set by the catalog (``staged_schema``) when the schema differs from the parent's: the
    #: columns whose field id the manifest renames (``old -> new``), and whether any data file of
    #: the parent survives (False: the rows are replaced, as an overwrite does; None: not known).
    renamed_columns: tuple[str, ...] = ()
    keeps_rows: bool | None = None


@cache
def _classes() -> tuple[Any, Any, Any, Any, Any]:
    where = message_class(
        "ManifestTransaction", {12: ("transaction_file", "string"), 21: ("transaction_section", "uint64")}
    )
    operation = message_class(
        "TransactionOperation",
        {4: ("transaction_properties", "bytes"), **{n: (name, "bytes") for n, name in OPERATIONS.items()}},
    )
    adding = message_class("AddingOperation", {1: ("fragments", "bytes")})
    fragment = message_class("DataFragmentPart", {2: ("files", "bytes"), 4: ("physical_rows", "uint64")})
    data_file = message_class("DataFilePart", {6: ("file_size_bytes", "uint64")})
    return where, operation, adding, fragment, data_file


def _parse(cls: Any, raw: bytes, what: str) -> Any:
    return parse(cls, raw, f"{what} is not a Lance protobuf message")


@cache
def _property_class() -> Any:
    return message_class("TransactionProperty", {1: ("key", "string"), 2: ("value", "string")})


def _properties(entries: Any) -> dict[str, str]:
    found = {}
    for raw in entries:
        entry = _parse(_property_class(), raw, "a transaction property")
        found[entry.key[-1] if len(entry.key) else ""] = entry.value[-1] if len(entry.value) else ""
    return found


def change_of(raw: bytes) -> StagedChange:
    """What a serialized ``Transaction`` commits. ValueError if it is not one."""
    _, operation, adding, fragment, data_file = _classes()
    found = _parse(operation, raw, "the transaction")
    properties = _properties(found.transaction_properties)
    for name in OPERATIONS.values():
        body = getattr(found, name)
        if not len(body):
            continue
        if name not in _ADDING:
            return StagedChange(name, properties=properties)
        rows = files = nbytes = 0
        for frag_raw in _parse(adding, body[-1], f"the {name} operation").fragments:
            frag = _parse(fragment, frag_raw, "a fragment")
            rows += sum(frag.physical_rows)
            for file_raw in frag.files:
                files += 1
                nbytes += sum(_parse(data_file, file_raw, "a data file").file_size_bytes)
        return StagedChange(name, rows, files, nbytes, properties)
    return StagedChange(None, properties=properties)


def staged_change(
    location: str,
    manifest_path: str,
    storage_options: dict[str, str] | None = None,
    *,
    raw: bytes | None = None,
) -> StagedChange:
    """What the manifest at ``manifest_path`` (staging or final) commits: its operation
    (``append``, ``overwrite``, ``project`` (drop or rename columns), ``merge`` (add columns),
    ...) and what it adds. ``raw``: the manifest file's bytes, when the caller has read them.
    The operation is None when the manifest records no transaction (Lance may be told not to
    write one). ValueError if the manifest or its transaction cannot be read as Lance's."""
    if raw is None:
        raw = read_object(location, manifest_path, storage_options)
    message = split_manifest_file(raw, manifest_path)
    where = _parse(_classes()[0], message, manifest_path)
    if len(where.transaction_section):
        pos = int(where.transaction_section[-1])
        if pos + 4 > len(raw):
            raise ValueError(f"{manifest_path}: transaction position {pos} is outside the file")
        length = int.from_bytes(raw[pos : pos + 4], "little")
        return change_of(raw[pos + 4 : pos + 4 + length])
    if len(where.transaction_file) and where.transaction_file[-1]:
        name = where.transaction_file[-1]
        if "/" in name or name.startswith("."):
            raise ValueError(f"{manifest_path}: transaction file name {name!r} is not a plain name")
        try:
            return change_of(
                read_object(location, f"{table_object_root(location)}/_transactions/{name}", storage_options)
            )
        except FileNotFoundError:
            raise ValueError(f"{manifest_path}: its transaction file {name} is missing") from None
    return StagedChange(None)
