"""The write lease after a crash (issue 11, defect 11).

A holder that died on this host is taken over at once, through the same compare-and-swap and
token + 1 as an expired one; a holder elsewhere (or one we cannot prove dead) keeps the lease
until its deadline.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest

from lake_platform.catalog.catalog import Catalog
from lake_platform.catalog.gate import WriteGate
from lake_platform.catalog.holder import provably_gone, this_process
from lake_platform.catalog.lease import Lease
from lake_platform.errors import ConditionFailed, LeaseUnavailable
from lake_platform.registry import keys
from lake_platform.registry.records import LeaseRecord, decode
from lake_platform.registry.sqlite import SqliteMetaStore
from lake_platform.registry.store import ABSENT, Item, MetaStore, Op
from lake_platform.settings import load_settings
from lake_platform_tests.catalog.conftest import ids_of, rows
from lake_platform_tests.catalog.registry_calls import RegistryCalls
from lake_platform_tests.doubles import ManualClock

T = "p.w.ns.t"
INC = "inc0001"
TTL = 30.0


@pytest.fixture
def store(tmp_path: Path) -> Iterator[SqliteMetaStore]:
    s = SqliteMetaStore(tmp_path / "registry.db")
    yield s
    s.close()


def gate(store: MetaStore, clock: ManualClock, wait: float = 0.0) -> WriteGate:
    return WriteGate(store, ttl=TTL, margin=5.0, wait=wait, clock=clock, heartbeat=False)


def dead_pid() -> int:
    """A pid that belonged to a process of this host which has exited and been reaped."""
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def put_lease(store: SqliteMetaStore, clock: ManualClock, **identity: object) -> LeaseRecord:
    record = LeaseRecord(
        incarnation=INC, holder="someone", token=7, deadline_ms=clock.wall_ms() + int(TTL * 1000), **identity
    )  # type: ignore[arg-type]
    store.compare_and_swap(keys.lease(INC), ABSENT, record.encode())
    return record


def stored(store: SqliteMetaStore) -> LeaseRecord:
    item = store.get(keys.lease(INC))
    assert item is not None
    return decode(LeaseRecord, item.value, item.key)


class Touched(RegistryCalls):
    """Lists the registry calls, and sets ``touched`` on each (to see a waiting writer poll)."""

    def __init__(self, inner: MetaStore) -> None:
        super().__init__(inner)
        self.touched = threading.Event()

    def get(self, key: str) -> Item | None:
        self.touched.set()
        return super().get(key)

    def transact(self, ops: Sequence[Op]) -> list[Item | None]:
        self.touched.set()
        return super().transact(ops)

    def compare_and_swap(self, key: str, expected: int, value: bytes) -> Item:
        self.touched.set()
        return super().compare_and_swap(key, expected, value)


def test_the_record_names_its_holder_process(store: SqliteMetaStore) -> None:
    me = this_process()
    assert me is not None and me.pid == os.getpid()
    clock = ManualClock()
    g = gate(store, clock)
    lease = g.acquire(INC)
    record = stored(store)
    assert (record.host_id, record.pid, record.pid_started) == (me.host_id, me.pid, me.started)
    assert record.record_version == 2 and record.host
    clock.advance(1)
    g.renew(lease)
    assert stored(store).pid_started == me.started  # renewals keep it
    # This process is alive: another writer here waits for the deadline as before.
    with pytest.raises(LeaseUnavailable):
        gate(store, clock).acquire(INC)


def test_a_dead_holder_on_this_host_is_taken_over_at_once(store: SqliteMetaStore) -> None:
    me = this_process()
    assert me is not None
    clock = ManualClock()
    put_lease(store, clock, host="here", host_id=me.host_id, pid=dead_pid(), pid_started=1)
    taken = gate(store, clock).acquire(INC)
    assert taken.token == 8 and stored(store).pid == os.getpid()


def test_a_reused_pid_is_not_mistaken_for_the_holder(store: SqliteMetaStore) -> None:
    """The pid lives, but it is another process than the one that took the lease."""
    me = this_process()
    assert me is not None
    clock = ManualClock()
    assert not provably_gone(me.host_id, me.pid, me.started)
    assert provably_gone(me.host_id, me.pid, me.started - 1)
    put_lease(store, clock, host="here", host_id=me.host_id, pid=me.pid, pid_started=me.started - 1)
    assert gate(store, clock).acquire(INC).token == 8


def test_a_holder_on_another_host_keeps_the_lease_until_its_deadline(store: SqliteMetaStore) -> None:
    me = this_process()
    assert me is not None
    clock = ManualClock()
    # Its pid means nothing here, even if no such process exists on this host.
    put_lease(
        store, clock, host="elsewhere", host_id="another-boot/pid:[4026531836]", pid=dead_pid(), pid_started=1
    )
    with pytest.raises(LeaseUnavailable):
        gate(store, clock).acquire(INC)
    assert stored(store).token == 7
    clock.advance(TTL - 0.5)
    with pytest.raises(LeaseUnavailable):
        gate(store, clock).acquire(INC)
    clock.advance(1)  # past the deadline
    assert gate(store, clock).acquire(INC).token == 8


def test_a_lease_record_from_an_older_release_waits_for_its_deadline(store: SqliteMetaStore) -> None:
    clock = ManualClock()
    old = (
        b'{"record_version": 1, "incarnation": "%s", "holder": "old", "token": 3, "deadline_ms": %d, '
        b'"released": false}' % (INC.encode(), clock.wall_ms() + int(TTL * 1000))
    )
    store.compare_and_swap(keys.lease(INC), ABSENT, old)
    assert stored(store).pid is None
    with pytest.raises(LeaseUnavailable):
        gate(store, clock).acquire(INC)
    clock.advance(TTL + 1)
    assert gate(store, clock).acquire(INC).token == 4


_CHILD = textwrap.dedent("""
    import sys
    from pathlib import Path

    import pyarrow as pa

    from lake_platform.catalog.catalog import Catalog
    from lake_platform.settings import load_settings

    def hold(point: str) -> None:
        if point == "append:before-write":  # the lease is held; the write has not begun
            print("held", flush=True)
            sys.stdin.readline()  # until killed

    catalog = Catalog(load_settings(home=Path(sys.argv[1])), hook=hold)
    rows = pa.table({"id": pa.array([666], pa.int64()), "tag": ["ghost"]})
    catalog.tables.append(sys.argv[2], rows.to_reader())
    print("wrote", flush=True)
