"""Kill a multi-table transaction's writer (SIGKILL, through ``faults.kill_writer``) at each named
point of its commit, on SQLite and on DynamoDB (moto), then check that no reader ever sees part of it:

1. the registry moved every table's head, or none (the one registry transaction);
2. a reader sees every table's new rows, or every table's old rows; a version committed but not
   yet published is refused (typed, nothing written) rather than shown old, until the next writer
   or ``finish_versions`` publishes it;
3. a retry under the same commit id lands exactly once, taking the dead writer's leases;
4. afterwards every registered version opens at exactly that version.
"""

from __future__ import annotations

import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from lake_platform.catalog.catalog import Catalog
from lake_platform.catalog.provenance import Provenance
from lake_platform.errors import InvalidTableState
from lake_platform.registry.dynamodb import DynamoMetaStore
from lake_platform.registry.dynamodb_admin import delete_table, init_table
from lake_platform.settings import LakeSettings, load_settings
from lake_platform_tests.catalog import faults
from lake_platform_tests.catalog.conftest import ids_of, rows

TABLES = ["p.w.ns.orders", "p.w.ns.order_lines", "p.w.ns.customers"]
COMMIT_ID = "tx-kill-0001"
NEW = 100

#: (point, nth, whether the transaction is committed when the writer dies there).
KILLS = [
    ("transaction:before-write", 2, False),  # the first table's data and staging manifest written
    ("append:staged", 2, False),  # inside the second table's write: its data files written
    ("transaction:written", 3, False),  # every table staged, nothing registered
    ("transaction:staged", 1, False),  # just before the registry transaction
    ("transaction:registered", 1, True),  # committed, no manifest published
    ("transaction:published", 1, True),  # mid-publication: one table's manifest published
    ("transaction:published", 3, True),  # published, the process not yet returned
]


def op_transaction(catalog: Catalog, commit_id: str) -> Any:
    """The transaction the kills interrupt: an append to two tables, an overwrite of the third."""
    with catalog.transaction(by=Provenance(commit_id=commit_id)) as tx:
        for i, name in enumerate(sorted(TABLES)):
            if i == 2:
                tx.overwrite(name, rows([NEW + i]))
            else:
                tx.append(name, rows([NEW + i]))
    return tx.results


def expected_new(i: int) -> list[int]:
    return [NEW + i] if i == 2 else [i, NEW + i]


@pytest.fixture(scope="module", autouse=True)
def moto_before_the_forkserver(moto_endpoint: str) -> str:
    """The writers' forkserver keeps the environment it started in, and the first kill starts
    it: moto's placeholder AWS credentials must be set by then, or every DynamoDB writer after
    a SQLite one finds none."""
    return moto_endpoint


@pytest.fixture(params=["sqlite", "dynamodb"])
def settings(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[LakeSettings]:
    if request.param == "sqlite":
        settings = load_settings(home=tmp_path / "home")
    else:
        url = request.getfixturevalue("dynamodb_url")
        settings = load_settings(home=tmp_path / "home", registry_url=url)
        init_table(url, settings)
    with Catalog(settings) as c:
        c.containers.create_project("p")
        c.containers.create_warehouse("p.w")
        c.containers.create_namespace("p.w.ns")
        for i, name in enumerate(sorted(TABLES)):
            c.tables.create_table(name, rows([i]))
    yield settings
    if request.param == "dynamodb":
        store = DynamoMetaStore.from_url(settings.registry_url, settings)
        delete_table(store)
        store.close()


def seen(c: Catalog) -> list[list[int] | None]:
    """Each table's rows as a reader sees them now (None: refused as not yet published)."""
    out: list[list[int] | None] = []
    for name in sorted(TABLES):
        try:
            out.append(sorted(ids_of(c.reads.open_table(name))))
        except InvalidTableState:
            out.append(None)
    return out


@pytest.mark.parametrize("kill", KILLS, ids=[f"{p}#{n}" for p, n, _ in KILLS])
def test_kill_at_each_point_leaves_all_or_nothing(
    settings: LakeSettings, kill: tuple[str, int, bool]
) -> None:
    point, nth, committed = kill
    code, _ = faults.kill_writer(settings, op_transaction, point, nth, COMMIT_ID)
    assert code == -signal.SIGKILL, f"the writer never reached {point} (#{nth}); exit code {code}"
    old = [[i] for i in range(len(TABLES))]
    new = [expected_new(i) for i in range(len(TABLES))]
    with Catalog(settings) as c:
        heads = {c.reads.describe_table(n, with_stats=False).current_version for n in TABLES}
        assert heads == ({2} if committed else {1})
        visible = seen(c)
        if committed:
            assert all(v is None or v == n for v, n in zip(visible, new, strict=True)), visible
            for name in TABLES:
                c.manifests.finish_versions(name)
            assert seen(c) == new
        else:
            assert visible == old
        # The retry takes the dead writer's leases at once (same host, the process is gone) and
        # lands exactly once.
        results = op_transaction(c, COMMIT_ID)
        assert [r.replayed for r in results] == [committed] * len(TABLES)
        assert seen(c) == new
        assert {c.reads.describe_table(n, with_stats=False).current_version for n in TABLES} == {2}
        faults.check_registry_matches_engine(c)


#: A 100-table transaction (SQLite takes it in one registry transaction): the writer killed with
#: every table staged and nothing registered, with everything registered and nothing published,
#: and halfway through publishing.
HUNDRED = [f"p.w.ns.h{i:03d}" for i in range(100)]
HUNDRED_KILLS = [
    ("transaction:staged", 1, False),
    ("transaction:registered", 1, True),
    ("transaction:published", 50, True),
]


def op_hundred(catalog: Catalog, commit_id: str) -> Any:
    with catalog.transaction(by=Provenance(commit_id=commit_id)) as tx:
        for i, name in enumerate(HUNDRED):
            tx.append(name, rows([NEW + i]))
    return tx.results


@pytest.mark.parametrize("kill", HUNDRED_KILLS, ids=[f"{p}#{n}" for p, n, _ in HUNDRED_KILLS])
def test_a_hundred_table_transaction_killed_leaves_all_or_nothing_on_sqlite(
    tmp_path: Path, kill: tuple[str, int, bool]
) -> None:
    point, nth, committed = kill
    settings = load_settings(home=tmp_path / "home")
    with Catalog(settings) as c:
        c.containers.create_project("p")
        c.containers.create_warehouse("p.w")
        c.containers.create_namespace("p.w.ns")
        for i, name in enumerate(HUNDRED):
            c.tables.create_table(name, rows([i]))
    code, _ = faults.kill_writer(settings, op_hundred, point, nth, COMMIT_ID)
    assert code == -signal.SIGKILL, f"the writer never reached {point} (#{nth}); exit code {code}"
    with Catalog(settings) as c:
        heads = {c.reads.describe_table(n, with_stats=False).current_version for n in HUNDRED}
        assert heads == ({2} if committed else {1})
        if committed:
            for name in HUNDRED:
                c.manifests.finish_versions(name)
        expected = [[i, NEW + i] if committed else [i] for i in range(len(HUNDRED))]
        assert [sorted(ids_of(c.reads.open_table(n))) for n in HUNDRED] == expected
        results = op_hundred(c, COMMIT_ID)
        assert [r.replayed for r in results] == [committed] * len(HUNDRED)
        assert [sorted(ids_of(c.reads.open_table(n))) for n in HUNDRED] == [
            [i, NEW + i] for i in range(len(HUNDRED))
        ]
