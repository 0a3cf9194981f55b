"""Streaming a planned query's result: one batch at a time, straight from DataFusion.

Nothing is collected. A batch that may take long is awaited asynchronously in short slices so
the time limit and cancellation can stop the query even while DataFusion produces nothing;
batches that come fast are taken synchronously and merged into fewer, larger messages. A kept
plan whose last run had its first batch within the poll interval runs synchronously
throughout, until a batch takes that long.
"""

from __future__ import annotations

import asyncio
import threading
import time
import traceback
import weakref
from collections.abc import Callable, Iterator
from typing import Any

import pyarrow as pa

from lake_platform.errors import LakeError
from lake_platform.query.batches import conformer, split_batch, transient_pool
from lake_platform.query.errors import execution_error, timed_out, too_large
from lake_platform.query.limits import QueryLimits
from lake_platform.query.planner import PlannedQuery

#: How often a stream waiting for DataFusion checks its deadline and cancellation (seconds).
_POLL = 0.1
#: A batch that came faster than this (seconds) means the next one is awaited synchronously.
_FAST = 0.02
#: A synchronous first batch must leave this many times its expected time before the deadline,
#: so a kept plan that slows down still meets the time limit on the async path.
_DEADLINE_MARGIN = 10
#: Fast batches are merged up to this size (or half of max_message_bytes, if smaller). Measured
#: on a 5M-row scan (bench/flight.py): 1 MiB gave 0.94 of a bare server's throughput where
#: unmerged 8192-row batches gave 0.87 and 4 MiB 0.77 (bigger copies leave the CPU caches).
COALESCE_BYTES = 1 << 20


class FirstBatches:
    """Seconds each plan's last run took to its first batch, for as long as the plan lives.

    A kept plan reads the same immutable snapshots each run, so its first batch takes about as
    long again: when that was within ``_POLL``, :func:`stream` takes it synchronously too. A
    cancellation then waits about as long as the async path's poll would make it wait, and the
    query saves the async hand-off (measured in process on a 2-core VM: 0.5-0.7 ms of wall and
    1.3 ms of CPU a query). Thread-safe."""

    def __init__(self) -> None:
        self._seconds: weakref.WeakKeyDictionary[PlannedQuery, float] = weakref.WeakKeyDictionary()
        self._lock = threading.Lock()

    def get(self, planned: PlannedQuery) -> float | None:
        with self._lock:
            return self._seconds.get(planned)

    def put(self, planned: PlannedQuery, seconds: float) -> None:
        with self._lock:
            self._seconds[planned] = seconds


