"""DynamoDB's size limits, met through the store against the session's moto server: an item
holds at most 400 KB, one TransactWriteItems at most 4 MB, and a Query or Scan answers at most
1 MB per page. A record or batch over a limit is refused typed, naming what is too big, before
any request is sent; listings follow every page."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from lake_platform.errors import InvalidInput, RecordTooLarge
from lake_platform.registry.dynamodb import DynamoMetaStore
from lake_platform.registry.dynamodb_items import MAX_ITEM_BYTES, MAX_REQUEST_BYTES
from lake_platform.registry.store import ABSENT, Put, fits, pack
from lake_platform_tests.registry.dynamo_tables import fresh_store

KB = 1024


@pytest.fixture
def store(dynamodb_url: str, tmp_path: Path) -> Iterator[DynamoMetaStore]:
    with fresh_store(dynamodb_url, tmp_path / "home") as dynamo:
        yield dynamo


def sent(store: DynamoMetaStore) -> list[str]:
    """The DynamoDB operations ``store`` calls from now on."""
    calls: list[str] = []
    store.events.register("before-call.dynamodb", lambda model, **_: calls.append(model.name))
    return calls


@pytest.mark.parametrize("unconditional", [False, True])
def test_a_record_over_an_items_limit_is_refused_naming_it(
    store: DynamoMetaStore, unconditional: bool
) -> None:
    store.put_if_absent("tbl/small", b"s")
    calls = sent(store)
    big = b"x" * (MAX_ITEM_BYTES + 1)
    with pytest.raises(RecordTooLarge) as err:
        store.transact([Put("tbl/big", big, None if unconditional else ABSENT)])
    assert "tbl/big" in str(err.value) and f"{MAX_ITEM_BYTES:,}" in str(err.value)
    assert err.value.key == "tbl/big" and err.value.size > MAX_ITEM_BYTES
    assert isinstance(err.value, InvalidInput)
    # Also inside a batch: nothing of it written, not even its small records.
    with pytest.raises(RecordTooLarge):
        store.transact([Put("tbl/other", b"o", ABSENT), Put("tbl/big", big, ABSENT)])
    assert [c for c in calls if c not in ("GetItem",)] == []  # refused before any write was sent
    assert store.get("tbl/big") is None and store.get("tbl/other") is None


def test_the_largest_item_fits(store: DynamoMetaStore) -> None:
    """The limit is DynamoDB's, not a rounder guess below it: a value just under it is stored."""
    key = "tbl/edge"
    value = b"y" * (MAX_ITEM_BYTES - 200)
    assert store.put_if_absent(key, value).revision == 1
    assert store.get(key).value == value  # type: ignore[union-attr]


def test_a_batch_over_a_transactions_limit_is_refused_whole(store: DynamoMetaStore) -> None:
    """Twelve records of 350 KB are 4.2 MB: DynamoDB refuses such a TransactWriteItems (moto does
    not check it), so the store refuses it first, naming the batch's size and the limit."""
    calls = sent(store)
    ops = [Put(f"ver/t/{i:02d}", bytes([i]) * 350 * KB, ABSENT) for i in range(12)]
    with pytest.raises(RecordTooLarge) as err:
        store.transact(ops)
    assert f"{MAX_REQUEST_BYTES:,}" in str(err.value) and "12 records" in str(err.value)
    assert "TransactWriteItems" not in calls
    assert list(store.scan_prefix("ver/")) == []
    # Eleven of them (3.85 MB) are one transaction.
    store.transact(ops[:11])
    assert len(list(store.scan_prefix("ver/t/"))) == 11


