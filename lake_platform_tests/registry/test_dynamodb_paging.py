"""A listing over a kind's 16 buckets (layout 2) whose buckets answer in several pages: the merge
reads every bucket's first page at once and its later pages from where DynamoDB said the page
stopped (``LastEvaluatedKey``), and still yields one key-ordered, bounded, resumable sequence.

Records of 300 KB make DynamoDB end a page at 1 MB (three records), so a few records per bucket
give several pages without writing thousands of items. Against the session's DynamoDB-API server.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from lake_platform.registry.dynamodb import DynamoMetaStore
from lake_platform.registry.dynamodb_layout import BUCKETS, partition_of
from lake_platform.registry.store import ABSENT, Put
from lake_platform_tests.registry.dynamo_tables import fresh_store

VALUE_BYTES = 300_000  # three to a 1 MB page
PREFIX = "tbl/p/w/"


@pytest.fixture
def store(dynamodb_url: str, tmp_path: Path) -> Iterator[DynamoMetaStore]:
    with fresh_store(dynamodb_url, tmp_path / "home") as dynamo:
        yield dynamo


def _keys() -> list[str]:
    """Table keys, in key order: 7 in one bucket (3 pages), 5 in another (2 pages), and one in
    each of 4 more; the rest of the 16 buckets are empty."""
    wanted: dict[str, int] = {}
    chosen: list[str] = []
    for i in range(10_000):
        key = f"{PREFIX}ns/t{i:04d}"
        part = partition_of(key)
        if part not in wanted and len(wanted) < 6:
            wanted[part] = (7, 5, 1, 1, 1, 1)[len(wanted)]
        if wanted.get(part, 0) > 0:
            wanted[part] -= 1
            chosen.append(key)
        if len(wanted) == 6 and not any(wanted.values()):
            return sorted(chosen, key=str.encode)
    raise AssertionError("no table names fill the buckets wanted")


def _write(store: DynamoMetaStore) -> list[str]:
    written = _keys()
    assert sorted(Counter(partition_of(k) for k in written).values()) == [1, 1, 1, 1, 5, 7]
    for start in range(0, len(written), 4):  # 4 records a transaction: under its 4 MB
        batch = written[start : start + 4]
        store.transact([Put(k, k.encode().ljust(VALUE_BYTES, b"."), ABSENT) for k in batch])
    return written


def _queries(store: DynamoMetaStore) -> list[dict[str, Any]]:
    """The Query requests ``store`` makes from now on, as sent (their parameters)."""
    sent: list[dict[str, Any]] = []
    store.events.register("before-parameter-build.dynamodb.Query", lambda params, **_: sent.append(params))
    return sent


def test_a_merge_of_buckets_read_in_several_pages_is_one_ordered_sequence(store: DynamoMetaStore) -> None:
    written = _write(store)
    sent = _queries(store)
    listed = list(store.scan_prefix(PREFIX))
    assert [i.key for i in listed] == written
    assert all(i.value == i.key.encode().ljust(VALUE_BYTES, b".") for i in listed)
    # The premise: some bucket answered in more than one page...
    later = [q for q in sent if "ExclusiveStartKey" in q]
    assert len(later) >= 2, "no bucket was read in several pages"
    # ...and no page was read twice.
    pages = [(q["ExpressionAttributeValues"][":p"]["S"], str(q.get("ExclusiveStartKey"))) for q in sent]
    assert len(pages) == len(set(pages))
    assert len({p for p, _ in pages}) == BUCKETS

    for start_after, limit in [
        (written[2], None),
        (written[5], 4),
        (None, 5),
        (written[0][:-1], 8),  # a start key no record has
        (written[-2], 10),
        (written[-1], None),
    ]:
        want = [k for k in written if start_after is None or k.encode() > start_after.encode()][:limit]
        got = store.scan_prefix(PREFIX, start_after=start_after, limit=limit)
        assert [i.key for i in got] == want, (start_after, limit)


def test_a_bounded_merge_reads_no_page_it_does_not_use(store: DynamoMetaStore) -> None:
    written = _write(store)
    sent = _queries(store)
    assert [i.key for i in store.scan_prefix(PREFIX, limit=2)] == written[:2]
    # One Query per bucket, each for at most 2 items: after 2, a bucket's stream is done.
    assert len(sent) == BUCKETS
    assert {q["Limit"] for q in sent} == {2}
