"""The worker threads a request's blocking step runs on (every operation but the inline registry
reads of ``app.INLINE_OPERATIONS``).

Starlette's ``run_in_threadpool`` (anyio's ``to_thread.run_sync``) takes a capacity-limiter token,
builds a cancel scope and hands the call to a worker through anyio's own queue: ~30 us of CPU per
hop on the event loop, measured against ~18 us for ``loop.run_in_executor`` on a pool made once
(docs/benchmarks.md, "REST per-request cost, third round"). This is that pool, with anyio's
default bound (40 threads, so as many handlers run at once as before) and the caller's context
variables carried into the thread, as anyio does (the request context: id, principal).

As with anyio, a running call is never abandoned: a request cancelled while its handler runs (a
forced shutdown) waits for the handler to return before the cancellation goes on, so a catalog
call is never left running with nobody to answer.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from contextvars import copy_context
from typing import Any, TypeVar

T = TypeVar("T")

#: anyio's default thread limit (``to_thread.current_default_thread_limiter``).
MAX_WORKERS = 40
THREAD_PREFIX = "lake-rest-worker"


class Workers:
    """A thread pool made on first use and shut down by :meth:`close` (a later call makes a new
    one: a service may be served again after its app stopped)."""

    def __init__(self, max_workers: int = MAX_WORKERS) -> None:
        self.max_workers = max_workers
        self._pool: ThreadPoolExecutor | None = None
        self._lock = threading.Lock()

    def pool(self) -> ThreadPoolExecutor:
        pool = self._pool
        if pool is None:
            with self._lock:
                if self._pool is None:
                    self._pool = ThreadPoolExecutor(self.max_workers, thread_name_prefix=THREAD_PREFIX)
                pool = self._pool
        return pool

    async def run(self, fn: Callable[..., T], *args: Any) -> T:
        """``fn(*args)`` on a worker thread, in a copy of the caller's context."""
        future = asyncio.get_running_loop().run_in_executor(self.pool(), copy_context().run, fn, *args)
        try:
            return await asyncio.shield(future)
        except asyncio.CancelledError:
            # Wait for the thread's call to finish, drop its outcome, then go on cancelling.
            await asyncio.wait([future])
            if not future.cancelled():
                future.exception()
            raise

    def close(self) -> None:
        with self._lock:
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=False)
