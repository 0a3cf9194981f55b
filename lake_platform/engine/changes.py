"""Lance operations that change a table's rows or columns in one commit each: renames, columns
computed from SQL expressions, field metadata, restoring an older version, updates,
merge-inserts, and the rows a predicate selects replaced by new ones. Called on a dataset opened
through the catalog's bound namespace, so each commit goes through the registry (managed
versioning); none decides a version number itself.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from lake_platform.engine.panics import engine_call
from lake_platform.errors import InvalidInput

if TYPE_CHECKING:
    import lance
    import pyarrow as pa
    from lance_namespace import LanceNamespace

#: Lance's refusal of a source holding one key twice; the group is the key, ``(id = 1)``.
AMBIGUOUS = re.compile(r"multiple source rows match the same target row on (\(.*?\))")


@engine_call
def rename_columns(ds: lance.LanceDataset, renames: dict[str, str]) -> None:
    """Rename several columns in one commit."""
    ds.alter_columns(*[{"path": old, "name": new} for old, new in renames.items()])


@engine_call
def expression_schema(ds: lance.LanceDataset, expressions: dict[str, str]) -> pa.Schema:
    """The fields SQL ``expressions`` (name -> expression over the columns) yield, planned
    without reading any row; a bad expression raises Lance's error."""
    return ds.scanner(columns=dict(expressions), limit=0).projected_schema


@engine_call
def add_computed_columns(ds: lance.LanceDataset, expressions: dict[str, str]) -> None:
    """Add columns computed from SQL expressions over each row (one commit; Lance writes the
    new columns' data files)."""
    ds.add_columns(dict(expressions))


@engine_call
def restore(ds: lance.LanceDataset) -> None:
    """Make the checked-out (older) version the latest again: one new commit whose content is
    that version's, through ``ds``'s namespace."""
    ds.restore()


@engine_call
def replace_field_metadata(ds: lance.LanceDataset, metadata: dict[str, dict[str, str]]) -> None:
    """Set columns' whole field metadata (column -> metadata), one commit."""
    ds.update_field_metadata(dict(metadata), replace=True)


@engine_call
def update_rows(ds: lance.LanceDataset, updates: dict[str, str], predicate: str | None) -> int:
    """Set ``updates`` (column -> SQL expression) on the rows ``predicate`` selects (all without
    one): one commit, or none when no row matches. Returns the rows updated."""
    return int(ds.update(dict(updates), where=predicate)["num_rows_updated"])


@engine_call
def merge_insert(
    ds: lance.LanceDataset,
    data: pa.RecordBatchReader,
    on: Sequence[str],
    *,
    update_matched: bool,
    update_matched_if: str | None,
    insert_unmatched: bool,
    delete_unmatched_by_source: bool,
    delete_unmatched_by_source_if: str | None,
) -> dict[str, int]:
    """Merge ``data`` into the table on the key columns ``on``: one commit. Returns the rows
    inserted, updated and deleted. InvalidInput, in the catalog's words, for a key column the
    table lacks (before ``data`` is read) and for data holding one key twice."""
    missing = [c for c in on if c not in ds.schema.names]
    if missing:
        raise InvalidInput(f"the table has no key column {missing[0]!r} to merge on")
    builder = ds.merge_insert(list(on))
    if update_matched:
        builder = builder.when_matched_update_all(update_matched_if)
    if insert_unmatched:
        builder = builder.when_not_matched_insert_all()
    if delete_unmatched_by_source:
        builder = builder.when_not_matched_by_source_delete(delete_unmatched_by_source_if)
    try:
        stats = builder.execute(data)
    except (ValueError, OSError) as exc:
        # Lance's text for it ends in its Rust source paths; the user needs the key it met twice.
        ambiguous = AMBIGUOUS.search(str(exc))
        if ambiguous is None:
            raise
        raise InvalidInput(
            f"the data holds more than one row for key {ambiguous.group(1)}: a merge on "
            f"{', '.join(on)} takes each key at most once"
        ) from None
    return {k: int(stats.get(k, 0)) for k in ("num_inserted_rows", "num_updated_rows", "num_deleted_rows")}


@dataclass(frozen=True)
class StagedReplace:
    """A delete-and-append written but not committed (``stage_replace``): the Lance ``Update``
    operation, the version it was read from, and the rows it deletes."""

    operation: Any
    read_version: int
    deleted_rows: int


@engine_call
def stage_replace(
    ds: lance.LanceDataset,
    predicate: str,
    data: pa.RecordBatchReader,
    storage_options: dict[str, str] | None,
) -> StagedReplace:
    """Prepare the replacement of the rows ``predicate`` selects by ``data`` as one ``Update``
    operation for :func:`commit_staged`; nothing is visible until it commits.

    The deletion is a merge-insert that only deletes, left uncommitted: against an empty source
    every row is "not matched by source", so ``when_not_matched_by_source_delete(predicate)``
    writes the matching fragments' deletion vectors (a fragment left empty is removed) and
    ``execute_uncommitted`` hands them back in an ``Update``. ``data`` is written as new
    fragments (``write_fragments``) and joins that ``Update``. Public pylance only: a
    merge-insert that inserts ``data`` itself would match its rows against the table's on the
    join key and drop or collapse them, and ``ds.delete`` then ``ds.insert`` is two versions.
    Every row of ``data`` lands, identical ones too. A bad predicate raises before ``data`` is
    read."""
    import lance
    from lance.fragment import write_fragments

    deleting = ds.merge_insert([ds.schema.names[0]]).when_not_matched_by_source_delete(predicate)
    deletion, stats = deleting.execute_uncommitted(ds.schema.empty_table())
    new = write_fragments(data, ds, data.schema, mode="append", storage_options=storage_options or None)
    operation = lance.LanceOperation.Update(
        removed_fragment_ids=list(deletion.operation.removed_fragment_ids),
        updated_fragments=list(deletion.operation.updated_fragments),
        new_fragments=new,
    )
    return StagedReplace(operation, int(deletion.read_version), int(stats["num_deleted_rows"]))


@engine_call
def commit_staged(
    ds: lance.LanceDataset,
    staged: StagedReplace,
    *,
    namespace: LanceNamespace,
    table_id: Sequence[str],
    storage_options: dict[str, str] | None,
) -> int:
    """Commit ``staged`` on ``ds`` as ONE Lance version through ``namespace`` (the registry
    decides its number); returns it."""
    import lance

    committed = lance.LanceDataset.commit(
        ds,
        staged.operation,
        read_version=staged.read_version,
        storage_options=storage_options or None,
        namespace_client=namespace,
        table_id=list(table_id),
        namespace_client_managed_versioning=True,
    )
    return int(committed.version)
