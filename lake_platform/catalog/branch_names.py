"""The Lance branch a new registry branch gets: its own name when it can have it.

Stock clients (lancedb, pylance) open a branch by its name, ``<table folder>/tree/<name>``, and
refuse a manifest recorded for another name, so a branch's Lance branch carries the registry
branch's name whenever that name is free in Lance. It is not free while a Lance branch of that
name exists or a manifest is left under its ``_versions`` (``engine.branches.name_free``).

A Lance branch of that name that no registry record names (``Inventory.named_lance_branches``:
every branch record of the table, of any incarnation and state, and the published lines main
and its versions are read from) was left by a create killed between Lance's ``create_branch``
and its registry commit. Every create of the table's branches holds main's lease, so no other
create can be about to commit it: it is removed and the name taken. Anything else keeps the
name (``<name>-<id>`` instead, which lake's readers follow through the record).
"""

from __future__ import annotations

from lake_platform.catalog.context import CatalogContext
from lake_platform.catalog.inventory import Inventory
from lake_platform.catalog.lease import Lease
from lake_platform.naming import TableName
from lake_platform.registry.records import TableRecord


def lance_name(
    ctx: CatalogContext,
    tname: TableName,
    record: TableRecord,
    branch: str,
    chain: str,
    storage: dict[str, str],
    lease: Lease,
) -> str:
    """The Lance branch name for a new ``branch`` of chain ``chain``, made under ``lease``
    (main's): ``branch`` itself, after removing a leftover Lance branch of that name no record
    names; else ``<branch>-<chain prefix>``."""
    # Lance loads on use: registry-only commands import catalog without it (cli/test_fast.py)
    from lake_platform.engine import branches as engine_branches

    folder = record.folder_uri
    if engine_branches.name_free(folder, branch, storage):
        return branch
    if branch in engine_branches.branch_names(folder, storage) and branch not in (
        Inventory(ctx).named_lance_branches(tname, record)
    ):
        lease.check()  # still main's holder: no create of this table is in flight but this one
        # False: another Lance branch builds on it (Lance refuses), so it stays for the orphan scan
        if engine_branches.delete_branch(folder, branch, storage) and engine_branches.name_free(
            folder, branch, storage
        ):
            return branch
    return f"{branch}-{chain[:12]}"
