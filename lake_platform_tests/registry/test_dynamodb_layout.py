"""DynamoDB item layouts: load spread per table (layout 2), and `lake registry migrate` from the
layout of older releases, against the session's DynamoDB-API server (moto on loopback)."""

from __future__ import annotations

import json
import threading
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from lake_platform.errors import ConditionFailed, ServiceUnavailable
from lake_platform.registry.dynamodb import DynamoMetaStore
from lake_platform.registry.dynamodb_admin import delete_table, init_table
from lake_platform.registry.dynamodb_layout import (
    CURRENT,
    FROZEN,
    LAYOUT_P,
    LEGACY,
    partition_of,
    partition_v1,
    scan_partitions,
)
from lake_platform.registry.dynamodb_migrate import migrate
from lake_platform.registry.store import ABSENT, Check, Put
from lake_platform.settings import LakeSettings
from lake_platform_tests.conftest import dynamodb_client, make_layout1
from lake_platform_tests.servers import SLOW_IO


def _settings(url: str, tmp_path: Path) -> LakeSettings:
    # The migration Scans the whole table: moto under load overran the default 1 s per request
    # (the interrupted migration failed with 'Read timeout' instead of Interrupted).
    return LakeSettings(_env_file=None, home=tmp_path / "home", registry_url=url, **SLOW_IO)  # type: ignore[call-arg,arg-type]


@pytest.fixture
def opener(dynamodb_url: str, tmp_path: Path) -> Iterator[Any]:
    """Opens independent stores (separate clients, separate cached layouts) on one new table."""
    settings = _settings(dynamodb_url, tmp_path)
    init_table(dynamodb_url, settings)
    opened: list[DynamoMetaStore] = []

    def open_store() -> DynamoMetaStore:
        opened.append(DynamoMetaStore.from_url(dynamodb_url, settings))
        return opened[-1]

    yield open_store
    delete_table(opened[0]) if opened else None
    for store in opened:
        store.close()


def _raw(store: DynamoMetaStore) -> list[tuple[str, str]]:
    """Every item's (partition, key), read with a client of our own."""
    client = dynamodb_client(store.url)
    items: list[tuple[str, str]] = []
    params: dict[str, Any] = {"TableName": store.table, "ConsistentRead": True}
    while True:
        resp = client.scan(**params)
        items += [(r["p"]["S"], r["k"]["S"]) for r in resp["Items"]]
        if "LastEvaluatedKey" not in resp:
            return sorted(items)
        params["ExclusiveStartKey"] = resp["LastEvaluatedKey"]


def _commit(store: DynamoMetaStore, table: int, version: int) -> None:
    """The shape of a catalog version commit (see bench/commits.py)."""
    inc, dotted = f"inc{table:03d}", f"p.wh.ns.t{table}"
    store.transact(
        [
            Put(f"ver/{inc}/{version:020d}", b"version", ABSENT),
            Put(f"tbl/p/wh/ns/t{table}", f"v{version}".encode(), None),
            Put(f"log/{dotted}/{version:015d}-c{table}x{version}-000", b"entry", ABSENT),
            Put(f"cid/c{table}x{version}", b"marker", ABSENT),
            Put(f"lse/{inc}", b"lease", None),
        ]
    )


def _everything(store: DynamoMetaStore) -> dict[str, tuple[bytes, int]]:
    prefixes = ["prj/", "whs/", "tbl/", "log/", "cid/", "trs/", "rpt/", "usr/", "chg/"]
    prefixes += [f"ver/inc{t:03d}/" for t in range(6)] + [f"lse/inc{t:03d}" for t in range(6)]
    return {i.key: (i.value, i.revision) for p in prefixes for i in store.scan_prefix(p)}


def _populate(store: DynamoMetaStore) -> None:
    store.put_if_absent("prj/p", b"project")
    store.put_if_absent("whs/p/wh", b"warehouse")
    store.put_if_absent("usr/ann", b"user")
    store.put_if_absent("trs/p.wh.ns.old/000000000000001-incold", b"trash")
    store.put_if_absent("rpt/orphans/p.wh.ns.t1/000000000000001", b"report")
    for table in range(6):
        for version in range(1, 4):
            _commit(store, table, version)


# -- layout 2 spreads the load -------------------------------------------------------------------


def test_layout2_partitions_follow_the_scans() -> None:
    versions = {partition_of(f"ver/inc{i}/{1:020d}") for i in range(50)}
    assert len(versions) == 50  # one partition per incarnation
    tables = {partition_of(f"tbl/p/wh/ns/t{i}") for i in range(50)}
    assert 8 <= len(tables) <= 16  # hashed buckets
    assert partition_of("prj/p") == partition_v1("prj/p") == "prj"  # small kinds stay
    # A prefix that pins a group is one partition, the one its keys live in.
    assert scan_partitions("ver/inc7/") == [partition_of(f"ver/inc7/{3:020d}")]
    assert scan_partitions("log/p.wh.ns.t/") == [partition_of("log/p.wh.ns.t/000000000000001-c-000")]
    assert scan_partitions("tbl/p/wh/ns/") is not None and len(scan_partitions("tbl/p/wh/ns/")) == 16
    assert scan_partitions("ver/") is None and scan_partitions("ver") is None  # Scan fallback


