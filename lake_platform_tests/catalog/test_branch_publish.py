"""Publishing the same-named branch of several tables at once (write-audit-publish of a run that
wrote several tables): every main moves in one registry transaction or none does, each new head
names the others, and a retry under the commit id publishes nothing twice."""

from __future__ import annotations

import shutil
import signal
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from lake_platform.catalog.catalog import Catalog
from lake_platform.catalog.principals import LOCAL_ADMIN
from lake_platform.catalog.provenance import Provenance
from lake_platform.catalog.pylance_namespace import LakeNamespace
from lake_platform.errors import (
    BranchDiverged,
    InvalidInput,
    InvalidTableState,
    TableBranchNotFound,
    TableVersionNotFound,
)
from lake_platform.naming import TableName
from lake_platform.registry import keys
from lake_platform.registry.dynamodb import DynamoMetaStore
from lake_platform.registry.dynamodb_admin import delete_table, init_table
from lake_platform.registry.dynamodb_items import parse_url
from lake_platform.registry.records import VersionRecord, decode
from lake_platform.settings import LakeSettings, load_settings
from lake_platform_tests.catalog import faults
from lake_platform_tests.catalog.conftest import Lake, ids_of, rows
from lake_platform_tests.catalog.registry_calls import RegistryCalls
from lake_platform_tests.conftest import dynamodb_client, dynamodb_test_url
from lake_platform_tests.registry.catalog_records import batch_put_items

ORDERS, LINES = "p.w.ns.orders", "p.w.ns.order_lines"


@pytest.fixture
def run_branch(lake: Lake) -> Iterator[Lake]:
    """Both tables at version 1, each with branch ``run_1`` one append ahead of main."""
    cat = lake.catalog
    for name, first in ((ORDERS, 1), (LINES, 100)):
        cat.tables.create_table(name, rows([first]))
        cat.branches.create_branch(name, "run_1")
        cat.branch_writes.append(name, "run_1", rows([first + 1]))
    yield lake


def main_state(lake: Lake) -> dict[str, tuple[int, list[int]]]:
    out = {}
    for name in (ORDERS, LINES):
        snap = lake.catalog.reads.open_table(name)
        out[name] = (snap.version, ids_of(snap))
    return out


def head_record(lake: Lake, name: str) -> VersionRecord:
    record = lake.catalog.ctx.table(TableName.parse(name))[0]
    item = lake.catalog.store.get(keys.version(record.incarnation, record.current_version))
    assert item is not None
    return decode(VersionRecord, item.value, item.key)


def test_every_main_moves_in_one_commit_and_each_head_names_the_others(run_branch: Lake) -> None:
    by = Provenance(commit_id="wap-publish-0001")
    results = run_branch.catalog.branch_publish.publish_branches([ORDERS, LINES], "run_1", by=by)
    assert [(r.table, r.from_version, r.to_version) for r in results] == [(LINES, 1, 2), (ORDERS, 1, 2)]
    assert [r.commit_id for r in results] == ["wap-publish-0001-t0", "wap-publish-0001-t1"]
    assert main_state(run_branch) == {ORDERS: (2, [1, 2]), LINES: (2, [100, 101])}
    assert head_record(run_branch, ORDERS).transaction == {LINES: 2}
    assert head_record(run_branch, LINES).transaction == {ORDERS: 2}
    for name in (ORDERS, LINES):
        assert run_branch.catalog.branches.list_branches(name) == []
        assert run_branch.catalog.reads.history(name)[-1].operation == "publish"
    again = run_branch.catalog.branch_publish.publish_branches([ORDERS, LINES], "run_1", by=by)
    assert all(r.replayed for r in again) and main_state(run_branch)[ORDERS][0] == 2


def test_one_diverged_table_publishes_none(run_branch: Lake) -> None:
    run_branch.catalog.tables.append(LINES, rows([999]))  # main of one table moved on
    before = main_state(run_branch)
    with pytest.raises(BranchDiverged, match="order_lines"):
        run_branch.catalog.branch_publish.publish_branches([ORDERS, LINES], "run_1")
    assert main_state(run_branch) == before
    for name in (ORDERS, LINES):  # both branches kept, for inspection
        assert [b.branch for b in run_branch.catalog.branches.list_branches(name)] == ["run_1"]


