"""Safe retries over REST: a commit made under an idempotency key (the ``Idempotency-Key``
header, or the ``idempotency-key`` Lance transaction property) lands once, and a retry answers
what the first answered; another key lands again; the key reused for another request is 422.
ListTableVersions pages, and lists what DescribeTable shows of a table a multi-table commit left
behind its head (its writer stopped after the commit point), never a commit before that point."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import lance
import pyarrow as pa
import pytest
from lance.namespace import RestNamespace

from lake_platform.catalog.catalog import Catalog
from lake_platform.catalog.idempotency import HEADER
from lake_platform.catalog.transaction import Transaction
from lake_platform.naming import TableName
from lake_platform_tests.catalog.conftest import rows as catalog_rows
from lake_platform_tests.catalog.test_transaction_chunks import SMALL, SOME, stop_at, transaction_records
from lake_platform_tests.rest.clients import rest_namespace, rows
from lake_platform_tests.rest.conftest import RestLake, rest_settings, start_rest_lake
from lake_platform_tests.rest.handlers.events import TP, T
from lake_platform_tests.rest.handlers.staging import StagingOnly


def stage(lake: RestLake, data: pa.Table, **kwargs: Any) -> dict[str, Any]:
    """The CreateTableVersion body of an append of ``data``, staged but not committed."""
    ns = StagingOnly(rest_namespace(lake.url, lake.tokens["writer"]))
    try:
        lance.write_dataset(data, namespace_client=ns, table_id=T, mode="append", **kwargs)
    except Exception:  # noqa: BLE001 - the commit was kept on purpose
        pass
    assert ns.staged is not None
    return ns.staged


def commit(lake: RestLake, body: dict[str, Any], key: str | None) -> Any:
    headers = {} if key is None else {HEADER: key}
    return lake.post(f"/v1/table/{TP}/version/create", body, headers=headers)


def table_ids(lake: RestLake) -> list[int]:
    return sorted(lake.catalog.reads.open_table("p.w.ns.events").dataset.to_table()["id"].to_pylist())


def version(lake: RestLake) -> int:
    return lake.catalog.reads.open_table("p.w.ns.events").version


@pytest.fixture
def events(rest_lake: RestLake) -> RestLake:
    """Version 1: ids 1-2 (this module's own table, not the conftest's 1-3)."""
    ns = rest_namespace(rest_lake.url, rest_lake.tokens["writer"])
    lance.write_dataset(rows([1, 2]), namespace_client=ns, table_id=T, mode="create")
    return rest_lake


def test_the_same_commit_sent_twice_with_one_key_lands_once_and_answers_the_same(events: RestLake) -> None:
    body = stage(events, rows([3]))
    first = commit(events, body, "batch-0001")
    assert first.status_code == 200, first.text
    again = commit(events, body, "batch-0001")
    assert again.status_code == 200, again.text
    assert again.json() == first.json()
    assert (version(events), table_ids(events)) == (2, [1, 2, 3])
    # Without a key the resend is refused (its manifest was published), never committed again.
    assert commit(events, body, None).status_code >= 400
    assert table_ids(events) == [1, 2, 3]


def test_another_key_lands_again(events: RestLake) -> None:
    assert commit(events, stage(events, rows([3])), "batch-a").status_code == 200
    assert commit(events, stage(events, rows([3])), "batch-b").status_code == 200
    assert (version(events), table_ids(events)) == (3, [1, 2, 3, 3])


def test_a_client_retry_with_the_key_header_applies_the_batch_once(events: RestLake) -> None:
    """pylance sends the namespace's ``header.*`` properties on every request: a retry of the
    whole write (new data files, a new staged manifest numbered after the first) is answered
    with the first outcome, and its staging manifest is removed."""
    keyed = RestNamespace(
        uri=events.url,
        **{"header.Authorization": events.headers()["Authorization"], f"header.{HEADER}": "load-2026-12-06"},
    )
    lance.write_dataset(rows(list(range(10, 20))), namespace_client=keyed, table_id=T, mode="append")
    lance.write_dataset(rows(list(range(10, 20))), namespace_client=keyed, table_id=T, mode="append")
    assert version(events) == 2
    assert table_ids(events) == [1, 2, *range(10, 20)]
    location = events.catalog.reads.open_table("p.w.ns.events").record.location
    staging = [p for p in os.listdir(f"{location}/_versions") if ".manifest-" in p]
    assert staging == []


def test_a_client_retry_with_the_key_as_a_transaction_property_applies_the_batch_once(
    events: RestLake,
) -> None:
    ns = rest_namespace(events.url, events.tokens["writer"])
    props = {"Idempotency-Key": "nightly-42"}
    for _ in range(2):
        lance.write_dataset(
            rows([7, 8]), namespace_client=ns, table_id=T, mode="append", transaction_properties=props
        )
    assert (version(events), table_ids(events)) == (2, [1, 2, 7, 8])
    keyed = [e for e in events.catalog.reads.history("p.w.ns.events") if e.detail.get("idempotency_key")]
    assert [(e.operation, e.detail["idempotency_key"], e.rows_added) for e in keyed] == [
        ("append", "nightly-42", 2)
    ]


def test_a_key_reused_for_another_request_is_422_and_commits_nothing(events: RestLake) -> None:
    assert commit(events, stage(events, rows([3])), "reused-key").status_code == 200
    other = commit(events, stage(events, rows([4, 5])), "reused-key")
    assert (other.status_code, other.json()["code"]) == (422, 13), other.text
    assert "reused-key" in other.json()["detail"]
    assert (version(events), table_ids(events)) == (2, [1, 2, 3])


def test_a_key_reused_on_another_table_is_422(events: RestLake) -> None:
    ns = rest_namespace(events.url, events.tokens["writer"])
    lance.write_dataset(rows([1]), namespace_client=ns, table_id=["p", "w", "ns", "other"], mode="create")
    assert commit(events, stage(events, rows([3])), "one-key").status_code == 200
    other_ns = StagingOnly(ns)
    try:
        lance.write_dataset(
            rows([3]), namespace_client=other_ns, table_id=["p", "w", "ns", "other"], mode="append"
        )
    except Exception:  # noqa: BLE001
        pass
    assert other_ns.staged is not None
    answer = events.post(
        "/v1/table/p$w$ns$other/version/create", other_ns.staged, headers={HEADER: "one-key"}
    )
    assert answer.status_code == 422, answer.text


def test_keys_are_the_callers_own(events: RestLake) -> None:
    """Another principal's identical key is another commit (keys never meet across callers)."""
    events.catalog.access.create_token("etl2", project="p", role="writer")
    token2 = events.catalog.access.create_token("etl3", project="p", role="writer")[1]
    assert commit(events, stage(events, rows([3])), "shared-name").status_code == 200
    body = stage(events, rows([3]))
    answer = events.post(
        f"/v1/table/{TP}/version/create",
        body,
        headers={HEADER: "shared-name", "Authorization": f"Bearer {token2}"},
    )
    assert answer.status_code == 200, answer.text
    assert table_ids(events) == [1, 2, 3, 3]


