"""The schema of a Lance client's staged manifest: Lance can open it, its fields fit the data
files it keeps, and a change to it takes the role the catalog's own change takes.

Before a staged manifest becomes a version, Lance itself must decode it
(``engine/manifest_decode.py``): the catalog's own readers of a manifest are partial and
lenient, so a manifest they accept may be one no Lance client can open, and registered it would
leave the table's current version unreadable for everyone. Refused as InvalidInput.

Lance binds a data file's columns to the schema by field id (``engine/field_ids.py``), and a
client's manifest says what the ids are. So when the staged schema is not its parent's (the
parent version's manifest, beside it: no registry read), it is compared id by id with the
parent's, against the data files both name (the files the commit keeps). Refused as
TableSchemaValidationError, what the catalog never writes and no Lance client could read
truthfully:

- a field id the kept files hold, given another type (Lance's own cast gives the column a new
  id and writes it anew; the old type's bytes would be read as the new one);
- a field id the kept files hold, given to a new column (a column dropped earlier keeps its
  values in the files until compaction: they would reappear under the new one);
- a non-nullable column over rows without values for it (they would read null), or a nullable
  one the kept files hold made non-nullable (the catalog adds columns nullable; Lance's own
  alter scans the values first, which the catalog cannot check here).

The role a change takes (``require_schema_role``) is the catalog's for it (``catalog/alter.py``):
dropping, renaming (by id: two columns swapping names are renamed, though the schema by name is
unchanged) or retyping a column takes admin, dropping one is refused on a protected table;
adding columns takes write, as does replacing the rows (an overwrite) – judged from the files
kept, not from the operation the client's transaction names. All before the lease: a refused
commit registers nothing.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from lake_platform.errors import InvalidInput, Protected, TableSchemaValidationError

if TYPE_CHECKING:
    from lake_platform.catalog.principals import Principal
    from lake_platform.engine.transactions import StagedChange
    from lake_platform.naming import TableName
    from lake_platform.registry.records import TableRecord


@dataclass(frozen=True)
class StagedSchema:
    """What ``staged_schema`` found."""

    #: The staged manifest's Arrow schema (IPC bytes).
    ipc: bytes
    #: Columns whose field id the manifest names anew (``old -> new``).
    renamed: tuple[str, ...] = field(default=())
    #: Whether any data file of the parent survives (None: not compared, the schema being the
    #: parent's, or the parent's manifest not found).
    keeps_rows: bool | None = None


def staged_schema(
    location: str,
    manifest_path: str,
    raw: bytes,
    parent_raw: bytes | None,
    storage_options: dict[str, str] | None = None,
) -> StagedSchema:
    """The staged manifest file ``raw`` (at ``manifest_path``) opened by Lance (InvalidInput with
    Lance's reason if it cannot) and its fields checked against its parent's manifest file
    ``parent_raw`` (None: none, or not found) as the module says."""
    from lake_platform.catalog.arrow_io import schema_to_ipc
    from lake_platform.engine.manifest_decode import Undecodable, decoded, decoded_schema
    from lake_platform.engine.manifests import split_manifest_file
    from lake_platform.engine.schemas import schema_key

    name = manifest_path.rpartition("/")[2]
    try:
        message = split_manifest_file(raw, manifest_path)
        ds = decoded(location, message, storage_options, raw=raw)
    except Undecodable as exc:
        raise InvalidInput(f"manifest {name} is one Lance cannot open: {exc}") from None
    except ValueError:
        raise InvalidInput(f"{name} is not a Lance manifest") from None
    ipc = schema_to_ipc(decoded_schema(ds, message))
    if parent_raw is None:
        return StagedSchema(ipc)
    try:
        parent_message = split_manifest_file(parent_raw, "parent")
        if schema_key(parent_message) == schema_key(message):
            return StagedSchema(ipc)  # the parent's schema, byte for byte: nothing to compare
        parent = decoded(location, parent_message, storage_options, raw=parent_raw)
    except ValueError:  # the registered parent unreadable: left to its readers to report
        return StagedSchema(ipc)
    renamed, keeps_rows = _compare(parent, ds, name)
    return StagedSchema(ipc, renamed, keeps_rows)


def _compare(parent: Any, staged: Any, name: str) -> tuple[tuple[str, ...], bool]:
    """The staged dataset's fields against its parent's (both ``LanceDataset``): the renamed
    columns and whether any parent data file is kept; TableSchemaValidationError for a field
    the kept files cannot be read as."""
    from lake_platform.engine.field_ids import data_file_fields, fields_by_id, fragment_fields

    before, after = fields_by_id(parent), fields_by_id(staged)
    parent_files = data_file_fields(parent)
    kept = [ids for path, ids in data_file_fields(staged).items() if path in parent_files]
    held = frozenset().union(*kept)
    where = f"manifest {name}"
    renamed = []
    for fid, now in after.items():
        was = before.get(fid)
        if was is None:
            if fid in held:
                raise TableSchemaValidationError(
                    f"{where} gives field id {fid}, which the table's data files hold (a column "
                    f"dropped, or another's), to new column {now.path}: its old values would "
                    "read as the new column's; a new column takes a new field id"
                )
            if not now.nullable and any(rows and not now.ids & ids for rows, ids in fragment_fields(staged)):
                raise TableSchemaValidationError(
                    f"{where} adds column {now.path} as non-nullable, but rows of the table have "
                    "no value for it (they would read null): add it nullable"
                )
            continue
        if was.kind != now.kind and fid in held:
            raise TableSchemaValidationError(
                f"{where} changes column {now.path} (field id {fid}) from {was.kind} to "
                f"{now.kind} in place, while the table's data files hold it as {was.kind}: a "
                "cast writes the column anew under a new field id (Lance's alter_columns)"
            )
        if was.nullable and not now.nullable and now.ids & held:
            raise TableSchemaValidationError(
                f"{where} makes column {now.path} (field id {fid}) non-nullable over rows that may hold nulls"
            )
        if was.path != now.path:
            renamed.append(f"{was.path} -> {now.path}")
    return tuple(renamed), bool(kept)


def require_schema_role(
    who: Principal,
    tname: TableName,
    record: TableRecord,
    before_ipc: bytes | None,
    after_ipc: bytes,
    change: StagedChange,
) -> None:
    """A Lance client's commit changing the schema from ``before_ipc`` (the line's registered
    schema) to ``after_ipc`` held to the catalog's role for the same change, as the module says
    (``record``: main's, which says whether the table is protected; ``change``: what
    ``staged_schema`` found, in ``renamed_columns`` and ``keeps_rows``). When the files kept are
    not known, an overwrite is taken at the transaction's word."""
    from lake_platform.catalog.arrow_io import schema_from_ipc

    renamed = list(change.renamed_columns)
    if not before_ipc or (before_ipc == after_ipc and not renamed):
        return
    replaces = change.operation == "overwrite" if change.keeps_rows is None else not change.keeps_rows
    if replaces:
        return
    before, after = schema_from_ipc(before_ipc), schema_from_ipc(after_ipc)
    removed = [n for n in before.names if n not in after.names]
    retyped = [n for n in before.names if n in after.names and before.field(n).type != after.field(n).type]
    if not removed and not retyped and not renamed:
        return
    # By name a rename is a column gone and one new; fewer columns than before is a drop.
    dropped = len(after.names) < len(before.names)
    what = "drop" if dropped else "rename" if removed or renamed else "change the type of"
    columns = ", ".join(removed or renamed or retyped)
    who.require(tname.project, "admin", f"{what} column(s) {columns} of {tname}")
    if dropped and record.protected:
        raise Protected(f"table {tname} is protected; unprotect it to drop a column ({columns})")
