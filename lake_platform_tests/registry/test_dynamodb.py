"""DynamoDB-specific behaviour, against the session's DynamoDB-API server (moto on loopback).
Its URL and table: test_dynamodb_admin.py.

Faults are injected with botocore event hooks on the store's own client (``store.events``: a
lost response, a throttled request); DynamoDB itself is never mocked. The store's waits between
its own attempts are recorded (``pauses``), not slept; botocore's retries wait as they do.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from botocore.awsrequest import AWSPreparedRequest, AWSResponse
from botocore.exceptions import ClientError, ReadTimeoutError

from lake_platform.errors import (
    ConcurrentModification,
    ConditionFailed,
    InvalidInput,
    ServiceUnavailable,
    Throttling,
)
from lake_platform.registry.dynamodb import DynamoMetaStore
from lake_platform.registry.dynamodb_errors import translate
from lake_platform.registry.sqlite import SqliteMetaStore
from lake_platform.registry.store import ABSENT, Check, Delete, Put
from lake_platform_tests.registry.dynamo_faults import apply, error_response
from lake_platform_tests.registry.dynamo_tables import fresh_store


@pytest.fixture
def pauses() -> list[float]:
    """The store's waits between its own attempts, in seconds."""
    return []


@pytest.fixture
def store(dynamodb_url: str, tmp_path: Path, pauses: list[float]) -> Iterator[DynamoMetaStore]:
    with fresh_store(dynamodb_url, tmp_path / "home", sleep=pauses.append) as dynamo:
        yield dynamo


# -- unknown outcomes: a retried request never commits twice -------------------------------------


def applied_then_failed(store: DynamoMetaStore, operation: str) -> list[bytes]:
    """The bodies of ``operation``'s requests: the first is applied by the server but answered
    500, so botocore re-sends the identical request (same ClientRequestToken and write id)."""
    sent: list[bytes] = []

    def apply_then_fail(request: AWSPreparedRequest, **_: Any) -> AWSResponse | None:
        sent.append(bytes(request.body))
        if len(sent) > 1:
            return None  # the re-send goes to the server for real
        apply(request)
        return error_response(request, 500, "InternalServerError")

    store.events.register(f"before-send.dynamodb.{operation}", apply_then_fail)
    return sent


def requests(store: DynamoMetaStore) -> list[str]:
    """The DynamoDB operations ``store`` calls from now on (botocore's re-sends are one call)."""
    calls: list[str] = []
    store.events.register("before-call.dynamodb", lambda model, **_: calls.append(model.name))
    return calls


def test_same_call_id_applies_once(store: DynamoMetaStore) -> None:
    """A retry carries the first attempt's id; when that attempt already landed, the retry is a
    no-op reporting success, for every kind of op in one batch. This holds without server-side
    ClientRequestToken support (moto ignores tokens; DynamoDB also honours them)."""
    store.put_if_absent("t/old", b"o")
    batch = [Put("t/a", b"a", ABSENT), Put("t/b", b"b", None), Delete("t/old", 1), Check("t/none", ABSENT)]
    sent = applied_then_failed(store, "TransactWriteItems")
    calls = requests(store)
    results = store.transact(batch)
    assert len(sent) == 2 and sent[0] == sent[1]
    assert calls == ["TransactWriteItems"]  # the re-send's refusal showed its own write: no read
    assert [(i.key, i.revision) for i in results if i] == [("t/a", 1), ("t/b", 1)]
    assert store.get("t/b").revision == 1  # type: ignore[union-attr]
    assert store.get("t/old") is None
    # A different call with the same stale expectation still fails.
    with pytest.raises(ConditionFailed):
        store.put_if_absent("t/a", b"x")


