"""Lance's own decode of a staged manifest: the proof that Lance can open it.

The catalog reads a client's staged manifest through partial views (``protobuf.py``) that skip
every field they do not name, and the schema memo (``schemas.py``) spares Lance's decode for a
schema seen before. Neither proves the manifest is one Lance can read: a field of the wrong wire
type anywhere in the message ("invalid wire type"), an unknown reader feature flag, a broken
fragment entry, and every Lance client opening the version is refused. ``decoded`` opens a
dataset from the message itself (``LanceDataset(serialized_manifest=...)``, the public form a
dataset is pickled in), which decodes the whole message as Lance's readers will. No I/O, no
registry read: the bytes the commit already read. Cost: one decode, proportional to the
fragment count (about 0.05 ms for a small table, 0.75 ms at 1,000 fragments on this machine),
the cost the memo saved for a schema seen before; the Arrow schema itself is still remembered.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

from lake_platform.engine.lance_engine import MANIFEST_SCHEMAS, lance_module, lance_session
from lake_platform.engine.panics import EnginePanic, engine_call

if TYPE_CHECKING:
    import pyarrow as pa


class Undecodable(ValueError):
    """Lance refused to open a manifest message; the message is Lance's."""


def decoded(
    location: str, message: bytes, storage_options: dict[str, str] | None = None, *, raw: bytes | None = None
) -> Any:
    """The dataset (a ``LanceDataset``) Lance opens from the manifest ``message`` (the protobuf
    message of a manifest file, ``manifests.split_manifest_file``): Undecodable (with Lance's
    reason) if it cannot. ``location``: the table's root, which Lance does not read here, but
    for a dictionary column: ``raw``, the whole manifest file, gives its values (``_scratch``)."""
    try:
        return _open(location, message, storage_options)
    except (OSError, ValueError, RuntimeError) as exc:  # Lance's decode errors arrive as IO ones
        if raw is not None and "Not found" in str(exc):
            return _scratch(raw, message)
        raise Undecodable(_reason(exc)) from None


def _scratch(raw: bytes, message: bytes) -> Any:
    """A dictionary column's values live in the manifest file, and Lance reads them from the
    version's final manifest, which a staged commit does not have yet (the message itself
    decoded: that read is what failed). Opened in a scratch folder holding the file's bytes at
    that name: the values are read at the open; nothing else of the folder is read."""
    from lake_platform.engine.manifest_paths import manifest_paths
    from lake_platform.engine.manifests import final_manifest_name

    with tempfile.TemporaryDirectory(prefix="lake-manifest-") as scratch:
        versions = Path(scratch, "_versions")
        versions.mkdir()
        versions.joinpath(final_manifest_name(manifest_paths(raw, "staged").version)).write_bytes(raw)
        try:
            return _open(scratch, message, None)
        except (OSError, ValueError, RuntimeError) as exc:
            raise Undecodable(_reason(exc)) from None


def decoded_schema(ds: Any, message: bytes) -> pa.Schema:
    """The Arrow schema of ``ds``, opened from ``message`` (``decoded``); remembered by the
    message's schema parts (``schemas.py``)."""
    return MANIFEST_SCHEMAS.schema(message, lambda _: ds.schema)


@engine_call
def _open(location: str, message: bytes, storage_options: dict[str, str] | None) -> Any:
    return lance_module().LanceDataset(
        location,
        storage_options=storage_options or None,
        serialized_manifest=message,
        session=lance_session(),
    )


def _reason(exc: BaseException) -> str:
    """Lance's message without the Rust source position it appends (no use to a client)."""
    text = str(exc.__cause__ if isinstance(exc, EnginePanic) and exc.__cause__ else exc)
    head, sep, tail = text.rpartition(", ")
    return head if sep and ".rs:" in tail else text
