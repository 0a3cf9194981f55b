"""Run a callback when a fixed delay has passed, for many concurrent items, on one thread.

The query time limit arms one of these per result stream. A ``threading.Timer`` per stream
costs a thread start and stop (~0.14 ms measured), a tenth of a point query's DoGet; here arming
and disarming are a dict insert and delete. One delay for every item means deadlines fall due in
the order they were armed, so the items wait in insertion order and the thread sleeps until the
oldest is due.

Arming does not wake the thread: with nothing armed it sleeps for one delay at a time, and an
item armed now falls due no earlier than that sleep (or the sleep for an older item) ends, so
the thread always wakes in time to run it. Waking it on every arm, as each query's first arm
on an idle replica did, cost a thread switch and a hand-off of the interpreter lock per
stream, twice per point query (the time limit and the early start). A delay below
``SLEEP_IN_STEPS_FROM`` (a time limit of milliseconds, in tests) would make those sleeps a
spin, so such a watchdog sleeps until an arm wakes it, as before.
"""

from __future__ import annotations

import itertools
import logging
import threading
import time
from collections.abc import Callable

log = logging.getLogger(__name__)

#: The shortest delay for which an idle watchdog sleeps one delay at a time (seconds).
SLEEP_IN_STEPS_FROM = 0.05


class Watchdog:
    """``arm(callback)`` runs ``callback`` ``delay`` seconds later unless ``disarm``-ed first."""

    def __init__(self, delay: float, name: str = "lake-watchdog") -> None:
        self.delay = delay
        self._step = delay if delay >= SLEEP_IN_STEPS_FROM else None  # an idle sleep (None: until woken)
        self._name = name
        self._due: dict[int, tuple[float, Callable[[], None]]] = {}  # insertion order = deadline order
        self._keys = itertools.count()
        self._wake = threading.Condition()
        self._thread: threading.Thread | None = None
        self._closed = False
        #: Times an arm woke the thread (only a watchdog too quick to sleep in steps is woken).
        self.wakes = 0

    def arm(self, callback: Callable[[], None]) -> int:
        """Schedule ``callback``; the key disarms it."""
        with self._wake:
            key = next(self._keys)
            self._due[key] = (time.monotonic() + self.delay, callback)
            if self._thread is None and not self._closed:
                self._thread = threading.Thread(target=self._run, name=self._name, daemon=True)
                self._thread.start()
            elif self._step is None and len(self._due) == 1:
                self._wake.notify()
                self.wakes += 1
            return key

    def disarm(self, key: int) -> None:
        """Cancel a callback that has not run yet (a no-op once it has)."""
        with self._wake:
            self._due.pop(key, None)

    def close(self) -> None:
        """Stop the thread; callbacks not yet due never run."""
        with self._wake:
            self._closed = True
            self._due.clear()
            self._wake.notify()

    def pending(self) -> int:
        with self._wake:
            return len(self._due)

    def _run(self) -> None:
        with self._wake:
            while not self._closed:
                if not self._due:
                    # Ends no later than anything armed meanwhile falls due (see the docstring).
                    self._wake.wait(self._step)
                    continue
                key = next(iter(self._due))
                due, callback = self._due[key]
                wait = due - time.monotonic()
                if wait > 0:
                    self._wake.wait(wait)
                    continue
                del self._due[key]
                self._wake.release()
                try:
                    callback()
                except Exception:  # noqa: BLE001 - one failing callback must not stop the others
                    log.exception("a watchdog callback failed")
                finally:
                    self._wake.acquire()