@pytest.mark.parametrize(
    "operation, ops",
    [
        ("TransactWriteItems", [Put("t/a", b"new", 1), Put("t/c", b"c", None), Check("t/none", ABSENT)]),
        ("PutItem", [Put("t/a", b"new", 1)]),
        ("UpdateItem", [Put("t/a", b"new", None)]),
        ("DeleteItem", [Delete("t/a", 1)]),
    ],
)
def test_lost_response_is_resolved_by_rereading(
    store: DynamoMetaStore, operation: str, ops: list[Any]
) -> None:
    """The write lands, then its response is lost: the store re-reads, finds its own write and
    reports success without writing again."""
    store.put_if_absent("t/a", b"old")
    lost = []

    def lose_response(**_: Any) -> None:
        if not lost:
            lost.append(operation)
            raise ReadTimeoutError(endpoint_url="injected")

    store.events.register(f"after-call.dynamodb.{operation}", lose_response)
    results = store.transact(ops)
    assert lost == [operation]
    got = store.get("t/a")
    if isinstance(ops[0], Delete):
        assert got is None and results == [None]
    else:
        assert got is not None and (got.value, got.revision) == (b"new", 2)
        assert results[0] == got
    if operation == "TransactWriteItems":
        assert store.get("t/c").revision == 1  # type: ignore[union-attr]


@pytest.mark.parametrize(
    "operation, ops",
    [
        ("TransactWriteItems", [Put("t/a", b"new", 1), Put("t/c", b"c", None)]),
        ("PutItem", [Put("t/a", b"new", 1)]),
        ("UpdateItem", [Put("t/a", b"new", None)]),
    ],
)
def test_resent_request_does_not_commit_twice(store: DynamoMetaStore, operation: str, ops: list[Any]) -> None:
    """The server applies the request but answers 500; botocore re-sends the identical request
    (same ClientRequestToken and write id), which must not apply a second time."""
    store.put_if_absent("t/a", b"old")
    sent = applied_then_failed(store, operation)
    calls = requests(store)
    results = store.transact(ops)
    assert len(sent) == 2 and sent[0] == sent[1]
    assert calls == [operation]  # the re-send's refusal showed its own write: no read
    if operation == "TransactWriteItems":
        assert json.loads(sent[0])["ClientRequestToken"]
    got = store.get("t/a")
    assert got is not None and (got.value, got.revision) == (b"new", 2)
    assert results[0] == got


def landed_then_throttled(store: DynamoMetaStore, operations: tuple[str, ...]) -> list[str]:
    """The first write request is applied by the server but answered 500; from then on every
    request of ``operations`` is throttled (botocore's re-send of the write included)."""
    sent: list[str] = []

    def apply_then_throttle(request: AWSPreparedRequest, **_: Any) -> AWSResponse:
        target = request.headers["X-Amz-Target"]
        sent.append(target.decode() if isinstance(target, bytes) else target)
        if len(sent) > 1:
            return error_response(request, 400, "ProvisionedThroughputExceededException")
        apply(request)
        return error_response(request, 500, "InternalServerError")

    for operation in operations:
        store.events.register(f"before-send.dynamodb.{operation}", apply_then_throttle)
    return sent


@pytest.mark.parametrize("operation", ["TransactWriteItems", "PutItem"])
def test_a_landed_write_whose_retries_are_throttled_is_not_reported_refused(
    store: DynamoMetaStore, operation: str
) -> None:
    """The write lands, its response is lost, and every re-send is throttled. Throttling says a
    request was refused, not applied: the store re-read nothing and answered Throttling for a
    write that had landed, so a caller retrying it (a commit without a commit id) committed twice.
    Now the store reads back, finds its own write and reports success."""
    store.put_if_absent("t/a", b"old")
    ops = [Put("t/a", b"new", 1)] + ([Put("t/c", b"c", ABSENT)] if operation == "TransactWriteItems" else [])
    landed_then_throttled(store, (operation,))
    results = store.transact(ops)
    got = store.get("t/a")
    assert got is not None and (got.value, got.revision) == (b"new", 2)
    assert results[0] == got


def test_a_write_that_may_have_landed_is_never_reported_throttled(store: DynamoMetaStore) -> None:
    """As above, but the read-back is throttled too: the outcome is unknown, and the store says
    so (ServiceUnavailable, which callers resolve by their commit marker), not Throttling."""
    store.put_if_absent("t/a", b"old")
    landed_then_throttled(store, ("PutItem", "GetItem"))
    with pytest.raises(ServiceUnavailable, match="outcome unknown"):
        store.transact([Put("t/a", b"new", 1)])


