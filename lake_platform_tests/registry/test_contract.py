"""The MetaStore contract. Every backend runs this suite unchanged (see ``metastore`` fixture)."""

from __future__ import annotations

import threading

import pytest

from lake_platform.errors import ConcurrentModification, ConditionFailed, InvalidInput
from lake_platform.registry.keys import nested_and_own
from lake_platform.registry.store import (
    ABSENT,
    MAX_GET_KEYS,
    MAX_TRANSACT_OPS,
    Check,
    Delete,
    MetaStore,
    Put,
)


def test_get_missing_is_none(metastore: MetaStore) -> None:
    assert metastore.get("k/missing") is None


def test_put_if_absent_then_get(metastore: MetaStore) -> None:
    item = metastore.put_if_absent("k/a", b"one")
    assert (item.value, item.revision) == (b"one", 1)
    got = metastore.get("k/a")
    assert got is not None and (got.value, got.revision) == (b"one", 1)


def test_put_if_absent_refuses_existing(metastore: MetaStore) -> None:
    metastore.put_if_absent("k/a", b"one")
    with pytest.raises(ConditionFailed) as err:
        metastore.put_if_absent("k/a", b"two")
    assert err.value.key == "k/a"
    assert isinstance(err.value, ConcurrentModification)
    assert metastore.get("k/a").value == b"one"  # type: ignore[union-attr]


def test_compare_and_swap(metastore: MetaStore) -> None:
    metastore.put_if_absent("k/a", b"one")
    item = metastore.compare_and_swap("k/a", 1, b"two")
    assert item.revision == 2
    with pytest.raises(ConditionFailed):
        metastore.compare_and_swap("k/a", 1, b"stale")
    with pytest.raises(ConditionFailed):
        metastore.compare_and_swap("k/missing", 1, b"x")
    assert metastore.get("k/a").value == b"two"  # type: ignore[union-attr]


def test_compare_and_swap_from_absent_creates(metastore: MetaStore) -> None:
    assert metastore.compare_and_swap("k/new", ABSENT, b"v").revision == 1


def test_compare_and_delete(metastore: MetaStore) -> None:
    metastore.put_if_absent("k/a", b"one")
    metastore.compare_and_swap("k/a", 1, b"two")
    with pytest.raises(ConditionFailed):
        metastore.compare_and_delete("k/a", 1)
    assert metastore.get("k/a") is not None
    metastore.compare_and_delete("k/a", 2)
    assert metastore.get("k/a") is None
    with pytest.raises(ConditionFailed):
        metastore.compare_and_delete("k/a", 2)


def test_recreated_key_starts_at_revision_one(metastore: MetaStore) -> None:
    metastore.put_if_absent("k/a", b"one")
    metastore.compare_and_delete("k/a", 1)
    assert metastore.put_if_absent("k/a", b"again").revision == 1


def test_unconditional_put(metastore: MetaStore) -> None:
    metastore.transact([Put("k/a", b"one", None)])
    metastore.transact([Put("k/a", b"two", None)])
    got = metastore.get("k/a")
    assert got is not None and got.value == b"two" and got.revision == 2


def test_binary_values_round_trip(metastore: MetaStore) -> None:
    blob = bytes(range(256)) * 8
    metastore.put_if_absent("k/bin", blob)
    assert metastore.get("k/bin").value == blob  # type: ignore[union-attr]


def test_transact_is_all_or_nothing(metastore: MetaStore) -> None:
    metastore.put_if_absent("t/a", b"a1")
    metastore.put_if_absent("t/b", b"b1")
    with pytest.raises(ConditionFailed) as err:
        metastore.transact(
            [
                Put("t/a", b"a2", 1),
                Put("t/c", b"c1", ABSENT),
                Delete("t/b", 1),
                Check("t/lease", 3),  # fails: absent
            ]
        )
    assert err.value.key in (None, "t/lease")
    assert metastore.get("t/a").value == b"a1"  # type: ignore[union-attr]
    assert metastore.get("t/b") is not None
    assert metastore.get("t/c") is None


def test_transact_applies_everything(metastore: MetaStore) -> None:
    metastore.put_if_absent("t/a", b"a1")
    metastore.put_if_absent("t/b", b"b1")
    metastore.put_if_absent("t/lease", b"held")
    results = metastore.transact(
        [
            Put("t/a", b"a2", 1),
            Put("t/c", b"c1", ABSENT),
            Delete("t/b", 1),
            Check("t/lease", 1),
        ]
    )
    assert results[0] is not None and results[0].revision == 2
    assert results[1] is not None and results[1].revision == 1
    assert results[2] is None and results[3] is None
    assert metastore.get("t/b") is None
    assert metastore.get("t/c").value == b"c1"  # type: ignore[union-attr]


