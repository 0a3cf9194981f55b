"""The reader's catalog snapshot (invariant 7: the request path does no registry I/O).

:func:`load_snapshot` reads one from the registry: cold (the current heads, page by page:
``snapshot_load``) or, given the previous one, by change (the keys the registry's change feed
names since then: ``snapshot_refresh``); the process keeps the current one in its
``snapshot_cache.SnapshotCache``. The snapshot's types live in ``snapshot_model`` and are
re-exported here, where readers have always imported them.
"""

from __future__ import annotations

import logging

from lake_platform.query import snapshot_load, snapshot_refresh
from lake_platform.query.snapshot_model import (
    AT_SELECTOR,
    ENGINES,
    CachedTable,
    CatalogSnapshot,
    Principals,
    ProjectView,
    RefreshState,
    TableIndex,
    TableKey,
    TableRef,
    VersionHistory,
    cache_table,
)
from lake_platform.query.snapshot_transactions import Published
from lake_platform.registry.changes import FeedBehind
from lake_platform.registry.store import MetaStore

log = logging.getLogger(__name__)


def load_snapshot(
    store: MetaStore, previous: CatalogSnapshot | None = None, published: Published | None = None
) -> CatalogSnapshot:
    """The catalog as the registry holds it now. Given ``previous`` (loaded from the same
    registry), only what the change feed names since it is read again: one read per feed shard
    when nothing changed; else a cold load of the current heads, page by page.

    ``published`` (``snapshot_transactions.manifests_on_storage``): a multi-table commit whose
    writer stopped past its commit point before publishing its manifests is held whole at its
    last published state until they are (None: the registry alone decides, for callers that
    read the snapshot's records but never open its tables)."""
    if previous is not None and previous.state is not None:
        try:
            return snapshot_refresh.refresh(store, previous, published)
        except FeedBehind as exc:
            log.info("catalog snapshot: %s; loading the current heads", exc)
    return snapshot_load.cold_load(store, previous, published)


__all__ = [
    "AT_SELECTOR",
    "ENGINES",
    "CachedTable",
    "CatalogSnapshot",
    "Principals",
    "ProjectView",
    "RefreshState",
    "TableIndex",
    "TableKey",
    "TableRef",
    "VersionHistory",
    "cache_table",
    "load_snapshot",
]