# -- throttling ----------------------------------------------------------------------------------


def test_throttling_is_retried_then_reported(store: DynamoMetaStore, pauses: list[float]) -> None:
    sends: list[object] = []

    def throttle(request: AWSPreparedRequest, **_: Any) -> AWSResponse:
        sends.append(request.headers["X-Amz-Target"])
        return error_response(request, 400, "ThrottlingException")

    # botocore's retries={"total_max_attempts": 2}: 2 sends, times our 3 attempts.
    bounded = 2 * 3
    store.events.register("before-send.dynamodb", throttle)
    try:
        with pytest.raises(Throttling) as err:
            store.put_if_absent("k/a", b"v")
        assert err.value.retryable
        assert len(sends) == bounded
        sends.clear()
        with pytest.raises(Throttling):
            store.get("k/a")
        assert len(sends) == bounded
        assert len(pauses) == 2 * 2  # per call: we back off between our 3 attempts
    finally:
        store.events.unregister("before-send.dynamodb", throttle)
    assert store.get("k/a") is None  # nothing was written


def test_transient_throttling_is_absorbed(store: DynamoMetaStore) -> None:
    throttled: list[int] = []

    def throttle_three_times(request: AWSPreparedRequest, **_: Any) -> AWSResponse | None:
        if len(throttled) < 3:
            throttled.append(1)
            return error_response(request, 400, "ProvisionedThroughputExceededException")
        return None

    store.events.register("before-send.dynamodb.TransactWriteItems", throttle_three_times)
    results = store.transact([Put("k/a", b"a", ABSENT), Put("k/b", b"b", None)])
    assert len(throttled) == 3
    assert [i.revision for i in results if i] == [1, 1]


# -- reads and conditions ------------------------------------------------------------------------


def test_every_read_is_consistent(store: DynamoMetaStore) -> None:
    calls: list[tuple[str, dict[str, Any]]] = []

    def capture(params: dict[str, Any], model: Any, **_: Any) -> None:
        calls.append((model.name, dict(params)))

    store.events.register("provide-client-params.dynamodb", capture)
    store.transact([Put("c/a", b"1", ABSENT), Put("c/b", b"2", None)])  # reads revision back
    store.get("c/a")
    list(store.scan_prefix("c/"))
    list(store.scan_prefix("c"))  # no "/": the Scan fallback
    reads = [(name, params) for name, params in calls if name in ("GetItem", "Query", "Scan")]
    assert {name for name, _ in reads} == {"GetItem", "Query", "Scan"}
    assert all(params.get("ConsistentRead") is True for _, params in reads)
    transact = [params for name, params in calls if name == "TransactWriteItems"]
    assert len(transact) == 1 and transact[0]["ClientRequestToken"]


def test_failed_batch_names_the_failing_key(store: DynamoMetaStore) -> None:
    store.put_if_absent("t/a", b"a")
    with pytest.raises(ConditionFailed) as err:
        store.transact([Put("t/b", b"b", ABSENT), Put("t/a", b"a2", 7)])
    assert err.value.key == "t/a" and "found 1" in str(err.value)
    assert store.get("t/b") is None


# -- get_many: one TransactGetItems ---------------------------------------------------------------


def _count_calls(store: DynamoMetaStore) -> list[str]:
    calls: list[str] = []

    def count(model: Any, **_: Any) -> None:
        calls.append(model.name)

    store.events.register("before-call.dynamodb", count)
    return calls


def test_get_many_is_one_request(store: DynamoMetaStore) -> None:
    store.transact([Put("tbl/p/wh/ns/t", b"t", ABSENT), Put("ver/inc/00000000000000000001", b"v", ABSENT)])
    calls = _count_calls(store)
    got = store.get_many(["ver/inc/00000000000000000001", "tbl/p/wh/ns/none", "tbl/p/wh/ns/t"])
    assert calls == ["TransactGetItems"]  # layout 2 is final: no confirming read either
    assert [i.key if i else None for i in got] == ["ver/inc/00000000000000000001", None, "tbl/p/wh/ns/t"]
    calls.clear()
    assert store.get_many([]) == []
    for bad in (["k/a", "k/a"], "k/a", [""]):
        with pytest.raises(InvalidInput):
            store.get_many(bad)  # type: ignore[arg-type]
    assert calls == []


