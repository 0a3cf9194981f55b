"""Read-ahead of a result stream: the next batches produced on another thread while the
current one is sent.

A result stream is a chain of DataFusion (its own threads), Python glue, then the send and the
client's read. Run in one thread, each batch waits for the previous one to leave; here
producing the next batch overlaps sending this one. The data plane (``dataplane``) uses it
(its figures are there). The grpcio port does not: reading ahead there gained no wall time on a
bulk scan and cost 17 % more server CPU (``transport``).
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Iterator
from typing import Any

from lake_platform.flight.threads import DaemonPool

#: Read-ahead producers run on reused threads: a thread started per stream cost ~1 ms of a
#: 30 ms aggregate's DoGet (its start, and its stack unmapped when it ended).
PRODUCERS = DaemonPool("lake-flight-read-ahead")

_END = object()


class _Failure:
    def __init__(self, exc: BaseException) -> None:
        self.exc = exc


def read_ahead(items: Iterator[Any], depth: int, *, also_close: Any = None, first: int = 0) -> Iterator[Any]:
    """``items``, produced on a thread of their own up to ``depth`` ahead of the consumer.

    An error in the producer is raised to the consumer in order; when the consumer stops early
    (the client went away), the producer stops at its next item and closes ``items`` and
    ``also_close`` on its own thread (a generator must be closed where it runs: that is where a
    query releases its slot).

    ``first``: that many items are produced on the consumer's thread before the producer
    takes over, so a small result (a point query: the schema, one batch, the end) never pays
    for the hand-offs; a larger one overlaps from then on."""
    for _ in range(first):
        try:
            item = next(items)
        except StopIteration:
            _close(items, also_close)
            return
        except BaseException:
            _close(items, also_close)
            raise
        try:
            yield item
        except BaseException:  # the consumer stopped (GeneratorExit): close where it ran
            _close(items, also_close)
            raise
    yield from _threaded(items, depth, also_close)


def _close(*its: Any) -> None:
    for it in its:
        close = getattr(it, "close", None)
        if close is not None:
            close()


def _threaded(items: Iterator[Any], depth: int, also_close: Any) -> Iterator[Any]:
    buffer: queue.Queue[Any] = queue.Queue(maxsize=depth)
    stop = threading.Event()

    def put(item: Any) -> bool:
        while not stop.is_set():
            try:
                buffer.put(item, timeout=0.5)
                return True
            except queue.Full:
                continue
        return False

    def produce() -> None:
        try:
            for item in items:
                if not put(item):
                    return
            put(_END)
        except BaseException as exc:  # noqa: BLE001 - handed to the consumer
            put(_Failure(exc))
        finally:
            _close(items, also_close)

    PRODUCERS.submit(produce)
    try:
        while True:
            item = buffer.get()
            if item is _END:
                return
            if isinstance(item, _Failure):
                raise item.exc
            yield item
    finally:
        stop.set()
        while True:  # unblock a producer waiting for room
            try:
                buffer.get_nowait()
            except queue.Empty:
                break


__all__ = ["PRODUCERS", "read_ahead"]
