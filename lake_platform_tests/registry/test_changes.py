"""The change feed's contract, on every backend (the ``metastore`` fixture): a batch writing a
catalog record announces exactly its keys in the same write; a failed batch announces nothing;
concurrent writers lose no number and skip none; a reader learns that nothing changed in one
read per shard, and one left behind by more than the ring is told so."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from lake_platform.errors import ConditionFailed
from lake_platform.registry import keys
from lake_platform.registry.changes import (
    RING,
    ChangeWriter,
    FeedBehind,
    changes_since,
    feed_heads,
    read_shards,
    shard_head,
)
from lake_platform.registry.store import Check, Delete, MetaStore, Op, Put
from lake_platform_tests.registry.catalog_records import Reads


def shards(store: MetaStore, n: int) -> None:
    """Give the registry ``n`` feed shards (before its first change)."""
    store.put_if_absent("chg/meta", json.dumps({"shards": n}).encode())


def announced(store: MetaStore, since: dict[int, int]) -> list[tuple[str, ...]]:
    changes, _ = changes_since(store, since)
    return [c.keys for c in changes]


def test_a_batch_announces_its_catalog_keys_once(metastore: MetaStore) -> None:
    shards(metastore, 1)
    metastore.transact(
        [
            Put("tbl/p/w/ns/t", b"t"),
            Put("ver/i/00000000000000000001", b"v"),
            Put("lse/i", b"lease"),  # not a catalog record: not announced
            Check("usr/nobody", 0),  # checked, not written: not announced
        ]
    )
    metastore.put_if_absent("log/p.w.ns.t/1", b"entry")  # no catalog key: no change at all
    assert announced(metastore, {0: 0}) == [("tbl/p/w/ns/t", "ver/i/00000000000000000001")]
    metastore.compare_and_delete("tbl/p/w/ns/t", 1)
    changes, after = changes_since(metastore, {0: 1})
    assert [c.keys for c in changes] == [("tbl/p/w/ns/t",)] and after == {0: 2}


def test_a_failed_batch_announces_nothing(metastore: MetaStore) -> None:
    shards(metastore, 1)
    metastore.put_if_absent("tbl/p/w/ns/t", b"t")
    with pytest.raises(ConditionFailed) as failed:
        metastore.transact([Put("tbl/p/w/ns/t", b"again", 0), Put("whs/p/w", b"w")])
    assert failed.value.key == "tbl/p/w/ns/t"  # the caller's condition, not the feed's
    assert metastore.get("whs/p/w") is None
    assert announced(metastore, {0: 0}) == [("tbl/p/w/ns/t",)]  # no phantom


def test_the_first_writer_chooses_the_shard_count(metastore: MetaStore) -> None:
    assert read_shards(metastore) is None  # an old registry: no feed yet
    metastore.put_if_absent("pol/p", b"x")
    assert read_shards(metastore) == 16
    assert ChangeWriter(metastore, 4).shards() == 16  # later writers follow the registry


def test_nothing_changed_is_one_read_per_shard(metastore: MetaStore) -> None:
    shards(metastore, 4)
    for i in range(12):
        metastore.put_if_absent(f"tbl/p/w/ns/t{i}", b"t")
    heads = feed_heads(metastore, 4)
    assert sum(heads.values()) == 12
    reads = Reads(metastore)
    changes, after = changes_since(reads, heads)
    assert changes == [] and after == heads and reads.count == 4


def test_a_writer_with_a_stale_head_takes_the_next_number(metastore: MetaStore) -> None:
    """Two writers (processes) of one shard: each learns from the condition that the other
    took a number, and neither announcement is lost or doubled."""
    shards(metastore, 1)
    first = metastore.changes  # type: ignore[attr-defined]
    metastore.put_if_absent("tbl/p/w/ns/a", b"a")  # number 1
    metastore.changes = ChangeWriter(metastore)  # type: ignore[attr-defined]  # another process
    metastore.put_if_absent("tbl/p/w/ns/b", b"b")  # finds the head (1): number 2
    metastore.changes = first  # type: ignore[attr-defined]
    metastore.put_if_absent("tbl/p/w/ns/c", b"c")  # its head (1) is stale: 2 is taken, so 3
    assert announced(metastore, {0: 0}) == [("tbl/p/w/ns/a",), ("tbl/p/w/ns/b",), ("tbl/p/w/ns/c",)]
    assert shard_head(metastore, 0) == 3


def test_concurrent_writers_lose_and_skip_no_change(metastore: MetaStore) -> None:
    shards(metastore, 2)
    written: list[str] = []
    lock = threading.Lock()
    seen: set[tuple[str, ...]] = set()
    stop = threading.Event()

    def write(worker: int) -> None:
        for i in range(10):
            key = f"tbl/p/w/ns/t{worker}_{i}"
            metastore.transact([Put(key, b"t"), Put(f"cid/{worker}-{i}", b"m")])
            with lock:
                written.append(key)

    def read() -> None:  # a replica following the feed while it is written
        position = {0: 0, 1: 0}
        while True:
            last = stop.is_set()
            changes, position = changes_since(metastore, position)
            seen.update(c.keys for c in changes)
            if last:
                return

    reader = threading.Thread(target=read)
    reader.start()
    writers = [threading.Thread(target=write, args=(w,)) for w in range(4)]
    for t in writers:
        t.start()
    for t in writers:
        t.join()
    stop.set()
    reader.join()
    assert sorted(k for (k,) in seen) == sorted(written)  # each once, none missed, none invented
    assert sum(feed_heads(metastore, 2).values()) == len(written) == 40


def test_the_ring_keeps_the_last_changes_and_a_reader_behind_it_is_told(metastore: MetaStore) -> None:
    shards(metastore, 1)
    for i in range(RING + 3):
        metastore.put_if_absent(f"usr/u{i:04d}", b"u")
    # Across the ring's end and start, in order.
    assert announced(metastore, {0: RING - 2}) == [(f"usr/u{i:04d}",) for i in range(RING - 2, RING + 3)]
    assert announced(metastore, {0: RING + 3}) == []
    with pytest.raises(FeedBehind):
        changes_since(metastore, {0: 2})  # change 3 was overwritten by change RING + 3


def test_a_reader_ahead_of_a_feed_that_was_reset_is_told(metastore: MetaStore) -> None:
    """A registry restored from an older copy (or wiped) no longer holds the reader's last
    change: the reader must load cold, not wait for numbers it has already seen."""
    shards(metastore, 1)
    for i in range(5):
        metastore.put_if_absent(f"usr/u{i}", b"u")
    for item in list(metastore.scan_prefix(keys.change_records(0))):
        metastore.compare_and_delete(item.key, item.revision)
    # A writer of the restored registry (it never saw the old numbers).
    metastore.changes = ChangeWriter(metastore)  # type: ignore[attr-defined]
    metastore.put_if_absent("usr/late", b"u")  # number 1 again
    with pytest.raises(FeedBehind):
        changes_since(metastore, {0: 5})
    assert announced(metastore, {0: 0}) == [("usr/late",)]


def test_a_full_batch_carries_its_change_record(metastore: MetaStore) -> None:
    shards(metastore, 1)
    ops: list[Op] = [Put(f"tok/{i:05d}", b"t") for i in range(metastore.max_transact_ops)]
    layout = getattr(metastore, "layout", None)
    if layout is not None and layout() != "2":
        ops = ops[:-1]  # a layout-1 registry keeps one slot for its layout guard
    metastore.transact(ops)
    (keys_announced,) = announced(metastore, {0: 0})
    assert len(keys_announced) == len(ops)
    metastore.transact([Delete(op.key, 1) for op in ops[:3]])
    assert metastore.get(keys.change_record(0, 1)) is not None


_WRITER = """
import sys
from lake_platform.registry.factory import open_metastore
from lake_platform.registry.store import Put
from lake_platform.settings import load_settings