def _conflict(request: AWSPreparedRequest, items: int) -> AWSResponse:
    # What DynamoDB answers when a write to one of the items is in flight.
    reasons = [{"Code": "TransactionConflict", "Message": "Transaction is ongoing for the item"}]
    reasons += [{"Code": "None"}] * (items - 1)
    codes = ", ".join(r["Code"] for r in reasons)
    message = f"Transaction cancelled, please refer cancellation reasons for specific reasons [{codes}]"
    return error_response(
        request, 400, "TransactionCanceledException", message=message, CancellationReasons=reasons
    )


def test_get_many_retries_a_conflict_with_a_write_in_flight(
    store: DynamoMetaStore, pauses: list[float]
) -> None:
    store.transact([Put("k/a", b"a", ABSENT), Put("k/b", b"b", ABSENT)])
    sends: list[str] = []

    def conflict_twice(request: AWSPreparedRequest, **_: Any) -> AWSResponse | None:
        sends.append(request.headers["X-Amz-Target"].decode())
        return _conflict(request, 2) if len(sends) <= 2 else None

    store.events.register("before-send.dynamodb.TransactGetItems", conflict_twice)
    got = store.get_many(["k/a", "k/b"])
    assert [i.value for i in got if i] == [b"a", b"b"]
    assert sends == ["DynamoDB_20120810.TransactGetItems"] * 3
    assert len(pauses) == 2  # a backoff before each attempt again


def test_get_many_reports_lasting_conflicts_as_unavailable(
    store: DynamoMetaStore, pauses: list[float]
) -> None:
    sends: list[int] = []

    def conflict(request: AWSPreparedRequest, **_: Any) -> AWSResponse:
        sends.append(1)
        return _conflict(request, 2)

    store.events.register("before-send.dynamodb.TransactGetItems", conflict)
    with pytest.raises(ServiceUnavailable, match="conflicted with a write in flight") as err:
        store.get_many(["k/a", "k/b"])
    assert err.value.retryable
    assert len(sends) == 3  # our attempts; botocore does not retry a cancelled transaction
    assert len(pauses) == 2


def test_a_transaction_conflict_is_transient_for_reads_only() -> None:
    error = ClientError(
        {
            "Error": {"Code": "TransactionCanceledException", "Message": "cancelled [TransactionConflict]"},
            "CancellationReasons": [{"Code": "TransactionConflict"}],
            "ResponseMetadata": {"HTTPStatusCode": 400},
        },
        "TransactGetItems",
    )
    read = translate(error, (), "t")
    assert isinstance(read, ServiceUnavailable) and read.retryable
    # A write that lost a conflict stays a ConcurrentModification, as before.
    write = translate(error, [Put("k/a", b"x", ABSENT)], "t")
    assert type(write) is ConcurrentModification


def test_prefix_without_slash_matches_sqlite(store: DynamoMetaStore, tmp_path: Path) -> None:
    """Prefixes without "/" span partitions (a Scan fallback); results must equal the reference."""
    reference = SqliteMetaStore(tmp_path / "ref.db")
    keys = ["s", "s0", "s/1", "s/2", "sa/b", "sb", "t/x", "/lead", "r"]
    for key in keys:
        for backend in (store, reference):
            backend.put_if_absent(key, key.encode())
    try:
        for prefix, start_after, limit in [
            ("s", None, None),
            ("s", "s/1", 2),
            ("", None, 4),
            ("/", None, None),
            ("s/", "s/1", None),
            ("s/", "sa", None),
            ("s/", "r", 1),
        ]:
            expected = [i.key for i in reference.scan_prefix(prefix, start_after=start_after, limit=limit)]
            got = [i.key for i in store.scan_prefix(prefix, start_after=start_after, limit=limit)]
            assert got == expected, (prefix, start_after, limit)
    finally:
        reference.close()
