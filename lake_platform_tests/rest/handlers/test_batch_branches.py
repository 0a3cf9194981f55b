"""BatchCreateTableVersions and BatchCommitTables with entries on a branch (issue 46): manifests
pylance staged on main of one table and on branch ``dev`` of another land in one registry
transaction, each on its own line (the branch's record its head, under its lease), or none
does; main of the branched table never moves."""

from __future__ import annotations

import os
from typing import Any

import lance
import pyarrow as pa
import pytest
from lance_namespace_urllib3_client.models import BatchCreateTableVersionsResponse

from lake_platform.catalog.idempotency import HEADER
from lake_platform.naming import TableName
from lake_platform.registry import keys
from lake_platform_tests.rest.clients import rest_namespace, rows
from lake_platform_tests.rest.conftest import RestLake
from lake_platform_tests.rest.handlers.staging import StagingOnly
from lake_platform_tests.rest.handlers.test_batch import BATCH_COMMIT, BATCH_CREATE, ids_of, stage, tid
from lake_platform_tests.rest.handlers.test_branch_changes import OnBranch

TABLES = ("orders", "lines")


def stage_on(lake: RestLake, table: str, branch: str, data: pa.Table) -> dict[str, Any]:
    """The CreateTableVersion body of an append of ``data`` to ``branch`` of ``table``, staged
    by pylance in the branch's dataset, not committed."""
    ns = StagingOnly(OnBranch(rest_namespace(lake.url, lake.tokens["writer"]), branch))
    with pytest.raises(Exception):  # noqa: B017, PT011 - the commit is kept on purpose (any message)
        lance.write_dataset(data, namespace_client=ns, table_id=tid(table), mode="append")
    assert ns.staged is not None
    kept = {k: v for k, v in ns.staged.items() if v is not None and k not in ("identity", "context")}
    return {**kept, "branch": branch}


def branch_ids(lake: RestLake, table: str, branch: str = "dev") -> list[int]:
    body = {"vector": {}, "k": 0, "branch": branch}
    answer = lake.post(f"/v1/table/p$w$ns${table}/query", body, who="reader")
    assert answer.status_code == 200, answer.text
    return sorted(pa.ipc.open_file(pa.BufferReader(answer.content)).read_all()["id"].to_pylist())


def heads(lake: RestLake) -> dict[str, int]:
    """Every line's head: main of both tables, branch dev of both."""
    out = {}
    for table in TABLES:
        name = TableName.parse(f"p.w.ns.{table}")
        out[table] = lake.catalog.reads.open_table(str(name)).version
        out[f"{table}@dev"] = lake.catalog.branches.branch(name, "dev")[0].current_version
    return out


@pytest.fixture
def lake(rest_lake: RestLake) -> RestLake:
    """Both tables at version 1 (ids 1, 2), each with branch dev made there."""
    ns = rest_namespace(rest_lake.url, rest_lake.tokens["writer"])
    for table in TABLES:
        lance.write_dataset(rows([1, 2]), namespace_client=ns, table_id=tid(table), mode="create")
        rest_lake.catalog.branches.create_branch(f"p.w.ns.{table}", "dev")
    return rest_lake


def test_main_of_one_table_and_a_branch_of_another_land_together(lake: RestLake) -> None:
    entries = [stage(lake, "orders", rows([3])), stage_on(lake, "lines", "dev", rows([30, 31]))]
    assert (ids_of(lake, "orders"), branch_ids(lake, "lines")) == ([1, 2], [1, 2])  # none before

    answer = lake.post(BATCH_CREATE, {"entries": entries})

    assert answer.status_code == 200, answer.text
    parsed = BatchCreateTableVersionsResponse.from_dict(answer.json())
    assert [v.version for v in parsed.versions] == [2, 2]
    assert heads(lake) == {"orders": 2, "orders@dev": 1, "lines": 1, "lines@dev": 2}
    assert (ids_of(lake, "orders"), branch_ids(lake, "lines")) == ([1, 2, 3], [1, 2, 30, 31])
    assert (ids_of(lake, "lines"), branch_ids(lake, "orders")) == ([1, 2], [1, 2])  # untouched
    on_branch = lake.catalog.reads.log("p.w.ns.lines")[-1]
    assert (on_branch.operation, on_branch.to_version, on_branch.detail["branch"]) == ("append", 2, "dev")
    assert on_branch.detail["transaction"] == parsed.transaction_id
    on_main = lake.catalog.reads.log("p.w.ns.orders")[-1]
    assert on_main.detail["transaction"] == parsed.transaction_id and "branch" not in on_main.detail
    # The branch's version is published at its canonical path in the branch's dataset, and the
    # branch record took the new head (its own chain; main's record did not move).
    rec, _ = lake.catalog.branches.branch(TableName.parse("p.w.ns.lines"), "dev")
    assert [p for p in os.listdir(f"{rec.location}/_versions") if ".manifest-" in p] == []
    assert lake.catalog.ctx.store.get(keys.version(rec.incarnation, 2)) is not None


def test_main_and_a_branch_of_one_table_are_two_lines(lake: RestLake) -> None:
    ops = [
        {"create_table_version": stage_on(lake, "orders", "dev", rows([7]))},
        {"create_table_version": stage(lake, "orders", rows([8]))},
    ]
    answer = lake.post(BATCH_COMMIT, {"operations": ops})
    assert answer.status_code == 200, answer.text
    assert [r["create_table_version"]["version"]["version"] for r in answer.json()["results"]] == [2, 2]
    assert (ids_of(lake, "orders"), branch_ids(lake, "orders")) == ([1, 2, 8], [1, 2, 7])