def test_commits_on_many_tables_write_many_partitions(opener: Any) -> None:
    store = opener()
    assert store.layout() == CURRENT  # `lake registry init` makes layout 2
    for table in range(20):
        _commit(store, table, 1)
    by_kind: dict[str, set[str]] = {}
    for p, k in _raw(store):
        if p != LAYOUT_P:
            by_kind.setdefault(k.split("/")[0], set()).add(p)
    assert len(by_kind["ver"]) == 20 and len(by_kind["lse"]) == 20
    for kind in ("tbl", "log", "cid", "chg"):  # chg: the change feed, a partition per shard
        assert len(by_kind[kind]) >= 8, kind


# -- layout 1 and the migration ------------------------------------------------------------------


def test_migrate_moves_every_item_and_keeps_every_answer(opener: Any) -> None:
    store = opener()
    make_layout1(store)
    _populate(store)
    assert all(p == partition_v1(k) for p, k in _raw(store))  # the old layout: one partition per kind
    before = _everything(store)
    moving = sum(1 for k in before if partition_of(k) != partition_v1(k))

    report = migrate(store)
    assert (report.layout_before, report.layout_after) == (LEGACY, CURRENT)
    assert report.copied == report.originals_removed == moving > 60
    assert all(p == partition_of(k) for p, k in _raw(store) if p != LAYOUT_P)
    fresh = opener()
    assert fresh.layout() == CURRENT
    assert _everything(fresh) == _everything(store) == before
    # Idempotent: a second run finds nothing to move.
    again = migrate(store)
    assert (again.copied, again.originals_removed, again.layout_before) == (0, 0, CURRENT)
    _commit(fresh, 0, 4)
    assert fresh.get(f"ver/inc000/{4:020d}") is not None


def test_interrupted_migration_freezes_writes_and_resumes(opener: Any) -> None:
    store, stale = opener(), opener()
    make_layout1(store)
    _populate(store)
    assert stale.layout(refresh=True) == LEGACY  # a client that read the layout before the freeze
    before = _everything(store)

    class Interrupted(Exception):
        pass

    def crash_mid_copy(step: str) -> None:
        if step.startswith("copy: copying"):
            raise Interrupted

    with pytest.raises(Interrupted):
        migrate(store, on_step=crash_mid_copy)
    assert store.layout(refresh=True) == FROZEN
    # No write lands while frozen: not from a client that knows, not from a stale layout-1 client
    # (its layout guard fails); both are told to retry. Reads go on, unchanged.
    for client in (opener(), stale):
        with pytest.raises(ServiceUnavailable, match="being migrated") as err:
            client.compare_and_swap("tbl/p/wh/ns/t1", 3, b"lost")
        assert err.value.retryable
        assert _everything(client) == before
    report = migrate(store)  # resumes
    assert (report.layout_before, report.layout_after) == (FROZEN, CURRENT)
    assert _everything(opener()) == before


def test_layout1_get_many_reads_layout1_items(opener: Any) -> None:
    store = opener()
    make_layout1(store)
    _populate(store)
    keys = ["tbl/p/wh/ns/t1", "prj/p", f"ver/inc002/{3:020d}", "tbl/p/wh/ns/none"]
    calls: list[str] = []
    store.events.register("before-call.dynamodb", lambda model, **_: calls.append(model.name))
    got = store.get_many(keys)
    # One snapshot request, then the read is confirmed against the layout item, as get does.
    assert calls == ["TransactGetItems", "GetItem"]
    assert got == [store.get(key) for key in keys]
    assert [i.key if i else None for i in got] == [*keys[:3], None]


def test_stale_layout1_clients_follow_the_switch(opener: Any) -> None:
    store, stale_reader, stale_writer, stale_many = opener(), opener(), opener(), opener()
    make_layout1(store)
    _populate(store)
    for client in (stale_reader, stale_writer, stale_many):
        assert client.layout(refresh=True) == LEGACY
    key = "tbl/p/wh/ns/t2"
    rev = store.get(key).revision  # type: ignore[union-attr]

    def write_after_switch(step: str) -> None:
        # Layout 2 in force, layout-1 originals not yet removed: the originals are stale now.
        if step.startswith("clean up"):
            opener().compare_and_swap(key, rev, b"after the switch")

    migrate(store, on_step=write_after_switch)
    got = stale_reader.get(key)
    assert got is not None and (got.value, got.revision) == (b"after the switch", rev + 1)
    assert stale_reader.layout() == CURRENT
    # get_many too: its layout-1 answer (the originals are gone) is discarded and re-read in layout 2.
    many = stale_many.get_many([key, "prj/p"])
    assert many[0] is not None and (many[0].value, many[0].revision) == (b"after the switch", rev + 1)
    assert many[1] is not None and many[1].value == b"project"
    assert stale_many.layout() == CURRENT
    item = stale_writer.compare_and_swap(key, rev + 1, b"stale writer")
    assert item.revision == rev + 2
    assert (partition_of(key), key) in _raw(store) and (partition_v1(key), key) not in _raw(store)


