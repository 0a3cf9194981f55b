"""What kind of Lance operation a staged manifest commits, read from its transaction.

A Lance client that commits through the catalog (``CreateTableVersion``) hands over only a staged
manifest; which operation made it (an append, an overwrite, a column drop, ...) is recorded in
the transaction Lance wrote beside it (``table.proto``: ``Manifest.transaction_file`` (12), a
file under ``_transactions/``, or ``transaction_section`` (21), inline in the manifest file;
``transaction.proto``: the ``operation`` oneof, fields 100-116). The catalog reads it only when
a commit changes the table's schema, to govern the change as the matching CLI operation is.
"""

from __future__ import annotations

from functools import cache
from typing import Any

from lake_platform.engine.manifests import split_manifest_file
from lake_platform.engine.protobuf import message_class, parse
from lake_platform.engine.storage import read_object

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


@cache
def _classes() -> tuple[Any, Any]:
    where = message_class(
        "ManifestTransaction", {12: ("transaction_file", "string"), 21: ("transaction_section", "uint64")}
    )
    operation = message_class("TransactionOperation", {n: (name, "bytes") for n, name in OPERATIONS.items()})
    return where, operation


def _parse(cls: Any, raw: bytes, what: str) -> Any:
    return parse(cls, raw, f"{what} is not a Lance protobuf message")


def operation_of(raw: bytes) -> str | None:
    """The operation of a serialized ``Transaction``, or None if it names none known here."""
    found = _parse(_classes()[1], raw, "the transaction")
    for name in OPERATIONS.values():
        if len(getattr(found, name)):
            return name
    return None


def staged_operation(
    location: str, manifest_path: str, storage_options: dict[str, str] | None = None
) -> str | None:
    """The operation that wrote the manifest at ``manifest_path`` (staging or final): ``append``,
    ``overwrite``, ``project`` (drop or rename columns), ``merge`` (add columns), ... None when
    the manifest records no transaction (Lance may be told not to write one). ValueError if the
    manifest or its transaction cannot be read as Lance's."""
    raw = read_object(location, manifest_path, storage_options)
    message = split_manifest_file(raw, manifest_path)
    where = _parse(_classes()[0], message, manifest_path)
    if len(where.transaction_section):
        pos = int(where.transaction_section[-1])
        if pos + 4 > len(raw):
            raise ValueError(f"{manifest_path}: transaction position {pos} is outside the file")
        length = int.from_bytes(raw[pos : pos + 4], "little")
        return operation_of(raw[pos + 4 : pos + 4 + length])
    if len(where.transaction_file) and where.transaction_file[-1]:
        name = where.transaction_file[-1]
        if "/" in name or name.startswith("."):
            raise ValueError(f"{manifest_path}: transaction file name {name!r} is not a plain name")
        try:
            return operation_of(
                read_object(location, f"{_root_path(location)}/_transactions/{name}", storage_options)
            )
        except FileNotFoundError:
            raise ValueError(f"{manifest_path}: its transaction file {name} is missing") from None
    return None


def _root_path(location: str) -> str:
    """The table's root as an object-store path (no scheme), as Lance reports manifest paths."""
    if location.startswith("s3://"):
        return location.removeprefix("s3://").split("/", 1)[1].rstrip("/")
    return location.lstrip("/").rstrip("/")
