"""SQLite MetaStore: the embedded default. WAL, a busy timeout, a small pool of connections.

Atomicity across processes comes from SQLite's own locking: every write batch runs in a
``BEGIN IMMEDIATE`` transaction, so conditions are evaluated and writes applied under one lock.

Connections are pooled, not kept per thread: Lance calls the catalog's namespace back from
short-lived threads of its own, and a connection per thread meant opening one (connect and three
PRAGMAs, ~0.1 ms) on every commit and keeping it, with its file descriptors, until close.
A connection is used by one caller at a time, from whatever thread holds it.
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from lake_platform.errors import ConditionFailed, ServiceUnavailable
from lake_platform.registry.store import ABSENT, Check, Delete, Item, MetaStore, Op, Put, check_key, check_ops

_SCHEMA = """
CREATE TABLE IF NOT EXISTS kv (
    key      TEXT PRIMARY KEY,
    value    BLOB NOT NULL,
    revision INTEGER NOT NULL
) WITHOUT ROWID
"""
_PAGE = 500
#: Idle connections kept for reuse; more are opened under bursts and closed when returned.
_POOL = 8


class SqliteMetaStore(MetaStore):
    backend = "sqlite"

    def __init__(self, path: str | Path, *, busy_timeout_seconds: float = 2.0) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.url = f"sqlite:///{self.path.as_posix()}"
        self._timeout = busy_timeout_seconds
        self._idle: list[sqlite3.Connection] = []
        self._lock = threading.Lock()
        with self._tx() as conn:
            conn.execute(_SCHEMA)

    def _open(self) -> sqlite3.Connection:
        try:
            # check_same_thread=False: a pooled connection moves between threads, one user at a time.
            conn = sqlite3.connect(
                self.path, timeout=self._timeout, isolation_level=None, check_same_thread=False
            )
            conn.execute("PRAGMA journal_mode=WAL")
            # NORMAL is durable against process crashes in WAL mode; only an OS crash can
            # lose the last commits, never corrupt the database.
            conn.execute("PRAGMA synchronous=NORMAL")
            conn.execute(f"PRAGMA busy_timeout={int(self._timeout * 1000)}")
        except sqlite3.Error as exc:
            raise ServiceUnavailable(f"registry database cannot be opened: {exc}") from exc
        return conn

    @contextmanager
    def _conn(self) -> Iterator[sqlite3.Connection]:
        with self._lock:
            conn = self._idle.pop() if self._idle else None
        if conn is None:
            conn = self._open()
        try:
            yield conn
        finally:
            with self._lock:
                keep = len(self._idle) < _POOL and not conn.in_transaction
                if keep:
                    self._idle.append(conn)
            if not keep:
                conn.close()

    def connections(self) -> int:
        """Idle pooled connections (for tests: the pool stays bounded)."""
        with self._lock:
            return len(self._idle)

    @contextmanager
    def _tx(self) -> Iterator[sqlite3.Connection]:
        with self._conn() as conn, _Tx(conn) as tx:
            yield tx

    def get(self, key: str) -> Item | None:
        check_key(key)
        try:
            with self._conn() as conn:
                row = conn.execute("SELECT value, revision FROM kv WHERE key = ?", (key,)).fetchone()
        except sqlite3.OperationalError as exc:
            raise ServiceUnavailable(f"registry read failed: {exc}") from exc
        return Item(key, bytes(row[0]), row[1]) if row else None

    def transact(self, ops: Sequence[Op]) -> list[Item | None]:
        check_ops(ops)
        results: list[Item | None] = []
        with self._tx() as conn:
            # Revisions read under this transaction's write lock (keys are distinct, see
            # check_ops): a conditional Put reuses what its condition read.
            seen: dict[str, int] = {}
            for op in ops:
                if isinstance(op, Put) and op.expected is None:
                    continue
                row = conn.execute("SELECT revision FROM kv WHERE key = ?", (op.key,)).fetchone()
                current = seen[op.key] = row[0] if row else ABSENT
                if current != op.expected:
                    raise ConditionFailed(
                        f"registry condition failed on {op.key!r}: expected revision "
                        f"{op.expected}, found {current}",
                        key=op.key,
                    )
            for op in ops:
                if isinstance(op, Put):
                    current = seen.get(op.key)
                    if current is None:
                        row = conn.execute("SELECT revision FROM kv WHERE key = ?", (op.key,)).fetchone()
                        current = row[0] if row else ABSENT
                    revision = current + 1
                    conn.execute(
                        "INSERT INTO kv (key, value, revision) VALUES (?, ?, ?) "
                        "ON CONFLICT(key) DO UPDATE SET value = excluded.value, revision = excluded.revision",
                        (op.key, op.value, revision),
                    )
                    results.append(Item(op.key, op.value, revision))
                elif isinstance(op, Delete):
                    conn.execute("DELETE FROM kv WHERE key = ?", (op.key,))
                    results.append(None)
                else:
                    assert isinstance(op, Check)
                    results.append(None)
        return results

    def scan_prefix(
        self, prefix: str, *, start_after: str | None = None, limit: int | None = None
    ) -> Iterator[Item]:
        # Keys are compared as UTF-8 bytes (CAST AS BLOB), the same order DynamoDB uses.
        cursor = start_after if start_after is not None and start_after >= prefix else None
        remaining = limit
        while remaining is None or remaining > 0:
            page = _PAGE if remaining is None else min(_PAGE, remaining)
            lower = cursor if cursor is not None else prefix
            op = ">" if cursor is not None else ">="
            try:
                with self._conn() as conn:  # per page: an unfinished scan holds no connection
                    rows = conn.execute(
                        f"SELECT key, value, revision FROM kv WHERE CAST(key AS BLOB) {op} CAST(? AS BLOB) "
                        "AND substr(key, 1, ?) = ? ORDER BY CAST(key AS BLOB) LIMIT ?",
                        (lower, len(prefix), prefix, page),
                    ).fetchall()
            except sqlite3.OperationalError as exc:
                raise ServiceUnavailable(f"registry scan failed: {exc}") from exc
            for key, value, revision in rows:
                yield Item(key, bytes(value), revision)
            if len(rows) < page:
                return
            cursor = rows[-1][0]
            if remaining is not None:
                remaining -= len(rows)

    def close(self) -> None:
        # The store stays usable (later calls open connections again), as before pooling.
        with self._lock:
            idle, self._idle = self._idle, []
        for conn in idle:
            conn.close()


class _Tx:
    """``BEGIN IMMEDIATE`` ... ``COMMIT``/``ROLLBACK``, mapping lock timeouts to ServiceUnavailable."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        self.conn = conn

    def __enter__(self) -> sqlite3.Connection:
        try:
            self.conn.execute("BEGIN IMMEDIATE")
        except sqlite3.OperationalError as exc:
            raise ServiceUnavailable(f"registry is busy: {exc}") from exc
        return self.conn

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: object) -> None:
        if exc_type is None:
            try:
                self.conn.execute("COMMIT")
            except sqlite3.OperationalError as err:
                self.conn.execute("ROLLBACK")
                raise ServiceUnavailable(f"registry commit failed: {err}") from err
        else:
            self.conn.execute("ROLLBACK")
            if isinstance(exc, sqlite3.OperationalError):
                raise ServiceUnavailable(f"registry write failed: {exc}") from exc
