"""Daemon threads reused across short jobs, as many as run at once.

A thread per job costs its start and, when it exits, the unmapping of its stack, which on a
small VM makes every other core stop for a TLB shootdown: measured on a 2-core VM, ~1 ms of a
30 ms aggregate's DoGet went to starting the stream's read-ahead thread. Unlike a
``ThreadPoolExecutor`` there is no bound (a job that has to wait for a free worker could wait
on the very consumer that waits for it) and the threads are daemons (an executor's workers are
joined at interpreter exit, which a job blocked on a gone consumer would hold up).
"""

from __future__ import annotations

import contextvars
import logging
import queue
import threading
from collections.abc import Callable

log = logging.getLogger(__name__)


class DaemonPool:
    """``submit(job)`` runs ``job`` on an idle worker, or on a new one if none is idle; a
    worker idle for ``idle_seconds`` exits. Each job runs in an empty ``contextvars`` context,
    as on a thread of its own."""

    def __init__(self, name: str, idle_seconds: float = 60.0) -> None:
        self.name = name
        self.idle_seconds = idle_seconds
        self._jobs: queue.SimpleQueue[Callable[[], None]] = queue.SimpleQueue()
        self._lock = threading.Condition()  # notified when a worker becomes idle
        self._idle = 0  # workers waiting for a job and not yet claimed by a submit

    def submit(self, job: Callable[[], None]) -> None:
        with self._lock:
            if self._idle:
                self._idle -= 1
                self._jobs.put(job)
                return
        threading.Thread(target=self._work, args=(job,), name=self.name, daemon=True).start()

    def idle(self) -> int:
        with self._lock:
            return self._idle

    def wait_idle(self, count: int, timeout: float) -> bool:
        """Whether ``count`` workers are idle within ``timeout`` seconds."""
        with self._lock:
            return self._lock.wait_for(lambda: self._idle >= count, timeout)

    def _work(self, job: Callable[[], None] | None) -> None:
        while job is not None:
            try:
                contextvars.Context().run(job)
            except BaseException:  # noqa: BLE001 - a job's failure is its own; the worker goes on
                log.exception("a job on %s failed", self.name)
            job = None
            with self._lock:
                self._idle += 1
                self._lock.notify_all()
            try:
                job = self._jobs.get(timeout=self.idle_seconds)
            except queue.Empty:
                with self._lock:  # a submit may have claimed this worker as it timed out
                    try:
                        job = self._jobs.get_nowait()
                    except queue.Empty:
                        self._idle -= 1


__all__ = ["DaemonPool"]
