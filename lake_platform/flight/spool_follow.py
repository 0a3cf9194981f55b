"""Following a spool job: the names of its segments in order, each as soon as it is written.

A client that reads only the first endpoint gets one ticket for a whole spooled result
(``spool.WHOLE``); its DoGet starts on the first segment while the job writes the next ones. On
the replica running the job the job itself says when a segment is closed (``Job.closed``); any
other replica sees only the results area, where the segment list appears with ``done.json`` at
the end.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING, Protocol

from lake_platform.query.errors import QueryCancelled, QueryTimeout

if TYPE_CHECKING:
    from lake_platform.engine.results import ResultsArea


class RunningJob(Protocol):
    """What this module reads of a running spool job (``spool.Job``, which imports this)."""

    changed: threading.Condition
    closed: list[str]
    done: threading.Event
    state: str
    error: BaseException | None


#: How often a replica without the job looks for its end in the results area.
REMOTE_POLL_SECONDS = 0.2


def written_segments(
    area: ResultsArea, project: str, job_id: str, job: RunningJob | None, timeout: float | None
) -> Iterator[str]:
    """The job's segment names in order, each once written; ``job``: this replica's running
    job (None: another replica's, read from ``area`` once done, waiting at most ``timeout``
    seconds, the query time limit the job runs under). Raises the job's error if it fails,
    after the segments written before it."""
    if job is None:
        deadline = None if timeout is None else time.monotonic() + timeout
        while (done := area.done(project, job_id)) is None:
            if deadline is not None and time.monotonic() >= deadline:
                raise QueryTimeout(
                    "the spooled result was not finished within LAKE_FLIGHT_QUERY_TIMEOUT_SECONDS "
                    "(the replica spooling it may have stopped); run the query again"
                )
            threading.Event().wait(REMOTE_POLL_SECONDS)
        yield from (seg["name"] for seg in done["segments"])
        return
    index = 0
    while True:
        with job.changed:
            job.changed.wait_for(lambda seen=index: seen < len(job.closed) or job.done.is_set())
            ready = job.closed[index:]
            finished = job.done.is_set() and index + len(ready) >= len(job.closed)
        for name in ready:
            index += 1
            yield name
        if finished:
            if job.state != "done":
                raise job.error or QueryCancelled("spooling the result failed")
            return


__all__ = ["REMOTE_POLL_SECONDS", "RunningJob", "written_segments"]
