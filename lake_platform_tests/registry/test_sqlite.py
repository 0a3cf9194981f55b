"""The SQLite backend's statements: each one costs a Python-to-SQLite round trip, so one op is one
statement, a batch one call per kind of op inside BEGIN/COMMIT, and ``get_many`` one SELECT.
Counted with ``sqlite3.Connection.set_trace_callback`` on the store's pooled connections (the
callback sees every statement SQLite starts: each row of an executemany counts as one)."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from lake_platform.errors import ConditionFailed, InvalidInput, ServiceUnavailable
from lake_platform.registry import sqlite_plan
from lake_platform.registry.sqlite import SqliteMetaStore
from lake_platform.registry.store import ABSENT, MAX_TRANSACT_OPS, Check, Delete, Op, Put


class Traced:
    """The statements a store's connections run, by first word ("BEGIN", "UPDATE", ...): the
    store's ``on_open``, so every connection it opens is traced from birth."""

    def __init__(self) -> None:
        self.sql: list[str] = []
        self._before: list[tuple[str, Callable[[], None]]] = []

    def __call__(self, conn: sqlite3.Connection) -> None:
        conn.set_trace_callback(self._started)

    def before_next(self, word: str, act: Callable[[], None]) -> None:
        """Run ``act`` once, as the next statement starting with ``word`` starts: SQLite traces
        a statement before it takes its snapshot or locks, so what ``act`` writes is seen."""
        self._before.append((word, act))

    def _started(self, sql: str) -> None:
        self.sql.append(sql)
        for i, (word, act) in enumerate(self._before):
            if sql.split(None, 1)[0].upper() == word:
                del self._before[i]
                act()
                return

    def take(self) -> list[str]:
        words = [sql.split(None, 1)[0].upper() for sql in self.sql]
        self.sql.clear()
        return words


@pytest.fixture
def traced() -> Traced:
    return Traced()


@pytest.fixture
def store(tmp_path: Path, traced: Traced) -> Iterator[SqliteMetaStore]:
    store = SqliteMetaStore(tmp_path / "registry.db", on_open=traced)
    try:
        yield store
    finally:
        store.close()


def _failure(key: str, expected: int | None, found: int) -> str:
    # The message (and key=) callers and logs have always seen.
    return f"registry condition failed on {key!r}: expected revision {expected}, found {found}"


def _write_lock_free(path: Path) -> bool:
    """Whether another connection takes the write lock at once: no connection the store pooled
    was left inside its BEGIN IMMEDIATE."""
    outside = sqlite3.connect(path, isolation_level=None, timeout=0)
    try:
        outside.execute("BEGIN IMMEDIATE")
        outside.execute("ROLLBACK")
        return True
    except sqlite3.OperationalError:
        return False
    finally:
        outside.close()


def _snapshot(store: SqliteMetaStore) -> list[tuple[str, bytes, int]]:
    return [(i.key, i.value, i.revision) for i in store.scan_prefix("")]


# -- statement counts ----------------------------------------------------------------------------


def test_a_commit_batch_runs_at_most_five_statements(store: SqliteMetaStore, traced: Traced) -> None:
    """The catalog's version commit: version, table record (CAS), log entry, commit marker, and a
    second CAS. Once 12 statements (a SELECT per condition, an upsert per put)."""
    store.put_if_absent("tbl/p/wh/ns/t", b"t1")
    store.put_if_absent("cid/pending", b"m1")
    store.compare_and_swap("cid/pending", 1, b"m2")
    traced.take()  # what the store ran so far
    results = store.transact(
        [
            Put("ver/inc/00000000000000000002", b"v2", ABSENT),
            Put("tbl/p/wh/ns/t", b"t2", 1),
            Put("log/p.wh.ns.t/000000000000002-c-000", b"entry", ABSENT),
            Put("cid/c2", b"marker", ABSENT),
            Put("cid/pending", b"m3", 2),
        ]
    )
    statements = traced.take()
    assert len(statements) <= 5
    # The two compare-and-swaps are one executemany, the three creates one INSERT.
    assert statements == ["BEGIN", "UPDATE", "UPDATE", "INSERT", "COMMIT"]
    assert [(i.key, i.value, i.revision) for i in results if i] == [
        ("ver/inc/00000000000000000002", b"v2", 1),
        ("tbl/p/wh/ns/t", b"t2", 2),
        ("log/p.wh.ns.t/000000000000002-c-000", b"entry", 1),
        ("cid/c2", b"marker", 1),
        ("cid/pending", b"m3", 3),
    ]
    assert [store.get(i.key) for i in results if i] == results