def test_two_entries_on_one_branch_are_refused_and_commit_nothing(lake: RestLake) -> None:
    entry = stage_on(lake, "lines", "dev", rows([5]))
    answer = lake.post(BATCH_CREATE, {"entries": [stage(lake, "orders", rows([3])), entry, entry]})
    assert (answer.status_code, answer.json()["code"]) == (400, 13), answer.text
    assert "p.w.ns.lines@dev" in answer.json()["detail"]
    assert heads(lake) == {"orders": 1, "orders@dev": 1, "lines": 1, "lines@dev": 1}


def test_a_version_taken_on_the_branch_commits_nothing_on_any_line(lake: RestLake) -> None:
    entries = [stage(lake, "orders", rows([3])), stage_on(lake, "lines", "dev", rows([4]))]
    ns = OnBranch(rest_namespace(lake.url, lake.tokens["writer"]), "dev")
    lance.write_dataset(rows([5]), namespace_client=ns, table_id=tid("lines"), mode="append")  # dev's v2

    answer = lake.post(BATCH_CREATE, {"entries": entries})

    assert answer.status_code == 409, answer.text
    assert heads(lake) == {"orders": 1, "orders@dev": 1, "lines": 1, "lines@dev": 2}
    assert (ids_of(lake, "orders"), branch_ids(lake, "lines")) == ([1, 2], [1, 2, 5])


def test_a_version_skipped_on_the_branch_commits_nothing_on_any_line(lake: RestLake) -> None:
    """The manifest Lance staged as the branch's version 2 sent as 3: refused for what it is
    (ebd0e35: a manifest is committed as the version it was written as) before the branch's
    head is looked at."""
    entries = [stage(lake, "orders", rows([3])), {**stage_on(lake, "lines", "dev", rows([4])), "version": 3}]
    before = (
        heads(lake),
        len(lake.catalog.reads.log("p.w.ns.lines")),
        len(lake.catalog.reads.log("p.w.ns.orders")),
    )

    answer = lake.post(BATCH_CREATE, {"entries": entries})

    assert (answer.status_code, answer.json()["code"]) == (400, 13), answer.text
    assert "is version 2 of the table, not 3" in answer.json()["detail"]
    after = (
        heads(lake),
        len(lake.catalog.reads.log("p.w.ns.lines")),
        len(lake.catalog.reads.log("p.w.ns.orders")),
    )
    assert after == before
    assert (ids_of(lake, "orders"), branch_ids(lake, "lines")) == ([1, 2], [1, 2])


def test_a_missing_branch_is_404_and_commits_nothing(lake: RestLake) -> None:
    entries = [
        stage(lake, "orders", rows([3])),
        {**stage_on(lake, "lines", "dev", rows([4])), "branch": "nope"},
    ]
    answer = lake.post(BATCH_CREATE, {"entries": entries})
    assert (answer.status_code, answer.json()["code"]) == (404, 22), answer.text
    assert heads(lake) == {"orders": 1, "orders@dev": 1, "lines": 1, "lines@dev": 1}


def test_a_manifest_outside_the_branchs_dataset_is_refused(lake: RestLake) -> None:
    """The entry names branch dev, but its manifest was staged in main's dataset."""
    entries = [stage(lake, "orders", rows([3])), {**stage(lake, "lines", rows([4])), "branch": "dev"}]
    answer = lake.post(BATCH_CREATE, {"entries": entries})
    assert (answer.status_code, answer.json()["code"]) == (400, 13), answer.text
    assert heads(lake) == {"orders": 1, "orders@dev": 1, "lines": 1, "lines@dev": 1}


def test_a_reader_may_not_commit_on_a_branch(lake: RestLake) -> None:
    entries = [stage_on(lake, "lines", "dev", rows([4]))]
    assert lake.post(BATCH_CREATE, {"entries": entries}, who="reader").status_code == 403
    assert heads(lake)["lines@dev"] == 1


def test_a_retry_under_the_idempotency_key_answers_the_first_outcome(lake: RestLake) -> None:
    entries = [stage(lake, "orders", rows([3])), stage_on(lake, "lines", "dev", rows([4]))]
    first = lake.post(BATCH_CREATE, {"entries": entries}, headers={HEADER: "mixed-1"})
    assert first.status_code == 200, first.text
    again = lake.post(BATCH_CREATE, {"entries": entries}, headers={HEADER: "mixed-1"})
    assert (again.status_code, again.json()) == (200, first.json())
    # A client's retry that staged again (same rows) lands nothing either.
    retry = [stage(lake, "orders", rows([3])), stage_on(lake, "lines", "dev", rows([4]))]
    resent = lake.post(BATCH_CREATE, {"entries": retry}, headers={HEADER: "mixed-1"})
    assert (resent.status_code, resent.json()) == (200, first.json())
    assert heads(lake) == {"orders": 2, "orders@dev": 1, "lines": 1, "lines@dev": 2}
    assert (ids_of(lake, "orders"), branch_ids(lake, "lines")) == ([1, 2, 3], [1, 2, 4])