def test_check_absent(metastore: MetaStore) -> None:
    metastore.transact([Check("t/none", ABSENT), Put("t/x", b"x", ABSENT)])
    metastore.put_if_absent("t/none", b"now present")
    with pytest.raises(ConditionFailed):
        metastore.transact([Check("t/none", ABSENT), Put("t/y", b"y", ABSENT)])
    assert metastore.get("t/y") is None


def test_transact_rejects_bad_batches(metastore: MetaStore) -> None:
    with pytest.raises(InvalidInput):
        metastore.transact([])
    with pytest.raises(InvalidInput):
        metastore.transact([Put("d/a", b"1"), Put("d/a", b"2")])
    with pytest.raises(InvalidInput):
        metastore.transact([Put(f"d/{i}", b"x") for i in range(metastore.max_transact_ops + 1)])
    assert list(metastore.scan_prefix("d/")) == []


def test_a_backend_takes_at_least_dynamodbs_batch(metastore: MetaStore) -> None:
    # MAX_TRANSACT_OPS is what every backend takes (DynamoDB exactly: one TransactWriteItems of
    # 100 items, one the change record); SQLite's one transaction takes far more.
    limits = {"sqlite": 10_000, "dynamodb": MAX_TRANSACT_OPS}
    assert metastore.max_transact_ops == limits[metastore.backend]
    ops = [Put(f"e/{i:05d}", b"x") for i in range(metastore.max_transact_ops)]
    assert all(item is not None and item.revision == 1 for item in metastore.transact(ops))
    assert sum(1 for _ in metastore.scan_prefix("e/")) == len(ops)


def test_invalid_keys(metastore: MetaStore) -> None:
    with pytest.raises(InvalidInput):
        metastore.get("")
    with pytest.raises(InvalidInput):
        metastore.put_if_absent("x" * 2000, b"v")


def test_get_many_answers_in_key_order(metastore: MetaStore) -> None:
    metastore.put_if_absent("g/a", b"a1")
    metastore.put_if_absent("g/b", b"b1")
    metastore.compare_and_swap("g/b", 1, b"b2")
    # Keys of kinds a backend may keep in different partitions, and absent ones in between.
    metastore.put_if_absent("tbl/p/wh/ns/t", b"table")
    metastore.put_if_absent("ver/inc/00000000000000000001", b"version")
    keys = ["g/b", "g/missing", "ver/inc/00000000000000000001", "g/a", "tbl/p/wh/ns/t", "nothing/here"]
    got = metastore.get_many(keys)
    assert [(i.key, i.value, i.revision) if i else None for i in got] == [
        ("g/b", b"b2", 2),
        None,
        ("ver/inc/00000000000000000001", b"version", 1),
        ("g/a", b"a1", 1),
        ("tbl/p/wh/ns/t", b"table", 1),
        None,
    ]
    assert got == [metastore.get(key) for key in keys]
    assert metastore.get_many(["g/missing"]) == [None]


def test_get_many_sees_the_latest_writes(metastore: MetaStore) -> None:
    metastore.put_if_absent("g/a", b"1")
    metastore.put_if_absent("g/b", b"1")
    assert [i.revision for i in metastore.get_many(["g/a", "g/b"]) if i] == [1, 1]
    metastore.transact([Put("g/a", b"2", 1), Delete("g/b", 1), Put("g/c", b"new", ABSENT)])
    got = metastore.get_many(["g/a", "g/b", "g/c"])
    assert [(i.value, i.revision) if i else None for i in got] == [(b"2", 2), None, (b"new", 1)]


def test_get_many_of_nothing_is_empty(metastore: MetaStore) -> None:
    assert metastore.get_many([]) == []
    assert metastore.get_many(()) == []


def test_get_many_rejects_bad_key_lists(metastore: MetaStore) -> None:
    metastore.put_if_absent("g/a", b"a")
    too_many = [f"g/{i}" for i in range(MAX_GET_KEYS + 1)]
    for bad in (["g/a", "g/a"], "g/a", ["g/a", ""], ["g/a", "x" * 2000], [None], too_many):
        with pytest.raises(InvalidInput):
            metastore.get_many(bad)  # type: ignore[arg-type]


