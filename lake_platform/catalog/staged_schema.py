"""The schema of a Lance client's staged manifest, and the proof that Lance can open it.

Before a staged manifest becomes a version, Lance itself must decode it
(``engine/manifest_decode.py``): the catalog's own readers of a manifest are partial and
lenient, so a manifest they accept may be one no Lance client can open, and registered it would
leave the table's current version unreadable for everyone. Refused as InvalidInput, before the
lease, with nothing registered.
"""

from __future__ import annotations

from lake_platform.errors import InvalidInput


def staged_schema_ipc(
    location: str, manifest_path: str, raw: bytes, storage_options: dict[str, str] | None = None
) -> bytes:
    """The Arrow schema (IPC bytes) of the staged manifest file ``raw`` (at ``manifest_path``),
    once Lance has opened a dataset from it; InvalidInput with Lance's reason if it cannot."""
    from lake_platform.catalog.arrow_io import schema_to_ipc
    from lake_platform.engine.manifest_decode import Undecodable, decoded_schema
    from lake_platform.engine.manifests import split_manifest_file

    name = manifest_path.rpartition("/")[2]
    try:
        schema = decoded_schema(location, split_manifest_file(raw, manifest_path), storage_options)
    except Undecodable as exc:
        raise InvalidInput(f"manifest {name} is one Lance cannot open: {exc}") from None
    except ValueError:
        raise InvalidInput(f"{name} is not a Lance manifest") from None
    return schema_to_ipc(schema)
