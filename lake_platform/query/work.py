"""What a query engine did, counted for ``/metrics``: plannings and runs.

A planning is one DataFusion context lent to plan a query (``sessions``): a plan lookup that
found no kept plan, or a ticket whose plan this replica did not keep. A run is one plan
executed (``QueryEngine.stream``); a result streamed from the result cache runs nothing. Against
the plan cache's hits and the queries answered, they show what the two caches save.
"""

from __future__ import annotations

import threading


class WorkCounts:
    """Thread-safe counts of an engine's plannings and runs; ``stats()`` is what the metrics
    collector reads at scrape time."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.plannings = 0
        self.runs = 0

    def planned(self) -> None:
        with self._lock:
            self.plannings += 1

    def ran(self) -> None:
        with self._lock:
            self.runs += 1

    def stats(self) -> dict[str, int]:
        with self._lock:
            return {"plannings": self.plannings, "runs": self.runs}


__all__ = ["WorkCounts"]