def test_get_many_takes_the_most_keys_allowed(metastore: MetaStore) -> None:
    keys = [f"g/{i:03d}" for i in range(MAX_GET_KEYS)]
    metastore.transact([Put(keys[0], b"first", ABSENT), Put(keys[-1], b"last", ABSENT)])
    got = metastore.get_many(keys)
    assert len(got) == MAX_GET_KEYS and got[1:-1] == [None] * (MAX_GET_KEYS - 2)
    assert got[0] is not None and got[0].value == b"first"
    assert got[-1] is not None and got[-1].value == b"last"


def test_get_many_values_are_binary_safe(metastore: MetaStore) -> None:
    blobs = {"g/bin": bytes(range(256)) * 8, "g/empty": b"", "g/nul": b"\x00\x00"}
    metastore.transact([Put(key, blob, ABSENT) for key, blob in blobs.items()])
    got = metastore.get_many(list(blobs))
    assert [i.value for i in got if i] == list(blobs.values())


def test_scan_prefix_is_ordered_and_bounded(metastore: MetaStore) -> None:
    keys = [f"s/{i:04d}" for i in range(0, 1200, 1)]
    # Neighbouring prefixes must not leak into the scan.
    metastore.put_if_absent("s", b"bare")
    metastore.put_if_absent("s0", b"sibling")
    metastore.put_if_absent("r/0", b"before")
    # Batches of 50: a layout-1 DynamoDB registry spends one slot of the 100 on its layout guard.
    for start in range(0, len(keys), 50):
        metastore.transact([Put(k, k.encode(), ABSENT) for k in keys[start : start + 50]])
    scanned = [item.key for item in metastore.scan_prefix("s/")]
    assert scanned == keys  # pages to the end, in order
    assert [i.key for i in metastore.scan_prefix("s/", limit=7)] == keys[:7]
    after = [i.key for i in metastore.scan_prefix("s/", start_after="s/0599", limit=3)]
    assert after == ["s/0600", "s/0601", "s/0602"]
    assert list(metastore.scan_prefix("nothing/")) == []
    # A range pages the same way, and leaves out its upper bound (here a key of its own):
    # DynamoDB's BETWEEN includes it, so a page holding it comes back one item short.
    assert [i.key for i in metastore.scan_range("s/", "s/1000")] == keys[:1000]
    assert [i.key for i in metastore.scan_range("s/0990", "s/1000", limit=11)] == keys[990:1000]
    assert [i.key for i in metastore.scan_range("s", "s/0002")] == ["s", "s/0000", "s/0001"]
    ranged = metastore.scan_range("s/0100", "s/0900", start_after="s/0599", limit=3)
    assert [i.key for i in ranged] == ["s/0600", "s/0601", "s/0602"]
    assert [i.key for i in metastore.scan_range("s/0100", "s/0103", start_after="s/")] == keys[100:103]
    assert list(metastore.scan_range("s/0100", "s/0900", start_after="s/0900")) == []
    assert list(metastore.scan_range("s/0100", "s/0100")) == []
    assert list(metastore.scan_range("s/0100", "s/0099")) == []
    with pytest.raises(InvalidInput):
        list(metastore.scan_range("", "s/"))


def test_scan_prefix_orders_by_utf8_bytes(metastore: MetaStore) -> None:
    for key in ["o/b", "o/a", "o/B", "o/_", "o/aa", "o/a0"]:
        metastore.put_if_absent(key, b"")
    assert [i.key for i in metastore.scan_prefix("o/")] == sorted(
        ["o/b", "o/a", "o/B", "o/_", "o/aa", "o/a0"], key=lambda k: k.encode()
    )