def test_commits_during_a_migration_are_never_lost(opener: Any) -> None:
    """A writer compare-and-swaps a counter in a loop through the whole migration: in layout 1,
    refused (retryable) while frozen, then in layout 2. Every increment it saw succeed is
    there, none twice."""
    store, writer = opener(), opener()
    make_layout1(store)
    _populate(store)
    writer.put_if_absent("tbl/p/wh/ns/counter", b"0")
    done, started, refused = threading.Event(), threading.Event(), threading.Event()
    outcomes: Counter[str] = Counter()

    def count() -> None:
        while not done.is_set() or outcomes["ok after"] < 3:
            item = writer.get("tbl/p/wh/ns/counter")
            assert item is not None
            try:
                writer.transact(
                    [
                        Put(item.key, str(int(item.value) + 1).encode(), item.revision),
                        Check("lse/inc000", 3),
                    ]
                )
                outcomes["ok after" if done.is_set() else "ok"] += 1
                if outcomes["ok"] >= 3:
                    started.set()
            except ServiceUnavailable:
                outcomes["frozen"] += 1
                refused.set()
            except ConditionFailed:
                outcomes["conflict"] += 1

    def hold_the_freeze(step: str) -> None:
        if step.startswith("copy: copying"):
            assert refused.wait(60)  # the writer has met the frozen table

    thread = threading.Thread(target=count)
    thread.start()
    try:
        assert started.wait(60)  # layout-1 commits landed before the freeze
        migrate(store, on_step=hold_the_freeze)
    finally:
        done.set()
        thread.join(timeout=120)
    assert not thread.is_alive()
    assert outcomes["frozen"] >= 1 and outcomes["ok after"] >= 3
    assert outcomes["conflict"] == 0  # one writer: a failed condition would mean a lost update
    final = store.get("tbl/p/wh/ns/counter")
    assert final is not None
    landed = outcomes["ok"] + outcomes["ok after"]
    assert int(final.value) == landed and final.revision == landed + 1


def test_cli_registry_migrate(dynamodb_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from lake_platform.cli import cli
    from lake_platform_tests.cli.conftest import run

    monkeypatch.setenv("LAKE_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("LAKE_REGISTRY_URL", dynamodb_url)
    runner = CliRunner()
    run(runner, "registry", "init")
    with DynamoMetaStore.from_url(dynamodb_url, _settings(dynamodb_url, tmp_path)) as store:
        try:
            make_layout1(store)
            run(runner, "project", "create", "p")
            result = runner.invoke(cli, ["--json", "registry", "migrate"])
            assert result.exit_code == 0, result.output
            assert "freeze:" in result.stderr and "clean up:" in result.stderr  # progress on stderr
            out = json.loads(result.stdout)
            assert out["layout_before"] == LEGACY and out["layout_after"] == CURRENT
            assert out["copied"] >= 1  # the project's commit-log entry and marker
            assert [e["operation"] for e in run(runner, "log", "p")] == ["create project"]
            again = runner.invoke(cli, ["--json", "registry", "migrate"])
            assert json.loads(again.stdout)["copied"] == 0
        finally:
            delete_table(store)
    monkeypatch.setenv("LAKE_REGISTRY_URL", f"sqlite:///{tmp_path / 'r.db'}")
    result = runner.invoke(cli, ["registry", "migrate"])
    assert result.exit_code == 0 and "nothing to migrate" in result.output


def test_init_adopts_an_empty_table_but_never_relabels_data(
    opener: Any, dynamodb_url: str, tmp_path: Path
) -> None:
    """A table made outside `lake registry init` (CloudFormation) is empty: init gives it layout 2.
    A table holding layout-1 data keeps layout 1 until `lake registry migrate`."""
    store = opener()
    make_layout1(store)  # no layout item, as CloudFormation leaves it
    init_table(dynamodb_url, _settings(dynamodb_url, tmp_path))
    assert store.layout(refresh=True) == CURRENT
    store = opener()  # one that has not read layout 2 (a client never reads it again)
    make_layout1(store)
    store.put_if_absent("tbl/p/wh/ns/t", b"old data")
    init_table(dynamodb_url, _settings(dynamodb_url, tmp_path))
    assert store.layout(refresh=True) == LEGACY
    assert store.get("tbl/p/wh/ns/t").value == b"old data"  # type: ignore[union-attr]
