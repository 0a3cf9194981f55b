"""What a branch publish's registry writes weigh (``branch_publish``): by count and by bytes
(``MetaStore.max_transact_ops`` and ``max_transact_bytes``; DynamoDB's TransactWriteItems takes
99 items and 4 MB), as a multi-table commit's are (``transaction_chunks``). A wide table's new
head holds its schema (~300 KB for 1,450 columns), so fourteen of them fit one write by count and
not by bytes. The final write moves every main at once (a reader never holds one table
published and another not), so heads that do not fit one write are refused before anything is
written; the versions registered ahead of it are packed into writes the store takes."""

from __future__ import annotations

from collections.abc import Sequence

from lake_platform.errors import TransactionTooLarge
from lake_platform.registry.store import Check, MetaStore, Op, Put, cost, fits, pack


def fences(keys: Sequence[str]) -> list[Op]:
    """The conditions the leases ``keys`` add to each write (weighed as ``Lease.fenced`` adds them)."""
    return [Check(key, 0) for key in keys]


def final_fits(store: MetaStore, ops: Sequence[Op], leases: Sequence[str]) -> bool:
    """Whether the final write (``ops``, fenced by ``leases``) is one the store takes."""
    return fits(store, [*ops, *fences(leases)])


def early_batches(store: MetaStore, puts: Sequence[Put], leases: Sequence[str]) -> list[list[Put]]:
    """``puts`` (versions registered ahead of the final write) packed in order into writes the
    store takes with every lease's fence in each."""
    fenced = cost(store, fences(leases))
    room = None if store.max_transact_bytes is None else store.max_transact_bytes - fenced[1]
    batches = pack([cost(store, [p]) for p in puts], store.max_transact_ops - fenced[0], room)
    return [[puts[i] for i in batch] for batch in batches]


def too_large(store: MetaStore, per_table: Sequence[Sequence[Op]]) -> TransactionTooLarge:
    """The refusal of a publish whose final write the store cannot take (``per_table``: each
    table's ops in it, its lease fences included, its versions but the head's registered ahead):
    how many of its tables, in order, would fit one."""
    costs = [cost(store, ops) for ops in per_table]
    most = len(pack(costs, store.max_transact_ops, store.max_transact_bytes)[0])
    count, nbytes = sum(c for c, _ in costs), sum(b for _, b in costs)
    limit = f"{store.max_transact_ops} operations"
    if store.max_transact_bytes is not None:
        limit += f" and {store.max_transact_bytes:,} bytes"
    return TransactionTooLarge(
        f"publishing {len(per_table)} tables moves every main in one registry write: "
        f"{count} operations, {nbytes:,} bytes (each new head holds its schema), more than one "
        f"{store.backend} registry transaction carries ({limit}); nothing was published: publish "
        f"fewer at once (at most {most} of these)",
        max_tables=most,
    )
