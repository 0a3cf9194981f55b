"""Reclaiming spooled query results: a job is deleted once its expiry (written before any of its
segments, in ``job.json``) has passed by a grace period, so a reader that started just before
the expiry can finish; a job folder without ``job.json`` (a job that crashed before writing
it) is deleted once its newest file is older than the result lifetime. Nothing else is
touched: a live job always has an expiry in the future.

``reclaim_expired`` is the one way results are reclaimed: by each Flight SQL and REST server on
its own (``ResultsSweeper``, every ``LAKE_RESULTS_SWEEP_SECONDS``), by ``lake results expire``
and by the ``reclaimed_results`` Dagster asset. Several at once are harmless: a job already
deleted by another is skipped."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

from lake_platform.engine.results import ResultsArea

log = logging.getLogger(__name__)

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


class ResultsSweeper:
    """Reclaims an area's expired results every ``interval`` seconds on one daemon thread (a
    listing of the area: cheap). ``tick`` is one sweep; a failed sweep is logged and the next
    one tries again."""

    def __init__(
        self,
        area: ResultsArea,
        interval: float,
        lifetime: float,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.area = area
        self.interval = interval
        self.lifetime = lifetime
        self._clock = clock
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def tick(self) -> ResultsReclaim | None:
        """One sweep now; None when it failed (logged)."""
        try:
            outcome = reclaim_expired(self.area, self._clock(), lifetime=self.lifetime)
        except Exception:  # noqa: BLE001 - an unreachable area must not end the server's sweeps
            log.warning("sweeping expired results under %s failed", self.area.root, exc_info=True)
            return None
        if outcome.deleted:
            log.info("deleted %d expired spooled results under %s", len(outcome.deleted), self.area.root)
        return outcome

    def start(self) -> ResultsSweeper:
        """Sweep every ``interval`` seconds until ``stop`` (an interval of 0: never)."""
        if self.interval > 0 and self._thread is None:
            self._thread = threading.Thread(target=self._run, name="lake-results-sweep", daemon=True)
            self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            self.tick()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)


__all__ = ["GRACE_SECONDS", "ResultsReclaim", "ResultsSweeper", "reclaim_expired"]