def test_refusals_change_nothing(run_branch: Lake) -> None:
    before = main_state(run_branch)
    with pytest.raises(TableBranchNotFound):
        run_branch.catalog.branch_publish.publish_branches([ORDERS, LINES], "run_2")
    with pytest.raises(InvalidInput):
        run_branch.catalog.branch_publish.publish_branches([], "run_1")
    assert main_state(run_branch) == before


# == a branch longer than one registry transaction ============================================

LONG = "p.w.ns.long"
#: More of the branch's own versions than one DynamoDB transaction carries (99 operations).
BRANCH_VERSIONS = 110


@dataclass(frozen=True)
class Built:
    """A lake as the long branch's build left it: its home folder (copied aside) and every item of
    its registry table, read raw."""

    home: Path
    copy: Path
    items: list[dict[str, Any]]


@pytest.fixture(scope="module")
def long_branch_built(tmp_path_factory: pytest.TempPathFactory, moto_endpoint: str) -> Built:
    """Built once a module: ``BRANCH_VERSIONS`` appends are most of each test's time (on moto a
    transaction copies the whole table, so each append costs more than the last)."""
    url = dynamodb_test_url(moto_endpoint)
    root = tmp_path_factory.mktemp("long")
    settings = load_settings(home=root / "home", registry_url=url)
    init_table(url, settings)
    with Catalog(settings) as c:
        c.containers.create_project("p")
        c.containers.create_warehouse("p.w")
        c.containers.create_namespace("p.w.ns")
        c.tables.create_table(LONG, rows([0]))
        c.branches.create_branch(LONG, "dev")
        for i in range(1, BRANCH_VERSIONS + 1):
            c.branch_writes.append(LONG, "dev", rows([i]))
    table = parse_url(url).table
    pages = dynamodb_client(url).get_paginator("scan").paginate(TableName=table, ConsistentRead=True)
    items = [item for page in pages for item in page["Items"]]
    store = DynamoMetaStore.from_url(url, settings)
    delete_table(store)
    store.close()
    shutil.copytree(settings.home, root / "copy")
    return Built(settings.home, root / "copy", items)


@pytest.fixture
def long_branch(long_branch_built: Built, moto_endpoint: str) -> Iterator[LakeSettings]:
    """On DynamoDB (moto), a local warehouse: ``LONG`` at version 1 (id 0) and branch ``dev``
    with ``BRANCH_VERSIONS`` appends of its own (ids 1..110, versions 2..111). Each test gets the
    build as it was left: the home folder restored in place (a table's location is absolute)
    and the registry's items loaded into a fresh table, so no test sees another's writes."""
    built = long_branch_built
    shutil.rmtree(built.home, ignore_errors=True)
    shutil.copytree(built.copy, built.home)
    url = dynamodb_test_url(moto_endpoint)
    settings = load_settings(home=built.home, registry_url=url)
    init_table(url, settings)
    table, client = parse_url(url).table, dynamodb_client(url)
    batch_put_items(client, table, built.items)
    yield settings
    store = DynamoMetaStore.from_url(url, settings)
    delete_table(store)
    store.close()


def op_publish(catalog: Catalog, commit_id: str) -> Any:
    return catalog.branch_publish.publish_branch(LONG, "dev", by=Provenance(commit_id=commit_id))


def main_sees(c: Catalog) -> tuple[int, set[int], list[int]]:
    """Main's head, the versions every reader path lists (registry, namespace), its rows."""
    readable = set(c.reads.readable_versions(LONG)[1])
    listed = LakeNamespace(c, LOCAL_ADMIN).list_table_versions({"id": LONG.split(".")})
    assert {v.version for v in listed.versions} == readable
    snap = c.reads.open_table(LONG)
    return snap.version, readable, ids_of(snap)


def test_every_version_of_a_long_branch_becomes_mains(long_branch: LakeSettings) -> None:
    with Catalog(long_branch) as c:
        result = op_publish(c, "long-publish-0001")
        assert (result.from_version, result.to_version) == (1, BRANCH_VERSIONS + 1)
        head, readable, ids = main_sees(c)
        assert (head, readable, ids) == (111, set(range(1, 112)), list(range(111)))
        for version in (2, 14, 50, 97, 110):  # the batches' and the final transaction's
            assert ids_of(c.reads.open_table(LONG, version)) == list(range(version))
        entry = c.reads.history(LONG)[-1]
        assert (entry.operation, entry.detail["versions"]) == ("publish", list(range(2, 112)))
        assert c.branches.list_branches(LONG) == []
        c.tables.append(LONG, rows([999]))  # main writes on
        assert c.reads.open_table(LONG).version == 112