def test_a_malformed_key_is_400(events: RestLake) -> None:
    answer = commit(events, stage(events, rows([3])), "x" * 300)
    assert (answer.status_code, answer.json()["code"]) == (400, 13)
    assert version(events) == 1


def test_declare_with_a_key_answers_the_first_outcome_again(rest_lake: RestLake) -> None:
    path = "/v1/table/p$w$ns$declared/declare"
    first = rest_lake.post(path, {}, headers={HEADER: "declare-1"})
    assert first.status_code == 200, first.text
    again = rest_lake.post(path, {}, headers={HEADER: "declare-1"})
    assert (again.status_code, again.json()) == (200, first.json())
    assert rest_lake.post(path, {}).status_code == 409  # without the key: it exists
    other = rest_lake.post("/v1/table/p$w$ns$elsewhere/declare", {}, headers={HEADER: "declare-1"})
    assert other.status_code == 422, other.text


def start_server(home: Path, port: int, kill_at: str) -> subprocess.Popen[str]:
    server = subprocess.Popen(
        [sys.executable, "-m", "lake_platform_tests.rest.killed_server", str(home), str(port), kill_at],
        stdout=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        text=True,
    )
    assert server.stdout is not None and server.stdout.readline().strip() == "ready"
    return server


def test_a_retry_after_the_server_was_killed_past_the_commit_applies_the_batch_once(tmp_path: Path) -> None:
    """The issue's failure: the server dies after the commit landed, before it answers; the
    client cannot know the outcome and retries the whole write with its key."""
    settings = rest_settings(tmp_path / "home")
    catalog = Catalog(settings)
    catalog.containers.create_project("p")
    catalog.containers.create_warehouse("p.w")
    catalog.containers.create_namespace("p.w.ns")
    token = catalog.access.create_token("etl", project="p", role="writer")[1]
    catalog.tables.create_table("p.w.ns.events", rows([0]).to_reader())
    url = f"http://127.0.0.1:{settings.rest_port}"
    client = RestNamespace(
        uri=url, **{"header.Authorization": f"Bearer {token}", f"header.{HEADER}": "batch-7"}
    )
    batch = rows(list(range(1, 20_001)))
    server = start_server(tmp_path / "home", settings.rest_port, "append:before-finalize")
    try:
        with pytest.raises(Exception):  # noqa: B017 - the connection dies: pylance's own error
            lance.write_dataset(batch, namespace_client=client, table_id=T, mode="append")
        assert server.wait(timeout=60) == -signal.SIGKILL
        assert catalog.reads.open_table("p.w.ns.events").count_rows() == 20_001  # it had landed
        server = start_server(tmp_path / "home", settings.rest_port, "never")
        lance.write_dataset(batch, namespace_client=client, table_id=T, mode="append")  # the retry
        snap = catalog.reads.open_table("p.w.ns.events")
        assert (snap.version, snap.count_rows()) == (2, 20_001)
    finally:
        if server.poll() is None:
            server.terminate()
            server.wait(timeout=30)
        catalog.close()


