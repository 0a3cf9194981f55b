"""An append of no rows through the catalog's own paths (``tables.append``, ``branch_writes``,
the REST InsertIntoTable and ``lake ingest`` on them): no commit. An empty version would only
lengthen the history (each one a manifest, a registry record, a log entry, a step for readers
pinned to versions and for cleanup); the answer is the line's current version, from and to.

Markers riding on it (an inbox ingest's per-file ones) still land, once: in one registry
transaction with the append's own marker (from and to the current version, no log entry), so a
retry of the batch replays it and its files are not offered again. A Lance client's own
CreateTableVersion is not this path: it commits what Lance staged, as Lance does."""

from __future__ import annotations

from collections.abc import Sequence

from lake_platform.catalog.context import CatalogContext
from lake_platform.catalog.results import CommitResult
from lake_platform.errors import ConcurrentModification, ConditionFailed
from lake_platform.naming import TableName
from lake_platform.registry import keys
from lake_platform.registry.records import CommitMarker
from lake_platform.registry.store import ABSENT, Put


def appended_nothing(
    ctx: CatalogContext,
    tname: TableName,
    incarnation: str,
    version: int,
    commit_id: str,
    markers: Sequence[CommitMarker] = (),
    branch: str | None = None,
) -> CommitResult:
    """The answer of an append of no rows to ``tname`` (``branch``: of that branch) at
    ``version``, its current one; ``markers`` landed with the append's own marker."""
    if markers:
        own = CommitMarker(
            commit_id=commit_id,
            target=str(tname),
            operation="append",
            incarnation=incarnation,
            from_version=version,
            to_version=version,
            branch=branch,
        )
        try:
            ctx.store.transact(
                [Put(keys.commit_marker(m.commit_id), m.encode(), ABSENT) for m in [own, *markers]]
            )
        except ConditionFailed:  # the same batch, sent twice at once, landed first
            replay = ctx.replayed(commit_id, table=str(tname), operation="append", branch=branch)
            if replay is not None:
                return replay
            raise ConcurrentModification(
                f"a marker of this append to {tname} landed meanwhile with another commit; "
                "nothing was written"
            ) from None
    return CommitResult(commit_id, str(tname), "append", version, version)
