"""A table's branch records follow its name.

Branch records are keyed by the table's name (``brn/<table>/<branch>``) and belong to one
incarnation (``table_incarnation``). Everything that finds a table's branches looks under the
name the table has: listing and opening them, version cleanup (which keeps the versions branches
were made from), the orphan scan (which takes a Lance branch no record names for a killed
create's leftovers and reclaims its files) and a purge. So whatever gives an incarnation another
name (a rename, an undrop under another name) moves its branch records in the same registry
transaction as the table record.

A record under the name may belong to an earlier table of that name: one in the trash keeps it
(its undrop, purge and orphan scan read it there), so no later table takes that key over, by
a branch create, a rename or an undrop; one left by a purge nobody finished is put over.
"""

from __future__ import annotations

from lake_platform.errors import InvalidTableState, TableBranchAlreadyExists
from lake_platform.naming import TableName
from lake_platform.registry import keys
from lake_platform.registry.records import BranchRecord, TrashRecord, decode
from lake_platform.registry.store import ABSENT, Delete, Item, MetaStore, Op, Put

#: Branch records (live or in the trash) one move carries at most: two ops each, in the one
#: transaction that also moves the table record, its policy and the log entry (99 ops at most).
MAX_MOVED = 40


def of_incarnation(store: MetaStore, tname: TableName, incarnation: str) -> list[tuple[Item, BranchRecord]]:
    """The branch records under ``tname`` that belong to ``incarnation`` (any state)."""
    found = ((i, decode(BranchRecord, i.value, i.key)) for i in store.scan_prefix(keys.branches_of(tname)))
    return [(i, rec) for i, rec in found if rec.table_incarnation == incarnation]


def move_ops(store: MetaStore, tname: TableName, target: TableName, incarnation: str) -> list[Op]:
    """The ops that move ``incarnation``'s branch records from ``tname`` to ``target``, each
    conditional on the revision read (a branch commit meanwhile fails the whole transaction).
    InvalidTableState when there are more than one transaction carries."""
    moving = of_incarnation(store, tname, incarnation)
    if len(moving) > MAX_MOVED:
        raise InvalidTableState(
            f"table {tname} has {len(moving)} branches (live or in the trash); they move with it in "
            f"one registry transaction, at most {MAX_MOVED}: purge some first"
        )
    ops: list[Op] = []
    for item, rec in moving:
        moved = rec.model_copy(update={"name": str(target)})
        ops += [
            Delete(item.key, item.revision),
            Put(keys.branch(target, rec.branch), moved.encode(), free_revision(store, target, rec.branch)),
        ]
    return ops


def free_revision(store: MetaStore, tname: TableName, branch: str, incarnation: str | None = None) -> int:
    """The revision a new record of ``branch`` under ``tname`` is put at: ABSENT, or that of a
    record an earlier incarnation left behind for good (no trash record of ``tname`` names it).
    TableBranchAlreadyExists while a dropped table of that name in the trash has the branch.
    ``incarnation``: the table the record is made for (its own record is the caller's to judge)."""
    there = store.get(keys.branch(tname, branch))
    if there is None:
        return ABSENT
    owner = decode(BranchRecord, there.value, there.key).table_incarnation
    if owner != incarnation and any(
        (trash := decode(TrashRecord, i.value, i.key)).table is not None and trash.table.incarnation == owner
        for i in store.scan_prefix(keys.trash_prefix(f"{tname}/"))
    ):
        raise TableBranchAlreadyExists(
            f"branch {branch} of {tname} belongs to a dropped table {tname} (incarnation {owner}) "
            "in the trash, which undrop brings back with it: purge that table from the trash, or "
            "choose another branch name"
        )
    return there.revision
