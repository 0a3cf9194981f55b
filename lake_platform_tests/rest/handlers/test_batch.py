"""BatchCreateTableVersions and BatchCommitTables over a real server: manifests pylance staged
for several tables land together in one registry transaction, or none does. pylance 14.0.2's
``RestNamespace`` does not send these operations (its methods raise Unsupported locally), so
the batch goes over HTTP with the CreateTableVersion bodies pylance staged."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import lance
import pyarrow as pa
import pytest
from lance_namespace_urllib3_client.models import (
    BatchCommitTablesResponse,
    BatchCreateTableVersionsResponse,
)

from lake_platform.catalog.idempotency import HEADER
from lake_platform.catalog.transaction import max_tables
from lake_platform.catalog.transaction_ops import OPS_PER_TABLE
from lake_platform.registry.dynamodb import DynamoMetaStore
from lake_platform.registry.dynamodb_admin import delete_table, init_table
from lake_platform.settings import load_settings
from lake_platform_tests.rest.clients import rest_namespace, rows
from lake_platform_tests.rest.conftest import RestLake, start_rest_lake
from lake_platform_tests.rest.handlers.staging import StagingOnly

BATCH_CREATE = "/v1/table/version/batch-create"
BATCH_COMMIT = "/v1/table/batch-commit"
TABLES = ("orders", "lines")


def tid(table: str) -> list[str]:
    return ["p", "w", "ns", table]


def stage(lake: RestLake, table: str, data: pa.Table) -> dict[str, Any]:
    """The CreateTableVersion body of an append of ``data`` to ``table``, staged, not committed."""
    ns = StagingOnly(rest_namespace(lake.url, lake.tokens["writer"]))
    with pytest.raises(Exception):  # noqa: B017, PT011 - the commit is kept on purpose (any message)
        lance.write_dataset(data, namespace_client=ns, table_id=tid(table), mode="append")
    assert ns.staged is not None
    return {k: v for k, v in ns.staged.items() if v is not None and k not in ("identity", "context")}


def ids_of(lake: RestLake, table: str) -> list[int]:
    """The table's ids as a REST reader's QueryTable answers them."""
    answer = lake.post(f"/v1/table/p$w$ns${table}/query", {"vector": {}, "k": 0}, who="reader")
    assert answer.status_code == 200, answer.text
    return sorted(pa.ipc.open_file(pa.BufferReader(answer.content)).read_all()["id"].to_pylist())


def version(lake: RestLake, table: str) -> int:
    return lake.catalog.reads.open_table(f"p.w.ns.{table}").version


@pytest.fixture
def lake(rest_lake: RestLake) -> RestLake:
    ns = rest_namespace(rest_lake.url, rest_lake.tokens["writer"])
    for table in TABLES:
        lance.write_dataset(rows([1, 2]), namespace_client=ns, table_id=tid(table), mode="create")
    return rest_lake


def test_two_tables_staged_by_pylance_land_together(lake: RestLake) -> None:
    entries = [stage(lake, "orders", rows([3])), stage(lake, "lines", rows([30, 31]))]
    assert [ids_of(lake, t) for t in TABLES] == [[1, 2], [1, 2]]  # a reader before sees none

    answer = lake.post(BATCH_CREATE, {"entries": entries})

    assert answer.status_code == 200, answer.text
    parsed = BatchCreateTableVersionsResponse.from_dict(answer.json())
    assert [v.version for v in parsed.versions] == [2, 2]
    assert parsed.transaction_id
    assert [ids_of(lake, t) for t in TABLES] == [[1, 2, 3], [1, 2, 30, 31]]  # after: all of it
    for table in TABLES:
        last = lake.catalog.reads.history(f"p.w.ns.{table}")[-1]
        assert (last.operation, last.detail["transaction"]) == ("append", parsed.transaction_id)
        # Published at the canonical path; the client's staging manifest is gone.
        location = lake.catalog.reads.open_table(f"p.w.ns.{table}").record.location
        assert [p for p in os.listdir(f"{location}/_versions") if ".manifest-" in p] == []


def test_batch_commit_tables_answers_one_result_per_operation(lake: RestLake) -> None:
    ops = [{"create_table_version": stage(lake, t, rows([9]))} for t in TABLES]
    answer = lake.post(BATCH_COMMIT, {"operations": ops})
    assert answer.status_code == 200, answer.text
    parsed = BatchCommitTablesResponse.from_dict(answer.json())
    assert [r.create_table_version.version.version for r in parsed.results] == [2, 2]
    assert [ids_of(lake, t) for t in TABLES] == [[1, 2, 9], [1, 2, 9]]


def test_a_missing_table_is_404_and_commits_nothing(lake: RestLake) -> None:
    entries = [stage(lake, "orders", rows([3])), {**stage(lake, "lines", rows([4])), "id": tid("nope")}]
    answer = lake.post(BATCH_CREATE, {"entries": entries})
    assert (answer.status_code, answer.json()["code"]) == (404, 4), answer.text
    assert (version(lake, "orders"), ids_of(lake, "orders")) == (1, [1, 2])


def test_a_conflict_on_one_table_is_409_and_commits_nothing(lake: RestLake) -> None:
    entries = [stage(lake, "orders", rows([3])), stage(lake, "lines", rows([4]))]
    ns = rest_namespace(lake.url, lake.tokens["writer"])
    lance.write_dataset(rows([5]), namespace_client=ns, table_id=tid("lines"), mode="append")  # v2 taken
    answer = lake.post(BATCH_CREATE, {"entries": entries})
    assert answer.status_code == 409, answer.text
    assert (version(lake, "orders"), ids_of(lake, "orders")) == (1, [1, 2])
    assert ids_of(lake, "lines") == [1, 2, 5]


def test_over_the_table_limit_is_400_naming_it(lake: RestLake) -> None:
    limit = max_tables(lake.catalog.ctx.store)
    entries = [
        {"id": tid(f"t{i}"), "version": 2, "manifest_path": "x/_versions/2.manifest"}
        for i in range(limit + 1)
    ]
    answer = lake.post(BATCH_CREATE, {"entries": entries})
    assert answer.status_code == 400, answer.text
    assert f"at most {limit} tables" in answer.json()["detail"]


def test_a_reader_may_not_commit(lake: RestLake) -> None:
    entries = [stage(lake, t, rows([3])) for t in TABLES]
    assert lake.post(BATCH_CREATE, {"entries": entries}, who="reader").status_code == 403
    assert [version(lake, t) for t in TABLES] == [1, 1]


def test_another_kind_of_operation_is_unsupported_and_commits_nothing(lake: RestLake) -> None:
    ops = [
        {"create_table_version": stage(lake, "orders", rows([3]))},
        {"deregister_table": {"id": tid("lines")}},
    ]
    answer = lake.post(BATCH_COMMIT, {"operations": ops})
    assert (answer.status_code, answer.json()["code"]) == (406, 0), answer.text
    assert version(lake, "orders") == 1


def test_a_retry_under_the_idempotency_key_answers_the_first_outcome(lake: RestLake) -> None:
    entries = [stage(lake, t, rows([3])) for t in TABLES]
    first = lake.post(BATCH_CREATE, {"entries": entries}, headers={HEADER: "pair-1"})
    assert first.status_code == 200, first.text
    again = lake.post(BATCH_CREATE, {"entries": entries}, headers={HEADER: "pair-1"})
    assert (again.status_code, again.json()) == (200, first.json())
    assert [(version(lake, t), ids_of(lake, t)) for t in TABLES] == [(2, [1, 2, 3])] * 2
    # The key reused for another set of tables: refused, nothing committed.
    other = lake.post(BATCH_CREATE, {"entries": entries[:1]}, headers={HEADER: "pair-1"})
    assert (other.status_code, other.json()["code"]) == (422, 13), other.text


def test_a_client_retry_that_staged_again_answers_the_first_outcome(lake: RestLake) -> None:
    """A retry of the whole write (new manifests, the same rows) lands nothing, its staging
    manifests are removed; other rows under the key are 422."""
    first = lake.post(
        BATCH_CREATE, {"entries": [stage(lake, t, rows([3])) for t in TABLES]}, headers={HEADER: "k"}
    )
    assert first.status_code == 200, first.text
    retry = [stage(lake, t, rows([3])) for t in TABLES]
    assert {e["manifest_path"] for e in retry}.isdisjoint(
        v["manifest_path"] for v in first.json()["versions"]
    )
    again = lake.post(BATCH_CREATE, {"entries": retry}, headers={HEADER: "k"})
    assert (again.status_code, again.json()) == (200, first.json())
    assert [(version(lake, t), ids_of(lake, t)) for t in TABLES] == [(2, [1, 2, 3])] * 2
    location = lake.catalog.reads.open_table("p.w.ns.orders").record.location
    assert [p for p in os.listdir(f"{location}/_versions") if ".manifest-" in p] == []
    other = [stage(lake, t, rows([4, 5])) for t in TABLES]
    answer = lake.post(BATCH_CREATE, {"entries": other}, headers={HEADER: "k"})
    assert (answer.status_code, answer.json()["code"]) == (422, 13), answer.text
    assert [version(lake, t) for t in TABLES] == [2, 2]


def test_a_batch_over_one_dynamodb_transactions_tables_lands_whole(tmp_path: Path, dynamodb_url: str) -> None:
    """20 tables on DynamoDB (moto): more than one TransactWriteItems holds (19 tables), so the
    batch commits over several registry writes (``transaction_chunks``); a reader sees all of it."""
    names = [f"t{i:02}" for i in range(20)]
    settings = load_settings(home=tmp_path / "home", registry_url=dynamodb_url)
    init_table(dynamodb_url, settings)
    try:
        for lake in start_rest_lake(tmp_path, registry_url=dynamodb_url):
            store = lake.catalog.ctx.store
            assert store.max_transact_ops // OPS_PER_TABLE < len(names) <= max_tables(store)
            ns = rest_namespace(lake.url, lake.tokens["writer"])
            for name in names:
                lance.write_dataset(rows([1]), namespace_client=ns, table_id=tid(name), mode="create")
            entries = [stage(lake, name, rows([100 + i])) for i, name in enumerate(names)]
            answer = lake.post(BATCH_CREATE, {"entries": entries})
            assert answer.status_code == 200, answer.text
            parsed = BatchCreateTableVersionsResponse.from_dict(answer.json())
            assert [v.version for v in parsed.versions] == [2] * len(names)
            assert [ids_of(lake, name) for name in names] == [[1, 100 + i] for i in range(len(names))]
    finally:
        store = DynamoMetaStore.from_url(dynamodb_url, settings)
        delete_table(store)
        store.close()