def test_versions_page_by_the_last_version_answered(events: RestLake) -> None:
    """limit=1 pages carry a page_token until the last, in either order; each version once."""
    for _ in range(2):
        events.catalog.alter.add_column("p.w.ns.events", f"c{_}", "int32")
    for descending in (False, True):
        seen, token = [], None
        while True:
            body = {"limit": 1, "descending": descending, **({"page_token": token} if token else {})}
            answer = events.post(f"/v1/table/{TP}/version/list", body, who="reader").json()
            seen += [v["version"] for v in answer["versions"]]
            token = answer.get("page_token")
            if not token:
                break
        assert seen == ([3, 2, 1] if descending else [1, 2, 3])
    # A token is a version this server handed out: anything else is 400, never a 500 from int()
    # ("²" and "٣" are str.isdigit(); past 4,300 digits int() refuses the text).
    for token in ("x", "\u00b2", "\u0663", "9" * 5000, "99999999999999999999"):
        bad = events.post(f"/v1/table/{TP}/version/list", {"limit": 1, "page_token": token}, who="reader")
        assert (bad.status_code, bad.json()["code"]) == (400, 13), (token[:20], bad.text)


def chunked_tables(lake: RestLake, prefix: str) -> list[str]:
    """``SOME`` tables at version 1, as many as a commit of ``SMALL`` operations a registry write
    spreads over several writes (``catalog.transaction_chunks``)."""
    names = [f"p.w.ns.{prefix}{i:02d}" for i in range(SOME)]
    for i, name in enumerate(names):
        lake.catalog.tables.create_table(name, catalog_rows([i]))
    return names


def commit_all(lake: RestLake, names: list[str], hook: Any) -> None:
    """Version 2 of every table of ``names`` in one multi-table commit, ``hook`` at its points."""
    with Catalog(lake.settings, hook=hook) as writer, Transaction(writer.tables, max_ops=SMALL) as tx:
        for i, name in enumerate(names):
            tx.append(name, catalog_rows([1000 + i]))


