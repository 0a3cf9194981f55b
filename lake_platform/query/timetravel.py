"""Time travel in SQL: a quoted table name with a selector reads an older version or a tag.

    SELECT * FROM wh.ns."orders@v12"        -- version 12
    SELECT * FROM wh.ns."orders@tag:eod"    -- the version tag ``eod`` names (when planned)
    SELECT * FROM wh.ns."orders@branch:dev"     -- the head of branch ``dev`` (when planned)
    SELECT * FROM wh.ns."orders@branch:dev@v3"  -- version 3 of branch ``dev``

The selector rides inside the (quoted) table name, so DataFusion plans it like any table and
asks the request-local catalog for ``orders@v12``; this module splits and resolves it against
the cached catalog snapshot (the registry's version records and tags, no registry I/O). The
resolved ref keeps the selector (``TableRef.at``), so a ticket pins exactly the version planned
(a tag moved later does not move the ticket) and a query may read ``orders`` and
``"orders@v3"`` side by side. Branches are read from the registry per query (``branch_refs``);
a version above the snapshot's head, or a tag or branch it does not find, is looked for in the
registry once before NOT_FOUND (the planner's ``snapshot_miss``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from lake_platform.errors import InvalidInput, TableTagNotFound, TableVersionNotFound
from lake_platform.naming import SEGMENT
from lake_platform.query.snapshot import AT_SELECTOR, CachedTable, TableRef

if TYPE_CHECKING:
    from lake_platform.query.branch_refs import BranchRefs

SEPARATOR = "@"


def split(table: str) -> tuple[str, str | None]:
    """``orders@v12`` -> (``orders``, ``v12``); a name without ``@`` has no selector.
    InvalidInput when the name or the selector is malformed."""
    base, sep, at = table.partition(SEPARATOR)
    if not sep:
        return table, None
    if not SEGMENT.fullmatch(base) or not AT_SELECTOR.fullmatch(at):
        shown = table if len(table) <= 80 else table[:80] + "..."
        raise InvalidInput(
            f'invalid time-travel reference {shown!r}: write "table@v<version>", "table@tag:<tag>", '
            '"table@branch:<branch>" or "table@branch:<branch>@v<version>" (quoted, lower case)'
        )
    return base, at


def resolve(cached: CachedTable, at: str, branches: BranchRefs | None = None) -> TableRef:
    """The ref of the version ``at`` selects on ``cached`` (its current incarnation).

    TableVersionNotFound: no such registered version (never committed, or cleaned up);
    TableTagNotFound: no such tag; TableBranchNotFound: no such branch."""
    name = cached.name  # in full: the project too, as every other error names a table
    m = AT_SELECTOR.fullmatch(at)
    if m is None:  # split() checked it; a ref from elsewhere must not slip through
        raise InvalidInput(f"invalid time-travel selector {at!r}")
    if m.group(3) is not None:
        if branches is None:
            raise InvalidInput(f"{name}@{at}: branches cannot be read here")
        return branches.resolve(cached, m.group(3), int(m.group(4)) if m.group(4) else None, at)
    if m.group(1) is not None:
        version = int(m.group(1))
    else:
        tag = m.group(2)
        found = cached.tags.get(tag)
        if found is None:
            raise TableTagNotFound(f"no tag {tag} on {name}")
        version = found
    ref = cached.ref_at(version, at)
    if ref is None:
        raise TableVersionNotFound(
            f"version {version} of {name} does not exist or was cleaned up "
            f"(`lake table history` lists the readable versions)"
        )
    return ref


def reads_branch_head(at: str | None) -> bool:
    """Whether a selector names a branch's head: it moves without the snapshot moving."""
    m = AT_SELECTOR.fullmatch(at) if at is not None else None
    return m is not None and m.group(3) is not None and m.group(4) is None


__all__ = ["SEPARATOR", "reads_branch_head", "resolve", "split"]