""")


@pytest.mark.slow
def test_a_writer_killed_mid_write_frees_its_table_at_once(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    home = tmp_path / "home"
    settings = load_settings(home=home).model_copy(update={"lease_wait_seconds": 10.0})
    assert settings.lease_ttl_seconds == TTL
    catalog = Catalog(settings)
    try:
        catalog.containers.create_project("p")
        catalog.containers.create_warehouse("p.w")
        catalog.containers.create_namespace("p.w.ns")
        catalog.tables.create_table(T, rows([1]))
        incarnation = catalog.reads.open_table(T).record.incarnation
        child = subprocess.Popen(
            [sys.executable, "-c", _CHILD, str(home), T],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        try:
            assert child.stdout is not None
            assert child.stdout.readline().strip() == "held"
            item = catalog.store.get(keys.lease(incarnation))
            assert item is not None
            held = decode(LeaseRecord, item.value, item.key)
            assert held.pid == child.pid and not held.released
            os.kill(child.pid, signal.SIGKILL)
            started = time.monotonic()
            lease = catalog.gate.acquire(incarnation)
            took = time.monotonic() - started
        finally:
            child.kill()
            child.wait(30)
        assert child.returncode == -signal.SIGKILL
        with capsys.disabled():
            print(f"\n[lease takeover after SIGKILL: {took * 1000:.0f} ms; TTL {TTL:.0f} s]")
        assert took < 2.0, f"takeover took {took:.1f}s"
        assert lease.token == held.token + 1
        # The dead holder's commits, had any been in flight, are refused by the fence.
        ghost = Lease(
            catalog.gate, incarnation, held.holder, held.token, item.revision, time.monotonic() + TTL
        )
        with pytest.raises(ConditionFailed), ghost.fenced() as fence:
            catalog.store.transact([fence])
        catalog.gate.release(lease)
        catalog.tables.append(T, rows([2]))
        assert ids_of(catalog.reads.open_table(T)) == [1, 2]
    finally:
        catalog.close()


def test_holders_in_one_process_queue_locally_instead_of_polling_the_registry(
    store: SqliteMetaStore,
) -> None:
    """A REST server commits for many clients from one process: a second holder of the same
    table waits on the gate's local queue (woken when the first releases), not in a loop of
    registry reads and backoff sleeps. Between processes the registry lease still decides."""
    calls = Touched(store)
    g = gate(calls, ManualClock(), wait=30.0)
    first_in = threading.Event()
    release_first = threading.Event()
    tokens: dict[str, int] = {}

    def first() -> None:
        with g.hold(INC, "first") as lease:
            tokens["first"] = lease.token
            first_in.set()
            release_first.wait(30)

    def second() -> None:
        with g.hold(INC, "second") as lease:
            tokens["second"] = lease.token

    a = threading.Thread(target=first)
    a.start()
    assert first_in.wait(30)
    calls.calls.clear()
    calls.touched.clear()
    b = threading.Thread(target=second)
    b.start()
    # While the first holds, the second must not touch the registry at all (bounded wait: the
    # old code's first poll comes at once; the first makes no request while it holds).
    assert not calls.touched.wait(0.5)
    release_first.set()
    a.join(30)
    b.join(30)
    # The first's release, then the second's one acquire (from the record the first left) and
    # its release: no failed polls, no reads.
    lease_key = keys.lease(INC)
    assert calls.calls == [("compare_and_swap", [lease_key])] * 3
    assert tokens == {"first": 1, "second": 2}
    assert stored(store).released


def test_a_queued_holder_gives_up_after_the_gates_wait(store: SqliteMetaStore) -> None:
    g = gate(store, ManualClock(), wait=0.2)
    inside = threading.Event()
    done = threading.Event()

    def holder() -> None:
        with g.hold(INC, "first"):
            inside.set()
            done.wait(30)

    t = threading.Thread(target=holder)
    t.start()
    assert inside.wait(30)
    try:
        with pytest.raises(LeaseUnavailable):
            with g.hold(INC, "second"):
                pass
    finally:
        done.set()
        t.join(30)
    with g.hold(INC, "third") as lease:  # the queue is free again
        assert lease.token == 2


def test_a_gate_takes_back_its_released_lease_without_reading_it(store: SqliteMetaStore) -> None:
    """A process appending again and again to one table: the next acquire swaps from the
    released record the gate left, token + 1, with no read of the lease record."""
    calls = RegistryCalls(store)
    g = gate(calls, ManualClock())
    with g.hold(INC, "first") as lease:
        assert lease.token == 1
    calls.calls.clear()
    with g.hold(INC, "second") as lease:
        assert lease.token == 2
        assert keys.lease(INC) not in calls.keys_read()
        held = stored(store)
        assert (held.holder, held.token, held.released) == ("second", 2, False)
    assert stored(store).released


def test_a_lease_taken_by_another_process_meanwhile_is_read_and_waited_for(store: SqliteMetaStore) -> None:
    """The gate's memory of the released record is only a guess: another process (another
    gate on the same registry) that took the lease since makes the swap fail, and the live
    holder is read and respected, not overwritten."""
    clock = ManualClock()
    ours, theirs = gate(store, clock), gate(store, clock)
    with ours.hold(INC, "ours"):
        pass
    with theirs.hold(INC, "theirs") as held:
        with pytest.raises(LeaseUnavailable):
            ours.acquire(INC, "ours-again", wait=0.0)
        record = stored(store)
        assert (record.holder, record.token, record.released) == ("theirs", 2, False)
        held.check()
    with ours.hold(INC, "ours-again") as lease:  # released again: the ordinary path takes it
        assert lease.token == 3


def test_a_released_record_removed_since_is_not_recreated_from_memory(store: SqliteMetaStore) -> None:
    """``forget`` removes a gone incarnation's released record: the remembered revision no
    longer matches anything, so the swap fails and nothing is written from the guess."""
    g = gate(store, ManualClock())
    with g.hold(INC, "first"):
        pass
    assert g.forget(INC)
    assert store.get(keys.lease(INC)) is None
    # The remembered (token 1, revision) swap fails on the missing record; the acquire then
    # reads the registry and starts afresh at token 1, not from the guess's token 2.
    with g.hold(INC, "late") as lease:
        assert lease.token == 1
        held = stored(store)
        assert (held.holder, held.token) == ("late", 1)