def lagging_tables(lake: RestLake, prefix: str) -> list[str]:
    """``chunked_tables`` and a commit of version 2 to each, its writer stopped right after the
    commit point: committed, and no table's head moved yet."""
    names = chunked_tables(lake, prefix)
    with pytest.raises(SystemExit):
        commit_all(lake, names, stop_at("transaction:committed", 1))
    assert {lake.catalog.ctx.table(TableName.parse(n))[0].current_version for n in names} == {1}
    return names


def listed(lake: RestLake, name: str, body: dict[str, Any]) -> list[int]:
    path = f"/v1/table/{name.replace('.', '$')}/version/list"
    answer = lake.post(path, body, who="reader")
    assert answer.status_code == 200, answer.text
    return [v["version"] for v in answer.json()["versions"]]


def described(lake: RestLake, name: str) -> int:
    return lake.post(f"/v1/table/{name.replace('.', '$')}/describe", {}, who="reader").json()["version"]


def test_versions_of_a_table_a_committed_commit_lags_include_its_version(rest_lake: RestLake) -> None:
    """Every listing of a lagging table shows the committed version, as DescribeTable does
    (listed first: the read completes the commit, moving every head)."""
    names = lagging_tables(rest_lake, "a")
    assert listed(rest_lake, names[5], {}) == [1, 2]
    assert described(rest_lake, names[5]) == 2
    # Lance's "which is the latest?" before each commit: one version, descending.
    names = lagging_tables(rest_lake, "b")
    assert listed(rest_lake, names[5], {"limit": 1, "descending": True}) == [2]
    assert described(rest_lake, names[5]) == 2
    names = lagging_tables(rest_lake, "c")
    assert listed(rest_lake, names[7], {"descending": True}) == [2, 1]
    assert [described(rest_lake, n) for n in names] == [2] * SOME


def test_versions_never_include_a_commit_before_its_commit_point(rest_lake: RestLake) -> None:
    names = chunked_tables(rest_lake, "d")
    seen: list[tuple[list[int], list[int], int]] = []

    def look(at: str) -> None:
        # Every version registered above its head, the record still pending.
        if at == "transaction:chunk-registered" and not seen:
            (record,) = transaction_records(rest_lake.catalog)
            if len(record.tables) == SOME and record.state == "pending":
                last = names[-1]
                body = {"limit": 1, "descending": True}
                seen.append(
                    (listed(rest_lake, last, {}), listed(rest_lake, last, body), described(rest_lake, last))
                )

    commit_all(rest_lake, names, look)
    assert seen == [([1], [1], 1)]
    assert listed(rest_lake, names[-1], {}) == [1, 2]


def test_a_page_of_versions_reads_about_one_page(tmp_path: Path) -> None:
    """ListTableVersions read every version record of the table to answer one page, then cut it;
    a page reads about one page, newest first with ``descending`` as the spec guarantees."""
    from lake_platform_tests.catalog.registry_calls import RegistryCalls
    from lake_platform_tests.registry.catalog_records import write_catalog

    calls: list[RegistryCalls] = []
    for lake in start_rest_lake(tmp_path, store=lambda s: calls.append(RegistryCalls(s)) or calls[0]):
        write_catalog(lake.catalog.store, "p", namespaces=1, per_namespace=1, versions=200)
        for descending in (False, True):
            seen: list[int] = []
            token: str | None = None
            for _ in range(20):
                calls[0].items_scanned = 0
                body = {"limit": 20, "descending": descending, **({"page_token": token} if token else {})}
                answer = lake.post("/v1/table/p$w$ns00000$t0000/version/list", body, who="reader")
                assert answer.status_code == 200, answer.text
                assert calls[0].items_scanned <= 22, (descending, len(seen))
                seen, token = (
                    seen + [v["version"] for v in answer.json()["versions"]],
                    answer.json()["page_token"],
                )
                if token is None:
                    break
            assert seen == sorted(range(1, 201), reverse=descending)
