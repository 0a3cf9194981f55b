"""Reclaiming spooled query results: a job is deleted once its expiry (written before any of its
segments, in ``job.json``) has passed by a grace period, so a reader that started just before
the expiry can finish; a job folder without ``job.json`` (a job that crashed before writing
it) is deleted once its newest file is older than the result lifetime. Nothing else is
touched: a live job always has an expiry in the future."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from lake_platform.engine.results import ResultsArea

#: Seconds past a job's expiry before it is deleted (a DoGet admitted just before may still read).
GRACE_SECONDS = 300.0


@dataclass
class ResultsReclaim:
    root: str
    deleted: list[dict[str, Any]] = field(default_factory=list)
    kept: int = 0

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def reclaim_expired(
    area: ResultsArea, now: float, *, lifetime: float, grace: float = GRACE_SECONDS
) -> ResultsReclaim:
    """Delete the expired jobs of ``area`` (``now``: epoch seconds; ``lifetime``: the results'
    TTL, the age past which a job without an expiry is abandoned)."""
    outcome = ResultsReclaim(area.root)
    for entry in area.jobs():
        if entry.expires_at is not None:
            expired = entry.expires_at + grace < now
        else:
            expired = entry.mtime is not None and entry.mtime + lifetime + grace < now
        if not expired:
            outcome.kept += 1
            continue
        area.remove_job(entry.project, entry.job)
        outcome.deleted.append(
            {"project": entry.project, "job": entry.job, "expired_at": entry.expires_at, "mtime": entry.mtime}
        )
    return outcome


__all__ = ["GRACE_SECONDS", "ResultsReclaim", "reclaim_expired"]
