"""The REST handlers' worker pool (rest/workers.py): calls run off the event loop on the pool's
threads, in the caller's context, several at once; errors come back; a cancelled request waits for
its running call; a closed pool is made again on the next call."""

from __future__ import annotations

import asyncio
import threading
from contextvars import ContextVar

import pytest

from lake_platform.observability import context
from lake_platform.rest.workers import MAX_WORKERS, THREAD_PREFIX, Workers

_seen: ContextVar[str] = ContextVar("seen", default="unset")


def test_a_call_runs_on_a_worker_thread_in_the_callers_context() -> None:
    workers = Workers()

    def probe(x: int) -> tuple[int, str, str, str | None]:
        info = context.current()
        context.identify("alice", "p")  # as Endpoint.handle does, on the worker thread
        return x + 1, threading.current_thread().name, _seen.get(), info.request_id if info else None

    async def main() -> tuple[tuple[int, str, str, str | None], context.RequestInfo, str]:
        _seen.set("from the loop")
        info, token = context.begin("rest", "unmatched")
        try:
            got = await workers.run(probe, 41)
        finally:
            context.end(token)
        return got, info, threading.current_thread().name

    try:
        (value, thread, seen, request_id), info, loop_thread = asyncio.run(main())
    finally:
        workers.close()
    assert value == 42
    assert thread.startswith(THREAD_PREFIX) and thread != loop_thread
    assert seen == "from the loop"
    assert request_id == info.request_id
    # the access log reads the principal from the loop's side after the call
    assert (info.principal, info.project) == ("alice", "p")


def test_calls_run_at_once_up_to_anyios_bound() -> None:
    assert MAX_WORKERS == 40
    workers = Workers()
    first_in = threading.Event()

    def first() -> bool:
        first_in.set()
        return second_done.wait(30)  # only returns True if the second call ran meanwhile

    second_done = threading.Event()

    def second() -> None:
        assert first_in.wait(30)
        second_done.set()

    async def main() -> list[object]:
        return list(await asyncio.gather(workers.run(first), workers.run(second)))

    try:
        assert asyncio.run(main()) == [True, None]
    finally:
        workers.close()


def test_an_error_in_the_call_reaches_the_caller() -> None:
    workers = Workers()

    def fails() -> None:
        raise KeyError("nope")

    try:
        with pytest.raises(KeyError, match="nope"):
            asyncio.run(workers.run(fails))
    finally:
        workers.close()


def test_a_cancelled_request_waits_for_its_running_call() -> None:
    workers = Workers()
    entered, release = threading.Event(), threading.Event()
    finished: list[str] = []

    def slow() -> str:
        entered.set()
        release.wait(30)
        finished.append("done")
        return "late"

    async def main() -> None:
        task = asyncio.ensure_future(workers.run(slow))
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(None, entered.wait, 30)
        task.cancel()
        for _ in range(20):  # let the cancellation run as far as it can
            await asyncio.sleep(0)
        assert not task.done()  # still waiting for the thread
        release.set()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert finished == ["done"]

    try:
        asyncio.run(main())
    finally:
        workers.close()


def test_a_closed_pool_is_made_again_on_the_next_call() -> None:
    workers = Workers()
    try:
        assert asyncio.run(workers.run(lambda: 1)) == 1
        first = workers.pool()
        workers.close()
        workers.close()  # idempotent
        assert asyncio.run(workers.run(lambda: 2)) == 2
        assert workers.pool() is not first
    finally:
        workers.close()