def stream(
    planned: PlannedQuery,
    limits: QueryLimits,
    cancelled: Callable[[], bool] = lambda: False,
    *,
    coalesce: bool = True,
    first_batches: FirstBatches | None = None,
    blocking: bool = False,
    frame: Any = None,
    clock: Callable[[], float] = time.monotonic,
) -> Iterator[pa.RecordBatch]:
    """Batches of the result, each conforming to ``planned.schema`` and small enough for
    one IPC message.

    A batch that may take long (the first one: a sort or an aggregate produces nothing until
    it has read everything; or any batch after a slow one) is awaited asynchronously in slices
    of ``_POLL`` seconds, so the query timeout and ``cancelled()`` stop the query even then:
    cancelling the pending step drops DataFusion's stream, which stops its work. While batches
    come fast they are taken synchronously (the async hand-off costs ~0.15 ms a batch, a
    third of a fast scan's time). A kept plan whose last run had its first batch within
    ``_POLL`` runs synchronously until a batch takes that long: a cancellation waits no longer
    than the poll would make it (``first_batches``: what the plan's runs took, see
    :class:`FirstBatches`; None: nothing known or kept). Raises QueryTimeout past
    ``query_timeout_seconds`` and ResultTooLarge past ``max_result_bytes``; returns quietly
    when ``cancelled()`` (the caller reports that).

    ``coalesce=False``: batches go out as DataFusion makes them. For a writer whose per-batch
    cost is small (the C++ data plane), merging only adds a copy of every byte: measured on a
    5M-row scan of a cached table, 430 ms of CPU merged against 50 ms unmerged.

    ``blocking=True``: every batch is taken synchronously, on this thread. An asynchronous
    batch is handed over by a thread of DataFusion's runtime that is still inside Python when
    this thread resumes, so a process exiting right after its query races that thread for the
    interpreter (``Fatal Python error: PyGILState_Release``, exit 134): a one-query process
    (``lake sql``) streams this way. The time limit is then checked between batches; within a
    batch, only a signal handler of the caller's can stop it (DataFusion checks for signals
    about once a second while it computes).

    ``frame``: the DataFrame to run (default ``planned.df``). A DataFrame keeps the physical
    plan of its last run, and with it the tasks of that run's repartitions (DataFusion issue
    22016): a kept plan stopped by the time limit would compute on for as long as the plan is
    kept. The engine passes a DataFrame of this run only (:meth:`QueryEngine.stream`).

    ``clock``: the monotonic seconds the time limit and the first batch's time are read from.
    """
    timeout = limits.query_timeout_seconds
    deadline = clock() + timeout if timeout else None
    loop: asyncio.AbstractEventLoop | None = None
    pending: asyncio.Task[Any] | None = None
    source: Any = None
    try:
        try:
            source = (planned.df if frame is None else frame).execute_stream()
        except Exception as exc:  # noqa: BLE001
            raise execution_error(exc, limits, planned.refs) from None
        conform = None
        conform_for: pa.Schema | None = None
        sent = 0
        # Await the next batch asynchronously, unless this plan's last run had its first
        # batch within _POLL (a cancellation waits no longer than the async path's poll then).
        # A known-quick plan stays synchronous while no batch takes _POLL or longer: an
        # aggregate's first batch is slow and the rest follow at once, and each async wait
        # costs the hand-off again.
        expected = first_batches.get(planned) if first_batches is not None else None
        quick = (
            expected is not None
            and expected < _POLL
            and (deadline is None or deadline - clock() >= _DEADLINE_MARGIN * expected)
        )
        patient = not quick and not blocking
        first = True
        # Fast batches are merged up to COALESCE_BYTES: every batch costs the same fixed work
        # here, in the transport and in the client, and Lance scans in 8192-row batches
        # whatever DataFusion's batch size says. A batch is held back only while the next one
        # comes fast, so a slow producer still streams batch by batch.
        held: list[pa.RecordBatch] = []
        held_bytes = 0
        target = min(limits.max_message_bytes // 2, COALESCE_BYTES) if coalesce else 0
        while True:
            started = clock()
            failure: LakeError | None = None
            batch: pa.RecordBatch | None = None
            if patient:
                loop = loop or asyncio.new_event_loop()
                pending = loop.create_task(_next_batch(source))
                while True:
                    wait = _POLL if deadline is None else max(0.0, min(_POLL, deadline - clock()))
                    done, _ = loop.run_until_complete(asyncio.wait({pending}, timeout=wait))
                    if done:
                        break
                    if deadline is not None and clock() >= deadline:
                        raise timed_out(limits)
                    if cancelled():
                        return
                try:
                    batch = pending.result()
                except Exception as exc:  # noqa: BLE001
                    failure = execution_error(exc, limits, planned.refs)
                finally:
                    pending = None
            else:
                try:
                    batch = next(source).to_pyarrow()
                except StopIteration:
                    batch = None
                except Exception as exc:  # noqa: BLE001
                    failure = execution_error(exc, limits, planned.refs)
            if failure is not None:
                # Raised outside the except block: no __context__ chaining DataFusion's error,
                # whose traceback would keep the stream (and its pool reservation) alive.
                raise failure
            took = clock() - started
            slow = took >= _FAST  # a slow producer streams batch by batch, unmerged
            quick = quick and took < _POLL
            patient = slow and not quick and not blocking
            if first:
                if first_batches is not None:
                    first_batches.put(planned, took)
                first = False
            if batch is not None and batch.num_rows:
                if conform is None or not batch.schema.equals(conform_for, check_metadata=True):
                    conform, conform_for = conformer(batch.schema, planned.schema), batch.schema
                batch = conform(batch)
                held.append(batch)
                held_bytes += batch.nbytes
                sent += batch.nbytes
                if limits.max_result_bytes and sent > limits.max_result_bytes:
                    raise too_large(limits)
            if deadline is not None and clock() >= deadline:
                raise timed_out(limits)
            if cancelled():
                return
            if held and (batch is None or slow or held_bytes >= target):
                merged = held[0] if len(held) == 1 else pa.concat_batches(held, memory_pool=transient_pool())
                held, held_bytes = [], 0
                yield from split_batch(merged, limits.max_message_bytes)
            if batch is None:
                return
    finally:
        if loop is not None:
            if pending is not None and not pending.done():
                pending.cancel()
                try:
                    loop.run_until_complete(asyncio.gather(pending, return_exceptions=True))
                    # DataFusion's batch future learns of the cancel from a done-callback that
                    # the loop runs on its next turn; closed before that, the future (and the
                    # stream it holds) would keep computing on DataFusion's runtime.
                    loop.run_until_complete(asyncio.sleep(0))
                except Exception:  # noqa: BLE001, S110 - best effort: the stream is dropped below anyway
                    pass
            loop.close()
        pending = None  # its coroutine's frame holds the stream
        del source, frame


async def _next_batch(source: Any) -> pa.RecordBatch | None:
    try:
        batch = await source.__anext__()
    except StopAsyncIteration:
        return None
    except asyncio.CancelledError as cancel:
        # The cancellation's traceback holds the awaiting frames, whose locals hold the
        # stream, in a cycle with the task: left so, DataFusion keeps computing until the
        # garbage collector happens to run. Cleared, the stream goes when the caller drops it.
        traceback.clear_frames(cancel.__traceback__)
        del source
        raise
    return batch.to_pyarrow()


__all__ = ["COALESCE_BYTES", "FirstBatches", "stream"]