def test_a_batch_weighed_full_is_taken_and_one_byte_more_is_not(store: DynamoMetaStore) -> None:
    """``max_transact_bytes`` and ``op_bytes`` are what callers pack batches by
    (``catalog.transaction_chunks``): a batch weighed exactly full is one the store takes, change
    record included (99 watched records with long keys: the change record lists them all)."""
    ops = [Put(f"tbl/p/w/ns/{i:02d}" + "k" * 400, b"", ABSENT) for i in range(store.max_transact_ops)]
    empty = sum(store.op_bytes(op) for op in ops)
    room = store.max_transact_bytes - empty
    ops = [Put(op.key, b"v" * (room // len(ops) + (i < room % len(ops))), ABSENT) for i, op in enumerate(ops)]
    assert fits(store, ops) and sum(store.op_bytes(op) for op in ops) == store.max_transact_bytes
    assert not fits(store, [*ops[:-1], Put(ops[-1].key, ops[-1].value + b"v", ABSENT)])
    store.transact(ops)
    assert len(list(store.scan_prefix("tbl/p/w/ns/"))) == store.max_transact_ops


def test_batches_are_packed_by_count_and_by_bytes() -> None:
    costs = [(4, 300), (4, 300), (4, 500), (90, 1), (4, 2000), (1, 1)]
    assert pack(costs, 99, 1000) == [[0, 1], [2, 3], [4], [5]]  # [4]: over alone, refused typed
    assert pack(costs, 99, None) == [[0, 1, 2], [3, 4, 5]]


# -- listings past one page ----------------------------------------------------------------------


def _pages(store: DynamoMetaStore) -> list[tuple[str, bool]]:
    """Each Query/Scan answered from now on, and whether it said there is more."""
    answers: list[tuple[str, bool]] = []

    def seen(http_response: Any, parsed: dict[str, Any], model: Any, **_: Any) -> None:
        if model.name in ("Query", "Scan"):
            answers.append((model.name, "LastEvaluatedKey" in parsed))

    store.events.register("after-call.dynamodb", seen)
    return answers


@pytest.mark.parametrize(
    "prefix, listings",
    [
        ("log/p.w.ns.t/", ["log/p.w.ns.t/", "log/", "log"]),  # one bucket's Query; all buckets merged; Scan
        ("ver/inc1/", ["ver/inc1/", "ver/"]),  # one partition's Query; Scan (an unbounded kind)
    ],
)
def test_listings_follow_pages_past_one_megabyte(
    store: DynamoMetaStore, prefix: str, listings: list[str]
) -> None:
    """Thirty records of 100 KB under one prefix are 3 MB: DynamoDB (and moto) answer in pages
    of at most 1 MB, so every listing shape must follow LastEvaluatedKey to see all of them, in
    key order, and page on from ``start_after`` as well."""
    keys = [f"{prefix}{i:03d}" for i in range(30)]
    for start in range(0, 30, 10):
        store.transact([Put(key, b"z" * 100 * KB, ABSENT) for key in keys[start : start + 10]])
    for listing in listings:
        answers = _pages(store)
        assert [item.key for item in store.scan_prefix(listing)] == keys, listing
        assert any(more for _, more in answers), listing  # a page ended at 1 MB and was followed
        got = [item.key for item in store.scan_prefix(listing, start_after=keys[4], limit=20)]
        assert got == keys[5:25], listing


def test_the_suites_registry_wrappers_weigh_as_the_store_they_wrap(store: DynamoMetaStore) -> None:
    """A wrapper that did not pass on ``max_transact_bytes`` and ``op_bytes`` let the code under
    test write one batch where it packs several on DynamoDB (or ``max_transact_ops``: 10,000
    items where DynamoDB takes 99)."""
    from lake_platform_tests.catalog.registry_calls import RegistryCalls
    from lake_platform_tests.catalog.test_commit_conflicts import ReadOnlyRegistry
    from lake_platform_tests.catalog.test_commit_id_races import FirstLookupRaced
    from lake_platform_tests.catalog.test_transaction import Requests
    from lake_platform_tests.flight.helpers import CountingStore
    from lake_platform_tests.registry.catalog_records import Reads

    full = [Put(f"tbl/p/w/ns/t{i}", b"x" * 300 * KB, ABSENT) for i in range(14)]  # 4.2 MB
    wrappers = [
        RegistryCalls(store),
        ReadOnlyRegistry(store),
        FirstLookupRaced(store, lambda: None),
        Requests(store),
        CountingStore(store),
        Reads(store),
    ]
    for wrapped in wrappers:
        assert (wrapped.max_transact_ops, wrapped.max_transact_bytes) == (99, store.max_transact_bytes)
        assert wrapped.op_bytes(full[0]) == store.op_bytes(full[0]) > 300 * KB
        assert not fits(wrapped, full), type(wrapped).__name__
        assert len(pack([(1, wrapped.op_bytes(p)) for p in full], 99, wrapped.max_transact_bytes)) == 2
