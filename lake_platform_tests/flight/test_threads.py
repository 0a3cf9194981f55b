"""The reused daemon threads behind read-ahead: a worker runs job after job, as many run as are
submitted at once, an idle one exits, a failing job leaves its worker running, and no job sees
another's context variables."""

from __future__ import annotations

import contextvars
import threading
from collections.abc import Callable

from lake_platform.flight.threads import DaemonPool

WAIT = 10.0  # seconds: a bound on waiting for a thread, never reached when things work


def _recording(threads: list[threading.Thread], done: threading.Event) -> Callable[[], None]:
    def job() -> None:
        threads.append(threading.current_thread())
        done.set()

    return job


def _run(pool: DaemonPool, threads: list[threading.Thread]) -> None:
    done = threading.Event()
    pool.submit(_recording(threads, done))
    assert done.wait(WAIT)
    assert pool.wait_idle(1, WAIT)


def test_jobs_one_after_another_run_on_one_reused_daemon_thread() -> None:
    pool = DaemonPool("test-pool")
    threads: list[threading.Thread] = []
    for _ in range(3):
        _run(pool, threads)
    assert len(set(threads)) == 1 and threads[0] is not threading.current_thread()
    assert threads[0].daemon and threads[0].name == "test-pool"
    assert pool.idle() == 1


def test_jobs_that_wait_for_each_other_each_get_a_worker() -> None:
    pool = DaemonPool("test-pool")
    second_ran = threading.Event()
    first_done = threading.Event()

    def first() -> None:
        assert second_ran.wait(WAIT)  # a bounded pool would queue the second job behind this one
        first_done.set()

    pool.submit(first)
    pool.submit(second_ran.set)
    assert first_done.wait(WAIT)
    assert pool.wait_idle(2, WAIT)


def test_an_idle_worker_exits_and_the_next_job_starts_a_new_one() -> None:
    pool = DaemonPool("test-pool", idle_seconds=0.01)
    threads: list[threading.Thread] = []
    done = threading.Event()
    pool.submit(_recording(threads, done))
    assert done.wait(WAIT)
    threads[0].join(WAIT)
    assert not threads[0].is_alive() and pool.idle() == 0
    _run(pool, threads)
    assert threads[1] is not threads[0]


def test_a_failing_job_leaves_its_worker_running_the_next_one() -> None:
    pool = DaemonPool("test-pool")
    threads: list[threading.Thread] = []

    def fails() -> None:
        threads.append(threading.current_thread())
        raise RuntimeError("boom")

    pool.submit(fails)
    assert pool.wait_idle(1, WAIT)
    _run(pool, threads)
    assert threads[0] is threads[1]


def test_a_job_never_sees_the_context_variables_an_earlier_job_set() -> None:
    pool = DaemonPool("test-pool")
    var: contextvars.ContextVar[str] = contextvars.ContextVar("var", default="unset")
    seen: list[str] = []
    done = threading.Event()

    def sets() -> None:
        var.set("first job's")

    def reads() -> None:
        seen.append(var.get())
        done.set()

    pool.submit(sets)
    assert pool.wait_idle(1, WAIT)
    pool.submit(reads)
    assert done.wait(WAIT)
    assert seen == ["unset"]
