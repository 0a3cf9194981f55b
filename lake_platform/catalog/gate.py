"""The write gate: one per catalog; acquires, renews (a heartbeat), releases and forgets the
per-table leases of ``lease`` (invariant 3), and queues the writers of one process for a table so
they take turns without polling the registry."""

from __future__ import annotations

import logging
import random
import threading
import time
import weakref
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager

from lake_platform.catalog.clock import Clock, SystemClock
from lake_platform.catalog.holder import provably_gone
from lake_platform.catalog.lease import Lease, lease_record, released_record
from lake_platform.errors import (
    ConcurrentModification,
    ConditionFailed,
    LeaseExpired,
    LeaseUnavailable,
    ServiceUnavailable,
)
from lake_platform.lru import BoundedLRU
from lake_platform.observability.hooks import observe_lease_wait
from lake_platform.registry import keys
from lake_platform.registry.records import LeaseRecord, decode, new_id
from lake_platform.registry.store import ABSENT, MetaStore, get_all

log = logging.getLogger(__name__)

#: Tables whose last released lease record a gate remembers (two ints each).
_LEFT_RELEASED = 4096


class WriteGate:
    def __init__(
        self,
        store: MetaStore,
        *,
        ttl: float,
        margin: float,
        wait: float,
        clock: Clock | None = None,
        heartbeat: bool = True,
    ) -> None:
        self.store = store
        self.ttl = ttl
        self.margin = margin
        self.wait = wait
        self.clock = clock or SystemClock()
        self.heartbeat = heartbeat
        self._beat_lock = threading.Lock()
        self._held: dict[int, tuple[Lease, float]] = {}
        self._beat_thread: threading.Thread | None = None
        self._beat_stop = threading.Event()
        # Writers of one process queue here for a table instead of polling the registry with
        # backoff sleeps (a REST server commits for many clients from one process: the sleeps,
        # not the work, set the pace); the registry lease still arbitrates between processes.
        self._queues: weakref.WeakValueDictionary[str, threading.Lock] = weakref.WeakValueDictionary()
        self._queues_lock = threading.Lock()
        # (token, revision) of the released lease records this gate wrote last, by incarnation:
        # a writer that appends again and again to one table acquires with one compare-and-swap
        # from there instead of a read and a compare-and-swap (see _try_acquire).
        self._left: BoundedLRU[str, tuple[int, int]] = BoundedLRU(_LEFT_RELEASED)
        # (holder, token) of this gate's acquires and releases the registry did not answer
        # (ServiceUnavailable: it may or may not have landed), by incarnation. A record naming one
        # is held by nobody, though its pid (ours) is alive; the next acquire takes it over.
        self._unanswered: BoundedLRU[str, tuple[str, int]] = BoundedLRU(_LEFT_RELEASED)

    def _queue(self, incarnation: str) -> threading.Lock:
        with self._queues_lock:
            queue = self._queues.get(incarnation)
            if queue is None:
                queue = self._queues[incarnation] = threading.Lock()
            return queue

    def acquire(self, incarnation: str, holder: str | None = None, *, wait: float | None = None) -> Lease:
        """Take the lease, waiting up to ``wait`` seconds (default: the gate's) for a live holder."""
        holder = holder or new_id()
        wait = self.wait if wait is None else wait
        started = time.monotonic()
        delay = 0.002
        while True:
            lease = self._try_acquire(incarnation, holder)
            if lease is not None:
                observe_lease_wait("acquired", time.monotonic() - started)
                return lease
            if time.monotonic() - started >= wait:
                observe_lease_wait("gave_up", time.monotonic() - started)
                raise self._unavailable(incarnation)
            # Back off with jitter so waiting writers do not stampede the registry.
            time.sleep(random.uniform(0, delay))
            delay = min(delay * 2, 0.1)

    def _unavailable(self, incarnation: str) -> LeaseUnavailable:
        return LeaseUnavailable(
            f"table incarnation {incarnation} is being written by another writer; "
            f"gave up after {self.wait:.0f}s"
        )

    def left_released(self, incarnation: str, token: int, revision: int) -> None:
        self._left.put(incarnation, (token, revision))

    def unheld(self, incarnation: str) -> None:
        """``incarnation`` is new (made here, not registered yet): nobody ever took its lease, so
        the first acquire writes the record from absent without reading it first."""
        self.left_released(incarnation, 0, ABSENT)

    def read_ahead(self, incarnations: Sequence[str]) -> None:
        """Before taking several leases in a row (a multi-table commit): the records of those
        this gate left no released record for, read in as few registry requests as ``get_many``
        allows; each found released (or absent) is then acquired with one compare-and-swap and
        no read of its own (``_acquire_from``: refused if anyone wrote it since, then read)."""
        unknown = [i for i in dict.fromkeys(incarnations) if self._left.peek(i) is None]
        for incarnation, item in zip(
            unknown, get_all(self.store, [keys.lease(i) for i in unknown]), strict=True
        ):
            if item is None:
                self.unheld(incarnation)
                continue
            current = decode(LeaseRecord, item.value, item.key)
            if current.released:
                self.left_released(incarnation, current.token, item.revision)

    def _try_acquire(self, incarnation: str, holder: str) -> Lease | None:
        key = keys.lease(incarnation)
        left = self._left.get(incarnation)
        if left is not None:
            self._left.remove(incarnation)
            lease = self._acquire_from(incarnation, holder, *left)
            if lease is not None:
                return lease
        begun = self.clock.monotonic()
        now_ms = self.clock.wall_ms()
        item = self.store.get(key)
        current = decode(LeaseRecord, item.value, key) if item is not None else None
        # A live holder is waited for, unless its process is provably gone (then: take over now).
        live = current is not None and not current.released and current.deadline_ms > now_ms
        # Our own unanswered acquire or release: nobody holds it (see ``_unanswered``).
        ours = current is not None and self._unanswered.get(incarnation) == (current.holder, current.token)
        if (
            current is not None
            and live
            and not ours
            and not provably_gone(current.host_id, current.pid, current.pid_started)
        ):
            return None
        if item is None or current is None:
            token, expected = 1, ABSENT
        else:
            token, expected = current.token + 1, item.revision
        lease = self._swap_in(incarnation, holder, token, expected, begun, now_ms)
        if lease is not None and live and current is not None and not ours:
            log.warning(
                "took over the write lease on %s from holder %s (pid %s on %s), whose process is "
                "gone; token %d",
                incarnation,
                current.holder,
                current.pid,
                current.host,
                token,
            )
        return lease

    def _acquire_from(self, incarnation: str, holder: str, token: int, revision: int) -> Lease | None:
        """Acquire from the released record this gate left at ``revision`` (or from no record,
        ``unheld``: ABSENT), without reading it.

        The compare-and-swap is the whole check: a lease record's revision grows with every
        write (acquire, renew, release), so if it is still ``revision`` nobody has taken the
        lease since this gate released it, and ``token`` is still the newest. The record goes
        away (``forget``) only once its incarnation's data is gone, and nothing acquires a gone
        incarnation's lease, so the revision cannot come round again. If anyone wrote it
        meanwhile the swap fails and the caller reads the record as usual; None then."""
        return self._swap_in(
            incarnation, holder, token + 1, revision, self.clock.monotonic(), self.clock.wall_ms()
        )

    def _swap_in(
        self, incarnation: str, holder: str, token: int, expected: int, begun: float, now_ms: int
    ) -> Lease | None:
        """Write the held record with ``token`` if the lease record is at ``expected``; None if
        it is not. ``begun``/``now_ms``: the clocks read before the acquire's first request."""
        record = lease_record(incarnation, holder, token, now_ms + int(self.ttl * 1000))
        try:
            written = self.store.compare_and_swap(keys.lease(incarnation), expected, record.encode())
        except ConcurrentModification:
            return None
        except ServiceUnavailable:
            self._unanswered.put(incarnation, (holder, token))
            raise
        self._unanswered.remove(incarnation)
        # The local deadline counts from before the request: time spent in I/O is already spent.
        return Lease(self, incarnation, holder, token, written.revision, begun + self.ttl)

    def renew(self, lease: Lease) -> None:
        with lease._io:
            self._renew(lease)

    def _renew(self, lease: Lease) -> None:
        lease.check()
        begun = self.clock.monotonic()
        deadline_ms = self.clock.wall_ms() + int(self.ttl * 1000)
        record = lease_record(lease.incarnation, lease.holder, lease.token, deadline_ms)
        try:
            written = self.store.compare_and_swap(lease.key, lease.revision, record.encode())
        except ConcurrentModification:
            lease.mark_lost()
            raise LeaseExpired(f"write lease on incarnation {lease.incarnation} was taken over") from None
        lease._renewed(written.revision, begun + self.ttl)

    def release(self, lease: Lease) -> None:
        if lease.released:
            return  # released by its last commit, in the same transaction
        with lease._io:
            try:
                written = self.store.compare_and_swap(
                    lease.key, lease.revision, released_record(lease.incarnation, lease.holder, lease.token)
                )
            except ConcurrentModification:
                pass  # taken over already
            except ServiceUnavailable:
                # The registry is away: others wait for the deadline, this gate need not.
                self._unanswered.put(lease.incarnation, (lease.holder, lease.token))
            else:
                self.left_released(lease.incarnation, lease.token, written.revision)
            lease.mark_lost()

    @contextmanager
    def hold(self, incarnation: str, holder: str | None = None) -> Iterator[Lease]:
        """Acquire, keep renewed in the background while the body runs, release. Holders in
        this process (this gate) take turns on a local lock first, so only one of them at a
        time talks to the registry about this table."""
        with self._local_turn(incarnation) as left:
            lease = self.acquire(incarnation, holder, wait=left())
            if self.heartbeat:
                self._beat_register(lease)
            try:
                yield lease
            finally:
                if self.heartbeat:
                    self._beat_unregister(lease)
                self.release(lease)

    @contextmanager
    def _local_turn(self, incarnation: str) -> Iterator[Callable[[], float]]:
        """This process's turn on ``incarnation`` (its holders queue on a local lock, so one at
        a time talks to the registry); yields what is left of the wait budget, in seconds."""
        queue = self._queue(incarnation)
        started = time.monotonic()
        if not queue.acquire(timeout=self.wait):
            observe_lease_wait("gave_up", time.monotonic() - started)
            raise self._unavailable(incarnation)
        try:
            yield lambda: max(0.0, self.wait - (time.monotonic() - started))
        finally:
            queue.release()

    @contextmanager
    def hold_for_commit(self, incarnation: str) -> Iterator[Lease]:
        """For an operation that is exactly one registry commit carrying ``release_op()`` (a
        REST client's CreateTableVersion: the client wrote its data already): when the lease is
        free (released), do not acquire it at all. The commit is conditional on the free
        record's revision, which every acquisition changes, so it lands only if nobody took the
        lease meanwhile (then it fails as a conflict and nothing lands), and it leaves the
        record released. One registry read instead of an acquire and a release. A live, expired
        or missing lease takes the ordinary path (acquire, which also fences an expired
        holder with a new token)."""
        with self._local_turn(incarnation) as left:
            item = self.store.get(keys.lease(incarnation))
            current = decode(LeaseRecord, item.value, item.key) if item is not None else None
            if item is not None and current is not None and current.released:
                lease = self._unacquired(incarnation, current.token, item.revision)
                try:
                    yield lease
                finally:
                    lease.mark_lost()  # one commit only
                return
            lease = self.acquire(incarnation, wait=left())
            try:
                yield lease
            finally:
                self.release(lease)

    @contextmanager
    def hold_unacquired(self, incarnation: str, token: int, revision: int) -> Iterator[Lease | None]:
        """For one small append whose rows are in memory (it can be written again): the lease
        on ``incarnation``, read released at ``revision`` with ``token``, as an unacquired
        lease, with no registry request; None if this gate knows the record moved on since (it
        released it at another revision: take the ordinary path, after this block). This
        process's turn on the table is held until the block ends.

        As with :meth:`hold_for_commit`, the one commit made under it is conditional on that
        revision, which every acquisition changes, so it lands only if nobody took the lease
        since; otherwise nothing lands and the namespace says LeaseRaced. Nothing on storage is
        changed under it but the write's own new files (commit_conflicts.py, ``refuse_unacquired``)."""
        with self._local_turn(incarnation):
            left = self._left.get(incarnation)
            if left is not None and left != (token, revision):
                yield None
                return
            self._left.remove(incarnation)  # its commit remembers the next one
            lease = self._unacquired(incarnation, token, revision)
            try:
                yield lease
            finally:
                lease.mark_lost()  # one commit only

    def _unacquired(self, incarnation: str, token: int, revision: int) -> Lease:
        """A lease not acquired: the released record at ``revision`` with ``token``."""
        lease = Lease(self, incarnation, new_id(), token, revision, self.clock.monotonic() + self.ttl)
        lease.optimistic = True
        return lease

    # One heartbeat thread per gate renews every lease it holds: starting a thread per write
    # cost more than the write's registry work under load.

    def _beat_register(self, lease: Lease) -> None:
        with self._beat_lock:
            self._held[id(lease)] = (lease, self.clock.monotonic())
            if self._beat_thread is None or not self._beat_thread.is_alive():
                self._beat_thread = threading.Thread(target=self._beat, daemon=True, name="lease-heartbeat")
                self._beat_thread.start()

    def _beat_unregister(self, lease: Lease) -> None:
        with self._beat_lock:
            self._held.pop(id(lease), None)

    def forget(self, incarnation: str) -> bool:
        """Remove the released lease record of an incarnation whose data is gone (a registry
        leftover). Conditional: a lease someone took meanwhile stays. True if removed."""
        item = self.store.get(keys.lease(incarnation))
        if item is None or not decode(LeaseRecord, item.value, item.key).released:
            return False
        try:
            self.store.compare_and_delete(item.key, item.revision)
        except ConditionFailed:
            return False  # taken or deleted meanwhile: then it is not ours to remove
        return True

    def close(self) -> None:
        """Stop the heartbeat thread (leases still held simply run out)."""
        self._beat_stop.set()

    def _beat(self) -> None:
        interval = max(self.ttl / 6, 0.05)
        while not self._beat_stop.wait(interval):
            with self._beat_lock:
                due = [
                    (key, lease)
                    for key, (lease, renewed) in self._held.items()
                    if self.clock.monotonic() - renewed >= self.ttl / 3
                ]
            for key, lease in due:
                try:
                    self.renew(lease)
                except LeaseExpired:
                    with self._beat_lock:
                        self._held.pop(key, None)
                    continue
                except Exception:  # noqa: BLE001 - a failed renewal just lets the deadline run out
                    log.warning("lease renewal failed for %s", lease.incarnation, exc_info=True)
                    continue
                with self._beat_lock:
                    if key in self._held:
                        self._held[key] = (lease, self.clock.monotonic())
