"""The SQLite backend's connection pool: callers on short-lived threads (Lance calls the
catalog's namespace back from threads of its own) reuse connections instead of each opening one
and keeping it until close."""

from __future__ import annotations

import threading
from pathlib import Path

from lake_platform.registry.sqlite import SqliteMetaStore
from lake_platform.registry.store import ABSENT, Put


def test_short_lived_threads_reuse_pooled_connections(tmp_path: Path) -> None:
    opened: list[object] = []
    store = SqliteMetaStore(tmp_path / "r.db", on_open=opened.append)
    store.put_if_absent("k/a", b"0")
    opened.clear()  # counted from here: the store holds one idle connection
    for i in range(40):  # one after another, each on a new thread, as Lance's callbacks come
        t = threading.Thread(target=lambda i=i: store.transact([Put(f"k/{i}", b"v", ABSENT)]))
        t.start()
        t.join()
        assert store.get(f"k/{i}") is not None
    assert len(opened) <= 1
    assert store.connections() <= 1
    store.close()


def test_the_pool_stays_bounded_under_a_burst(tmp_path: Path) -> None:
    store = SqliteMetaStore(tmp_path / "r.db", pool_size=3)
    burst = 3 * store.pool_size
    barrier = threading.Barrier(burst)
    errors: list[BaseException] = []

    def work(i: int) -> None:
        try:
            barrier.wait()
            store.put_if_absent(f"k/{i}/x", b"v")
            assert [item.key for item in store.scan_prefix(f"k/{i}/")] == [f"k/{i}/x"]
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(burst)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert store.connections() <= store.pool_size
    assert len(list(store.scan_prefix("k/"))) == burst
    store.close()
    assert store.connections() == 0
    assert store.get("k/0/x") is not None  # usable after close, as before pooling