def test_single_ops_are_one_statement_without_begin(store: SqliteMetaStore, traced: Traced) -> None:
    traced.take()  # what the store ran so far
    assert store.put_if_absent("k/a", b"1").revision == 1
    assert traced.take() == ["INSERT"]
    assert store.compare_and_swap("k/a", 1, b"2").revision == 2
    assert traced.take() == ["UPDATE"]
    assert store.transact([Put("k/a", b"3", None)])[0].revision == 3  # type: ignore[union-attr]
    assert traced.take() == ["INSERT"]  # an upsert, RETURNING the revision it wrote
    assert store.transact([Check("k/a", 3)]) == [None]
    assert traced.take() == ["SELECT"]
    store.compare_and_delete("k/a", 3)
    assert traced.take() == ["DELETE"]
    assert store.get("k/a") is None


def test_a_batch_runs_one_call_per_kind_of_op(store: SqliteMetaStore, traced: Traced) -> None:
    for key in ("b/cas1", "b/cas2", "b/del1", "b/del2", "b/check", "b/up1"):
        store.put_if_absent(key, b"old")
    store.transact([Put("b/up1", b"again", None)])  # revision 2
    traced.take()  # what the store ran so far
    ops: list[Op] = [
        Put("b/new1", b"n1", ABSENT),
        Put("b/cas1", b"c1", 1),
        Delete("b/del1", 1),
        Check("b/check", 1),
        Put("b/up1", b"u1", None),
        Put("b/up2", b"u2", None),
        Check("b/none", ABSENT),
        Delete("b/never", ABSENT),  # deletes nothing: a check that the key is absent
        Put("b/cas2", b"c2", 1),
        Delete("b/del2", 1),
        Put("b/new2", b"n2", ABSENT),
    ]
    results = store.transact(ops)
    # BEGIN; SELECT (every check); UPDATE per CAS and DELETE per delete (an executemany each);
    # INSERT (both creates); INSERT ... RETURNING (both unconditional puts); COMMIT.
    expected = ["BEGIN", "SELECT", "UPDATE", "UPDATE", "DELETE", "DELETE", "INSERT", "INSERT", "COMMIT"]
    assert traced.take() == expected
    revisions = [(i.key, i.revision) if i else None for i in results]
    assert revisions == [
        ("b/new1", 1),
        ("b/cas1", 2),
        None,
        None,
        ("b/up1", 3),
        ("b/up2", 1),
        None,
        None,
        ("b/cas2", 2),
        None,
        ("b/new2", 1),
    ]
    assert _snapshot(store) == [
        ("b/cas1", b"c1", 2),
        ("b/cas2", b"c2", 2),
        ("b/check", b"old", 1),
        ("b/new1", b"n1", 1),
        ("b/new2", b"n2", 1),
        ("b/up1", b"u1", 3),
        ("b/up2", b"u2", 1),
    ]


def test_a_full_batch_of_every_kind(store: SqliteMetaStore, traced: Traced) -> None:
    n = MAX_TRANSACT_OPS // 4
    store.transact([Put(f"m/cas{i:02d}", b"c", ABSENT) for i in range(n)])
    store.transact([Put(f"m/del{i:02d}", b"d", ABSENT) for i in range(n)])
    store.transact([Put(f"m/up{i:02d}", b"u", ABSENT) for i in range(0, n, 2)])  # half exist
    ops: list[Op] = []
    for i in range(n):
        ops += [
            Put(f"m/cas{i:02d}", f"c{i}".encode(), 1),
            Delete(f"m/del{i:02d}", 1),
            Put(f"m/new{i:02d}", f"n{i}".encode(), ABSENT),
            Put(f"m/up{i:02d}", f"u{i}".encode(), None),
        ]
    traced.take()  # what the store ran so far
    results = store.transact(ops)
    assert traced.take() == ["BEGIN", *["UPDATE"] * n, *["DELETE"] * n, "INSERT", "INSERT", "COMMIT"]
    expect = {}
    for i in range(n):
        expect[f"m/cas{i:02d}"] = (f"c{i}".encode(), 2)
        expect[f"m/new{i:02d}"] = (f"n{i}".encode(), 1)
        expect[f"m/up{i:02d}"] = (f"u{i}".encode(), 2 if i % 2 == 0 else 1)
    assert {i.key: (i.value, i.revision) for i in store.scan_prefix("m/")} == expect
    assert {i.key: (i.value, i.revision) for i in results if i} == expect
    assert results[1::4] == [None] * n


