"""An append of no rows through the catalog's own paths (``tables.append``, ``branch_writes``,
the REST InsertIntoTable and ``lake ingest`` on them): no commit. An empty version would only
lengthen the history (each one a manifest, a registry record, a log entry, a step for readers
pinned to versions and for cleanup); the answer is the line's current version, from and to.

Markers riding on it (an inbox ingest's per-file ones) still land, once: in one registry
transaction with the append's own marker (from and to the current version, no log entry), so a
retry of the batch replays it and its files are not offered again. Under a caller's own commit
id the append's marker lands alone as well (``no_ops``): a retry answers the same version. A
Lance client's own CreateTableVersion is not this path: it commits what Lance staged, as Lance
does."""

from __future__ import annotations

from collections.abc import Sequence

from lake_platform.catalog.context import CatalogContext
from lake_platform.catalog.no_ops import nothing_committed
from lake_platform.catalog.pending import PendingCommit
from lake_platform.catalog.results import CommitResult
from lake_platform.naming import TableName
from lake_platform.registry.records import CommitMarker


def appended_nothing(
    ctx: CatalogContext,
    tname: TableName,
    incarnation: str,
    version: int,
    commit_id: str,
    markers: Sequence[CommitMarker] = (),
    branch: str | None = None,
    *,
    detail: dict[str, object] | None = None,
    given: bool = False,
) -> CommitResult:
    """The answer of an append of no rows to ``tname`` (``branch``: of that branch) at
    ``version``, its current one; ``markers`` landed with the append's own marker, which lands
    too under a caller's own commit id (``given``; ``no_ops``): a retry answers the same."""
    logged = dict(detail or {}) if branch is None else {**(detail or {}), "branch": branch}
    pending = PendingCommit(commit_id=commit_id, operation="append", actor="", detail=logged)
    return nothing_committed(ctx, pending, str(tname), incarnation, version, given=given, markers=markers)
