"""A multi-table commit's first try without acquiring its leases (``Transaction._commit_unacquired``):
which transactions may try (appends without a schema step, their rows small enough to keep and
write twice), each table's unacquired lease from its lease and current version records, and the
way back to the ordinary, leased commit when the try is refused. What a single small append
(``Tables._append_unacquired``) shares with it: the batch bound and when a lease is free to try
(``free_lease``)."""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING

from lake_platform.registry.records import LeaseRecord, VersionRecord, decode

if TYPE_CHECKING:
    from lake_platform.catalog.gate import WriteGate
    from lake_platform.catalog.lease import Lease
    from lake_platform.catalog.table_write import TableWrite
    from lake_platform.registry.store import Item
    from lake_platform.settings import LakeSettings

#: An append of at most ``LakeSettings.small_append_bytes`` in at most this many batches may be
#: written under an unacquired lease (``Tables._append_unacquired``, a transaction's here): it is
#: read ahead and kept in memory, and written a second time if the unacquired lease is refused.
SMALL_APPEND_BATCHES = 16


def read_ahead(writes: list[TableWrite], settings: LakeSettings) -> bool:
    """Whether every write is an append without a schema step whose rows fit in memory
    (at most what one small append keeps, ``settings.small_append_bytes``, all tables
    together), read into ``rows``."""
    from lake_platform.catalog.arrow_io import read_small

    if any(w.mode != "append" or w.change for w in writes):
        return False
    budget = settings.small_append_bytes
    for w in writes:
        w.rows, w.data = read_small(w.data, budget, SMALL_APPEND_BATCHES)
        if w.rows is None:
            return False
        budget -= sum(batch.nbytes for batch in w.rows)
    return True


def unacquired_lease(
    gate: WriteGate,
    w: TableWrite,
    lease_item: Item | None,
    version_item: Item | None,
    above_item: Item | None,
    turns: contextlib.ExitStack,
) -> Lease | None:
    """``w``'s lease, unacquired (``WriteGate.hold_unacquired``, this process's turn on the
    table held until ``turns`` closes), if it is free and its current version recorded; else
    None, also when a version is recorded above it (``above_item``: a multi-table commit's,
    completed or cleared under the lease, before anything is staged). ``w.base``: the current
    version's record, what the namespace answers Lance without a settle."""
    assert w.record is not None
    held = free_lease(lease_item, version_item, above_item)
    if held is None:
        return None
    assert lease_item is not None and version_item is not None
    w.base = decode(VersionRecord, version_item.value, version_item.key)
    return turns.enter_context(gate.hold_unacquired(w.record.incarnation, held.token, lease_item.revision))


def free_lease(
    lease_item: Item | None, version_item: Item | None, above_item: Item | None
) -> LeaseRecord | None:
    """The table's lease record when a write may be tried on it without acquiring the lease
    (a single small append, ``Tables._append_unacquired``, or a transaction's table): the lease
    released, the current version recorded, and no version recorded above it (a multi-table
    commit's, completed under the lease instead). Else None."""
    held = decode(LeaseRecord, lease_item.value, lease_item.key) if lease_item is not None else None
    if held is None or not held.released or version_item is None or above_item is not None:
        return None
    return held


def rewind(writes: list[TableWrite]) -> None:
    """Back to before staging, the rows read ahead to be written again."""
    import pyarrow as pa

    for w in writes:
        if w.rows is not None:
            w.data = pa.RecordBatchReader.from_batches(w.data.schema, w.rows)
        w.pending, w.ns, w.lease, w.base, w.staged = None, None, None, None, []


__all__ = ["read_ahead", "rewind", "unacquired_lease"]