def test_a_batch_past_one_statements_rows_is_still_one_transaction(
    store: SqliteMetaStore, traced: Traced
) -> None:
    # 1,000 creates and 1,000 unconditional puts: more ops than one multi-row statement covers
    # (two parameters an op, within SQLite's oldest default limit of 999), in one transaction.
    n = 1000
    assert store.max_transact_ops >= 2 * n > MAX_TRANSACT_OPS
    store.transact([Put(f"u/{i:04d}", b"0", ABSENT) for i in range(0, n, 2)])
    traced.take()  # what the store ran so far
    creates = [Put(f"c/{i:04d}", b"c", ABSENT) for i in range(n)]
    results = store.transact([*creates, *(Put(f"u/{i:04d}", b"u", None) for i in range(n))])
    statements = -(-n // sqlite_plan.ROWS)
    assert statements > 1
    assert traced.take() == ["BEGIN", *["INSERT"] * (2 * statements), "COMMIT"]
    assert [r.revision for r in results if r] == [1] * n + [2 if i % 2 == 0 else 1 for i in range(n)]
    # The last statement's create fails: every earlier statement's rows are undone with it.
    store.put_if_absent(f"d/{n - 1:04d}", b"taken")
    with pytest.raises(ConditionFailed) as failed:
        store.transact([Put(f"d/{i:04d}", b"d", ABSENT) for i in range(n)])
    assert failed.value.key == f"d/{n - 1:04d}"
    assert [i.key for i in store.scan_prefix("d/")] == [f"d/{n - 1:04d}"]


def test_get_many_is_one_select(store: SqliteMetaStore, traced: Traced) -> None:
    store.transact([Put("g/a", b"a", ABSENT), Put("g/c", b"c", ABSENT)])
    traced.take()  # what the store ran so far
    got = store.get_many(["g/c", "g/b", "g/a"])
    assert traced.take() == ["SELECT"]
    assert [(i.key, i.value) if i else None for i in got] == [("g/c", b"c"), None, ("g/a", b"a")]
    assert store.get_many([]) == []
    for bad in (["g/a", "g/a"], "g/a", [""]):
        with pytest.raises(InvalidInput):
            store.get_many(bad)  # type: ignore[arg-type]
    assert traced.take() == []  # rejected before any read


# -- failed conditions: same message, same key, nothing written ----------------------------------


def test_a_failure_in_the_third_op_writes_nothing(store: SqliteMetaStore, traced: Traced) -> None:
    store.put_if_absent("f/table", b"t1")
    store.put_if_absent("f/log", b"taken")
    before = _snapshot(store)
    traced.take()  # what the store ran so far
    with pytest.raises(ConditionFailed) as err:
        store.transact(
            [
                Put("f/version", b"v", ABSENT),  # would succeed
                Put("f/table", b"t2", 1),  # would succeed
                Put("f/log", b"entry", ABSENT),  # fails: present at revision 1
                Put("f/marker", b"m", ABSENT),
            ]
        )
    # The UPDATE landed, the INSERT missed one row: rolled back, then one SELECT names the op.
    assert traced.take() == ["BEGIN", "UPDATE", "INSERT", "ROLLBACK", "SELECT"]
    assert str(err.value) == _failure("f/log", ABSENT, 1)
    assert err.value.key == "f/log"
    assert _snapshot(store) == before
    # The connection went back to the pool outside any transaction: nothing holds the write lock.
    assert _write_lock_free(store.path)


@pytest.mark.parametrize(
    "ops, key, expected, found",
    [
        # The first failing op in op order is named, whichever statement ran (and missed) first.
        ([Put("f/a", b"x", ABSENT), Put("f/b", b"x", 5)], "f/a", ABSENT, 1),
        ([Put("f/b", b"x", 5), Put("f/a", b"x", ABSENT)], "f/b", 5, 2),
        ([Delete("f/a", 1), Put("f/new", b"x", ABSENT), Check("f/b", 1)], "f/b", 1, 2),
        ([Put("f/new", b"x", 3), Check("f/b", 2)], "f/new", 3, ABSENT),
        ([Put("f/up", b"x", None), Delete("f/a", 2)], "f/a", 2, 1),
        ([Check("f/a", 1), Delete("f/b", ABSENT)], "f/b", ABSENT, 2),
        ([Delete("f/gone", 1), Put("f/a", b"x", 1)], "f/gone", 1, ABSENT),
        # One row of an executemany missing: the first CAS (delete) lands, the second does not.
        ([Put("f/a", b"x", 1), Put("f/b", b"x", 1)], "f/b", 1, 2),
        ([Delete("f/a", 1), Delete("f/b", 1)], "f/b", 1, 2),
    ],
)
def test_a_failed_batch_names_its_first_failing_op(
    store: SqliteMetaStore, ops: list[Op], key: str, expected: int, found: int
) -> None:
    store.put_if_absent("f/a", b"a")
    store.put_if_absent("f/b", b"b")
    store.compare_and_swap("f/b", 1, b"b2")
    before = _snapshot(store)
    with pytest.raises(ConditionFailed) as err:
        store.transact(ops)
    assert str(err.value) == _failure(key, expected, found)
    assert err.value.key == key
    assert _snapshot(store) == before


def test_single_op_failures_keep_their_message(store: SqliteMetaStore, traced: Traced) -> None:
    store.put_if_absent("s/a", b"a")
    store.compare_and_swap("s/a", 1, b"a2")
    before = _snapshot(store)
    traced.take()  # what the store ran so far
    cases = [
        (lambda: store.put_if_absent("s/a", b"x"), _failure("s/a", ABSENT, 2)),
        (lambda: store.compare_and_swap("s/a", 1, b"x"), _failure("s/a", 1, 2)),
        (lambda: store.compare_and_swap("s/missing", 4, b"x"), _failure("s/missing", 4, ABSENT)),
        (lambda: store.compare_and_delete("s/a", 3), _failure("s/a", 3, 2)),
        (lambda: store.transact([Check("s/a", ABSENT)]), _failure("s/a", ABSENT, 2)),
    ]
    for call, message in cases:
        with pytest.raises(ConditionFailed) as err:
            call()
        assert str(err.value) == message
        assert err.value.key == message.split("'")[1]
        # The statement changed nothing; one SELECT finds the revision to report.
        assert len(traced.take()) == 2
    assert _snapshot(store) == before


def test_a_delete_expecting_absent_only_checks(store: SqliteMetaStore) -> None:
    assert store.transact([Delete("d/none", ABSENT)]) == [None]
    store.put_if_absent("d/some", b"x")
    with pytest.raises(ConditionFailed) as err:
        store.compare_and_delete("d/some", ABSENT)
    assert str(err.value) == _failure("d/some", ABSENT, 1)
    assert store.get("d/some") is not None


def test_a_condition_that_comes_true_meanwhile_is_applied_under_the_lock(
    store: SqliteMetaStore, traced: Traced, tmp_path: Path
) -> None:
    """The statement misses (the key exists); before the diagnosing read, another writer deletes
    the key. The call must neither report "expected revision 0, found 0" nor loop: it checks and
    writes under the write lock, and succeeds."""
    store.put_if_absent("r/a", b"old")
    other = SqliteMetaStore(tmp_path / "registry.db")
    traced.take()  # what the store ran so far
    traced.before_next("SELECT", lambda: other.compare_and_delete("r/a", 1))  # the diagnosing read
    item = store.put_if_absent("r/a", b"new")
    assert (item.value, item.revision) == (b"new", 1)
    # The missed INSERT, the read that finds every condition holding, then the checked write.
    assert traced.take() == ["INSERT", "SELECT", "BEGIN", "SELECT", "INSERT", "COMMIT"]
    got = other.get("r/a")
    assert got is not None and (got.value, got.revision) == (b"new", 1)
    other.close()


# -- a busy database -----------------------------------------------------------------------------


def test_a_held_write_lock_is_service_unavailable(tmp_path: Path) -> None:
    store = SqliteMetaStore(tmp_path / "registry.db", busy_timeout_seconds=0.05)
    store.put_if_absent("l/a", b"a")
    holder = sqlite3.connect(tmp_path / "registry.db", isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")
    try:
        for call in (
            lambda: store.compare_and_swap("l/a", 1, b"x"),
            lambda: store.put_if_absent("l/b", b"x"),
            lambda: store.transact([Put("l/a", b"x", 1), Put("l/b", b"x", ABSENT)]),
        ):
            with pytest.raises(ServiceUnavailable, match="^registry is busy: database is locked") as err:
                call()
            assert err.value.retryable
        # Readers are not blocked (WAL).
        assert store.get_many(["l/a", "l/b"])[1] is None
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    assert store.compare_and_swap("l/a", 1, b"x").revision == 2
    assert _write_lock_free(store.path)
    store.close()


def test_opening_a_registry_does_not_wait_for_a_writer(tmp_path: Path) -> None:
    """Another connection holding the write lock (a long transaction of another process) does
    not stop a store from opening the registry and reading it. Opening took the write lock to
    create the table even when it existed, so a read-only ``lake sql`` waited the busy timeout
    behind any writer and failed with "registry is busy: database is locked"."""
    path = tmp_path / "r.db"
    first = SqliteMetaStore(path)
    first.put_if_absent("k/1", b"v")
    writer = sqlite3.connect(path, isolation_level=None)
    writer.execute("BEGIN IMMEDIATE")
    try:
        reader = SqliteMetaStore(path, busy_timeout_seconds=0.01)
        assert [item.key for item in reader.scan_prefix("k/")] == ["k/1"]
        reader.close()
    finally:
        writer.execute("ROLLBACK")
        writer.close()
        first.close()