@pytest.mark.parametrize("then", ["retry", "main-write"])
def test_a_publish_killed_between_batches_shows_none_of_it(long_branch: LakeSettings, then: str) -> None:
    code, _ = faults.kill_writer(long_branch, op_publish, "publish:batch-registered", 1, "long-publish-0002")
    assert code == -signal.SIGKILL
    with Catalog(long_branch) as c:
        # the first batch is registered above main's head: no reader reaches any of it
        assert main_sees(c) == (1, {1}, [0])
        with pytest.raises(TableVersionNotFound):
            c.reads.open_table(LONG, 2)
        assert c.reads.history(LONG)[-1].operation != "publish"
        assert [b.branch for b in c.branches.list_branches(LONG)] == ["dev"]
        if then == "retry":  # the retry takes the dead writer's leases and publishes all of it
            op_publish(c, "long-publish-0002")
            assert main_sees(c) == (111, set(range(1, 112)), list(range(111)))
            assert ids_of(c.reads.open_table(LONG, 5)) == list(range(5))
        else:  # main's next writers find the records in their way and remove them
            c.tables.append(LONG, rows([500]))
            c.tables.append(LONG, rows([501]))
            assert main_sees(c) == (3, {1, 2, 3}, [0, 500, 501])
            with pytest.raises(BranchDiverged):
                op_publish(c, "long-publish-0003")
            assert [ids_of(c.reads.open_table(LONG, v)) for v in (2, 3)] == [[0, 500], [0, 500, 501]]
            with pytest.raises(TableVersionNotFound):  # the rest stays out of reach
                c.reads.open_table(LONG, 4)
            return
        faults.check_registry_matches_engine(c)


def test_a_branch_past_the_expected_version_is_refused_whole_and_compactions_pass(run_branch: Lake) -> None:
    """``expect``: each branch at the version its writer recorded (a wap run's audit read it).
    Another append on one branch since refuses the publish of both, nothing moved; a version
    made by compaction alone past it publishes."""
    cat = run_branch.catalog
    cat.branch_writes.append(LINES, "run_1", rows([999]))  # version 3, never audited
    before = main_state(run_branch)
    with pytest.raises(
        InvalidTableState, match="run_1 of p.w.ns.order_lines moved past version 2.*3 \\(append\\)"
    ):
        cat.branch_publish.publish_branches(
            [ORDERS, LINES],
            "run_1",
            expect={ORDERS: 2, LINES: 2},
            by=Provenance(commit_id="wap-publish-0002"),
        )
    with pytest.raises(InvalidTableState, match="not at version 5"):
        cat.branch_publish.publish_branches([ORDERS], "run_1", expect={ORDERS: 5})
    assert main_state(run_branch) == before
    compacted = cat.branch_compaction.compact_branch(ORDERS, "run_1")  # reserve, rewrite: two versions
    assert (compacted.status, compacted.version) == ("committed", 4)
    results = cat.branch_publish.publish_branches(
        [ORDERS, LINES], "run_1", expect={ORDERS: 2, LINES: 3}, by=Provenance(commit_id="wap-publish-0003")
    )
    assert [(r.table, r.to_version) for r in results] == [(LINES, 3), (ORDERS, 4)]
    assert main_state(run_branch) == {ORDERS: (4, [1, 2]), LINES: (3, [100, 101, 999])}


def test_a_publish_reads_each_kind_of_record_in_one_request(run_branch: Lake) -> None:
    """Each registry request is a round trip on DynamoDB. A publish of several tables reads
    their namespaces in one request, every table with its branch in one, and every lease record
    (main's and the branch's, from a gate that left none of them) in one; under the leases each
    table with its branch again in one. It read each of those on its own (three reads a table
    before the leases, two a lease, three a table under them)."""
    calls = RegistryCalls(run_branch.catalog.store)
    with Catalog(run_branch.settings, calls) as c:
        c.branch_publish.publish_branches([ORDERS, LINES], "run_1")
    assert [method for method, _ in calls.reads() if method != "scan_prefix"] == ["get_many"] * 5
    assert main_state(run_branch) == {ORDERS: (2, [1, 2]), LINES: (2, [100, 101])}
