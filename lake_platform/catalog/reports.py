"""Events: the commit-log entries of work done outside a table commit (orphan scans and
reclaims), and the maintenance reports some of them store, each landing with its entry in one
registry transaction."""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import replace
from typing import TypeVar

from lake_platform.catalog.context import BATCH, CatalogContext, Log
from lake_platform.catalog.lease import Lease
from lake_platform.registry import keys
from lake_platform.registry.records import CommitLogEntry, Record, decode
from lake_platform.registry.store import ABSENT, Delete, Op, Put

R = TypeVar("R", bound=Record)


class Reports:
    def __init__(self, ctx: CatalogContext) -> None:
        self.ctx = ctx

    def record_event(self, entry: Log, *, lease: Lease | None = None) -> str:
        """Land the commit-log entry of work done outside a table commit (orphan scans and
        reclaims), fenced by ``lease`` when given; returns its commit id."""
        return self.ctx.record(entry, lease=lease)

    def commit_report(
        self, kind: str, target: str, at_ms: int, report: Record, entry: Log, *, keep: int | None = None
    ) -> str:
        """Store ``report`` as the ``kind`` report on ``target`` taken at ``at_ms``, with
        ``entry`` (its detail names the report), in one transaction; with ``keep``, the oldest
        reports beyond the newest ``keep`` go in the same transaction. Returns the report's key."""
        key = keys.report(kind, target, at_ms)
        ops: list[Op] = [Put(key, report.encode(), ABSENT)]
        if keep is not None:
            old = list(self.ctx.store.scan_prefix(keys.reports(kind, target)))
            excess = max(0, len(old) + 1 - keep)
            ops += [Delete(i.key, i.revision) for i in old[: min(excess, BATCH)]]
        self.ctx.record(replace(entry, detail={"report": key, **entry.detail}), ops=ops)
        return key

    def latest_report(self, kind: str, target: str, as_type: type[R]) -> R | None:
        """The newest ``kind`` report on ``target``, None when there is none."""
        items = list(self.ctx.store.scan_prefix(keys.reports(kind, target)))
        return decode(as_type, items[-1].value, items[-1].key) if items else None

    def last_logged(self, target: str, operations: Collection[str], since_ms: int) -> int | None:
        """When ``target``'s commit log last recorded one of ``operations`` at or after
        ``since_ms`` (epoch ms), None when it did not. Reads only the entries since then: the
        log's keys sort by time."""
        # log_entry(target, t, "") sorts just before every entry at t (a commit id is never empty).
        start = keys.log_entry(target, since_ms, "", 0)
        last = None
        for item in self.ctx.store.scan_prefix(keys.log_prefix(target), start_after=start):
            entry = decode(CommitLogEntry, item.value, item.key)
            if entry.operation in operations:
                last = entry.at_ms
        return last
