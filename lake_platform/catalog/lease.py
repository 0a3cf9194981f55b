"""A per-table write lease in the registry (invariant 3); ``gate.WriteGate`` grants them.

A lease has a holder, a fencing token that grows with every acquisition, and a deadline. The
holder keeps a *local monotonic* deadline and checks it, minus a safety margin, before every
write; other machines compare the stored wall-clock deadline to decide when they may take over.
Every registry commit a holder makes carries a condition on the lease record's revision, so once
anybody else acquires, the old holder's late commits are refused even if its clock lies.

The record also names the holder's process (see ``holder``). An acquirer on the same host that
proves that process gone takes over before the deadline, through the same compare-and-swap with
token + 1, so a crashed writer does not block its table for a whole TTL; elsewhere the deadline
stands.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Protocol

from lake_platform.catalog.clock import Clock
from lake_platform.catalog.holder import this_process
from lake_platform.errors import (
    ConcurrentModification,
    LeaseExpired,
)
from lake_platform.registry import keys
from lake_platform.registry.records import LeaseRecord
from lake_platform.registry.store import Check, Put


class Gate(Protocol):
    """What a lease needs from the gate that granted it (``gate.WriteGate``)."""

    margin: float
    clock: Clock

    def left_released(self, incarnation: str, token: int, revision: int) -> None: ...


class LeaseRaced(ConcurrentModification):
    """A commit under an unacquired (free) lease was refused because someone acquired the lease
    meanwhile: nothing landed; the caller retries under an acquired lease."""


class Lease:
    """A held lease. ``check()`` before each write; ``condition()`` goes into each commit."""

    def __init__(self, gate: Gate, incarnation: str, holder: str, token: int, revision: int, deadline: float):
        self.gate = gate
        self.incarnation = incarnation
        self.holder = holder
        self.token = token
        self._revision = revision
        self._deadline = deadline  # local monotonic seconds
        self._lost = False
        self._released = False
        #: Not acquired: the lease was free and the one commit made under it is conditional on
        #: the free record's revision (``WriteGate.hold_for_commit``).
        self.optimistic = False
        self._lock = threading.Lock()
        # Held across a fenced commit and across a renewal, so a heartbeat never changes the
        # lease revision between the moment a commit reads it and the moment it lands.
        self._io = threading.RLock()

    @property
    def key(self) -> str:
        return keys.lease(self.incarnation)

    @property
    def revision(self) -> int:
        with self._lock:
            return self._revision

    def check(self) -> None:
        """Refuse to write once the deadline minus the safety margin has passed."""
        with self._lock:
            if self._lost:
                raise LeaseExpired(
                    f"write lease on incarnation {self.incarnation} was lost (token {self.token})"
                )
            remaining = self._deadline - self.gate.margin - self.gate.clock.monotonic()
        if remaining <= 0 and self.optimistic:
            # Nobody holds an unacquired lease: its deadline only bounds the one commit's wait.
            raise LeaseRaced(
                f"the commit on incarnation {self.incarnation} did not start within the lease TTL; "
                "nothing was committed"
            )
        if remaining <= 0:
            raise LeaseExpired(
                f"write lease on incarnation {self.incarnation} expired (token {self.token}); "
                "the write was not attempted"
            )

    @contextmanager
    def fenced(self) -> Iterator[Check]:
        """Check the deadline and yield the registry condition that fences a commit; the
        lease is not renewed until the block ends."""
        with self._io:
            self.check()
            yield Check(self.key, self.revision)

    def mark_lost(self) -> None:
        with self._lock:
            self._lost = True

    def release_op(self) -> Put:
        """The fencing condition *and* the release in one op, for a commit that is the last
        registry write under this lease: a conditional put of the released record at the held
        revision. Use inside ``fenced()``; call ``released_by_commit()`` once it landed."""
        return Put(self.key, released_record(self.incarnation, self.holder, self.token), self.revision)

    def released_by_commit(self, revision: int | None = None) -> None:
        """The commit that carried ``release_op()`` landed: the lease is free, nothing more may
        be written under it, and the gate has nothing left to release. ``revision``: the released
        record's, when the commit's result says it (the gate's next acquire starts from it)."""
        with self._lock:
            self._lost = True
            self._released = True
        if revision is not None:
            self.gate.left_released(self.incarnation, self.token, revision)

    @property
    def released(self) -> bool:
        with self._lock:
            return self._released

    def _renewed(self, revision: int, deadline: float) -> None:
        with self._lock:
            self._revision = revision
            self._deadline = deadline


def lease_record(
    incarnation: str, holder: str, token: int, deadline_ms: int, *, released: bool = False
) -> LeaseRecord:
    me = this_process()
    return LeaseRecord(
        incarnation=incarnation,
        holder=holder,
        token=token,
        deadline_ms=deadline_ms,
        released=released,
        host=me.host if me else None,
        host_id=me.host_id if me else None,
        pid=me.pid if me else None,
        pid_started=me.started if me else None,
    )


def released_record(incarnation: str, holder: str, token: int) -> bytes:
    """The encoded released record of a lease (what a release or a releasing commit writes)."""
    return lease_record(incarnation, holder, token, 0, released=True).encode()