def test_scan_prefix_over_registry_key_kinds(metastore: MetaStore) -> None:
    """Registry keys as the catalog writes them: kinds a backend may spread over many partitions
    (versions per incarnation, table records and commit logs in hashed buckets) still scan as one
    ordered, bounded, resumable sequence per prefix."""
    written: list[str] = []
    tables = [("p", "wh", "ns", f"t{i}") for i in range(12)] + [
        ("p", "wh", "ns.sub", "x"),
        ("p", "w2", "ns", "y"),
    ]
    for i, (p, w, ns, t) in enumerate(tables):
        inc = f"inc{i:02d}"
        dotted = f"{p}.{w}.{ns}.{t}"
        batch = [f"tbl/{p}/{w}/{ns}/{t}", f"lse/{inc}", f"cid/c{i:02d}", f"trs/{dotted}/{i:015d}-{inc}"]
        batch += [f"ver/{inc}/{v:020d}" for v in (1, 2, 10)]
        batch += [f"log/{dotted}/{v:015d}-c{i}-000" for v in (5, 6)]
        batch += [f"rpt/orphans/{dotted}/{v:015d}" for v in (1, 2)]
        metastore.transact([Put(k, k.encode(), ABSENT) for k in batch])
        written += batch

    def expect(prefix: str, start_after: str | None = None, limit: int | None = None) -> list[str]:
        keys = sorted((k for k in written if k.startswith(prefix)), key=lambda k: k.encode())
        if start_after is not None:
            keys = [k for k in keys if k.encode() > start_after.encode()]
        return keys[:limit]

    cases = [
        ("tbl/",),
        ("tbl/p/wh/",),
        ("tbl/p/wh/ns/",),
        ("tbl/p/wh/ns",),
        ("tbl/p/wh/ns/", "tbl/p/wh/ns/t3", 4),
        ("tbl/p/wh/ns/", None, 5),
        ("ver/inc03/",),
        ("ver/inc03/", "ver/inc03/" + "2".zfill(20)),
        ("ver/",),
        ("ver/inc0", None, 7),
        ("log/p.wh.ns.t1/",),
        ("log/p.wh",),
        ("log/p.wh", "log/p.wh.ns.t4/", 3),
        ("trs/p.wh.ns.",),
        ("rpt/orphans/",),
        ("rpt/orphans/p.wh.ns.t2/",),
        ("cid/",),
        ("lse/",),
        ("tbl/q/",),
    ]
    for case in cases:
        prefix, start_after, limit = (*case, None, None)[:3]
        got = [i.key for i in metastore.scan_prefix(prefix, start_after=start_after, limit=limit)]
        assert got == expect(prefix, start_after, limit), case

    # What is nested in an object and its own, as the catalog lists them: one range each.
    def expect_range(head: str, start_after: str | None, limit: int | None) -> list[str]:
        return (expect(head + ".", start_after) + expect(head + "/", start_after))[:limit]

    metastore.put_if_absent("tbl/p/wh/ns0", b"the range's upper bound: never listed")
    ranges = [
        ("tbl/p/wh/ns",),
        ("tbl/p/wh/ns", "tbl/p/wh/ns.sub/x", 3),
        ("tbl/p/wh/ns", "tbl/p/wh/ns/t4"),
        ("tbl/p/wh/ns", None, 1),
        ("trs/p.wh.ns.t1",),
        ("log/p.wh.ns",),
        ("log/p.wh.ns", "log/p.wh.ns.t2/", 3),
        ("log/p.wh.ns.t1",),
        ("rpt/orphans/p.wh.ns",),
        ("tbl/p/w2",),
    ]
    for case in ranges:
        head, start_after, limit = (*case, None, None)[:3]
        lo, hi = nested_and_own(head)
        got = [i.key for i in metastore.scan_range(lo, hi, start_after=start_after, limit=limit)]
        assert got == expect_range(head, start_after, limit), case


def test_scan_sees_latest_writes(metastore: MetaStore) -> None:
    metastore.put_if_absent("c/a", b"1")
    metastore.compare_and_swap("c/a", 1, b"2")
    metastore.put_if_absent("c/b", b"1")
    metastore.compare_and_delete("c/b", 1)
    assert [(i.key, i.value, i.revision) for i in metastore.scan_prefix("c/")] == [("c/a", b"2", 2)]


def test_concurrent_compare_and_swap_has_one_winner(metastore: MetaStore) -> None:
    metastore.put_if_absent("race/x", b"0")
    wins: list[int] = []
    losses: list[int] = []
    barrier = threading.Barrier(8)

    def contend(i: int) -> None:
        barrier.wait()
        try:
            metastore.compare_and_swap("race/x", 1, str(i).encode())
            wins.append(i)
        except ConcurrentModification:
            losses.append(i)

    threads = [threading.Thread(target=contend, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(wins) == 1 and len(losses) == 7
    got = metastore.get("race/x")
    assert got is not None and got.revision == 2 and got.value == str(wins[0]).encode()


def test_concurrent_counter_loses_no_increment(metastore: MetaStore) -> None:
    """Read-modify-CAS loops from several threads: every increment lands exactly once."""
    metastore.put_if_absent("ctr", b"0")

    def bump(n: int) -> None:
        for _ in range(n):
            while True:
                item = metastore.get("ctr")
                assert item is not None
                try:
                    metastore.compare_and_swap("ctr", item.revision, str(int(item.value) + 1).encode())
                    break
                except ConcurrentModification:
                    continue

    threads = [threading.Thread(target=bump, args=(15,)) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    got = metastore.get("ctr")
    assert got is not None and int(got.value) == 60 and got.revision == 61