store = open_metastore(load_settings(home=sys.argv[2], registry_url=sys.argv[1], _env_file=None))
for i in range(100_000):
    store.transact([Put(f"tbl/p/w/ns/k{i:06d}", b"t"), Put(f"ver/k{i:06d}/{1:020d}", b"v")])
    print(i, flush=True)
"""


def test_a_writer_killed_mid_write_leaves_no_missed_and_no_phantom_change(
    metastore: MetaStore, tmp_path: Path
) -> None:
    """SIGKILL lands wherever it lands (inside a transaction, between one and the next): the
    feed names exactly the tables that exist, each once."""
    shards(metastore, 4)
    writer = subprocess.Popen(
        [sys.executable, "-c", _WRITER, metastore.url, str(tmp_path / "home")],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    )
    try:
        assert writer.stdout is not None
        for _ in range(15):  # fifteen commits acknowledged, then killed mid-flight
            assert writer.stdout.readline()
    finally:
        os.kill(writer.pid, signal.SIGKILL)
        writer.wait()
    written = {item.key for item in metastore.scan_prefix("tbl/p/w/ns/")}
    changes, _ = changes_since(metastore, dict.fromkeys(range(4), 0))
    announced = [key for change in changes for key in change.keys if key.startswith("tbl/")]
    assert len(written) >= 15 and sorted(announced) == sorted(written)
