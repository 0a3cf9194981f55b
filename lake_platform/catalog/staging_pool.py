"""The threads a multi-table commit stages its tables on (``transaction``): one pool per process,
started on first use and kept, shared by every transaction of the process. Starting a pool's
threads for each transaction cost more than the registry commit that ends it. Lance writes
outside the GIL, so tables stage side by side; the calling thread stages one of them itself
rather than wait idle. A stage never waits for another stage, so transactions sharing the pool
cannot deadlock; a busy pool only queues them."""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor, wait
from typing import TypeVar

T = TypeVar("T")

#: Threads in the pool: each stage waits on storage and on Lance's own threads part of the time.
STAGING_THREADS = 8


class _Pool:
    """The process's pool; a forked child starts its own (the parent's threads are not in it)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._executor: ThreadPoolExecutor | None = None
        self._pid = 0

    def submit(self, work: Callable[[T], None], item: T) -> Future[None]:
        with self._lock:
            if self._executor is None or self._pid != os.getpid():
                self._executor = ThreadPoolExecutor(STAGING_THREADS, "lake-staging")
                self._pid = os.getpid()
            return self._executor.submit(work, item)


_POOL = _Pool()


def stage_all(work: Callable[[T], None], items: Sequence[T]) -> None:
    """``work(item)`` for every item: the first on the calling thread, the others on the pool.
    Returns once every one has stopped; raises the first failure, in item order."""
    futures = [_POOL.submit(work, item) for item in items[1:]]
    failure: BaseException | None = None
    try:
        work(items[0])
    except BaseException as exc:  # noqa: BLE001 - raised below, once the others have stopped
        failure = exc
    wait(futures)
    if failure is not None:
        raise failure
    for future in futures:
        future.result()


__all__ = ["STAGING_THREADS", "stage_all"]
