"""A multi-table commit answered as made is what the next Flight SQL and ``lake sql`` query reads,
all of it, on DynamoDB (moto) with the registry throttling every head move after the commit
point: the caller is told the commit is made (``transaction_chunks``) while no head moved, so
only the committed transaction record leads to the new versions. A ticket planned before the
commit stays pinned to what it planned."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pytest
from botocore.awsrequest import AWSPreparedRequest, AWSResponse
from click.testing import CliRunner

from lake_platform.catalog.catalog import Catalog
from lake_platform.catalog.transaction import Transaction
from lake_platform.cli import cli
from lake_platform.naming import TableName
from lake_platform.settings import LakeSettings, load_settings
from lake_platform_tests.catalog.conftest import namespace_lake
from lake_platform_tests.flight.conftest import fetch, login, plan, query, serving
from lake_platform_tests.registry.dynamo_faults import error_response

SHORT = [f"c{i}" for i in range(4)]
NAMES = [f"p.w.ns.{t}" for t in SHORT]
#: Every table's rows, one row each table, in one result.
SQL = " UNION ALL ".join(f"SELECT '{t}' AS t, id FROM w.ns.{t}" for t in SHORT)
OLD = sorted((t, i) for i, t in enumerate(SHORT))
NEW = sorted(OLD + [(t, 100 + i) for i, t in enumerate(SHORT)])


@pytest.fixture
def lake(dynamodb_url: str, tmp_path: Path) -> Iterator[tuple[LakeSettings, Catalog]]:
    settings = load_settings(home=tmp_path / "home", registry_url=dynamodb_url)
    with namespace_lake(settings), Catalog(settings) as catalog:
        for i, name in enumerate(NAMES):
            catalog.tables.create_table(name, pa.table({"id": pa.array([i], pa.int64())}).to_reader())
        yield settings, catalog


def heads(c: Catalog) -> list[int]:
    return [c.ctx.table(TableName.parse(n))[0].current_version for n in NAMES]


def append_each(tx: Transaction) -> None:
    """The commit under test: one row to each table, one table's version a registry write."""
    for i, name in enumerate(NAMES):
        tx.append(name, pa.table({"id": pa.array([100 + i], pa.int64())}).to_reader())


def commit_with_head_moves_throttled(settings: LakeSettings) -> list[int]:
    """The commit over several registry writes (4 ops a write), every TransactWriteItems from its
    commit point to the end of its registry step throttled; the versions it answers."""
    moving: list[bool] = []

    def turn(at: str) -> None:
        if at == "transaction:committed":
            moving.append(True)
        elif at == "transaction:registered":
            moving.clear()

    def throttle(request: AWSPreparedRequest, **_: object) -> AWSResponse | None:
        target = request.headers.get("X-Amz-Target", b"")
        target = target.decode() if isinstance(target, bytes) else target
        if moving and target.endswith("TransactWriteItems"):
            return error_response(request, 400, "ThrottlingException")
        return None

    with Catalog(settings, hook=turn) as c:
        c.store.events.register_first("before-send.dynamodb", throttle)  # type: ignore[attr-defined]
        with Transaction(c.tables, max_ops=4) as tx:
            append_each(tx)
    return [r.to_version for r in tx.results]


def rows_of(table: pa.Table) -> list[tuple[str, int]]:
    return sorted(zip(table.column("t").to_pylist(), table.column("id").to_pylist(), strict=True))


def lake_sql(settings: LakeSettings) -> list[tuple[str, int]]:
    env = {"LAKE_HOME": str(settings.home), "LAKE_REGISTRY_URL": settings.registry_url}
    result = CliRunner().invoke(cli, ["sql", "--project", "p", "--json", SQL], env=env)
    assert result.exit_code == 0, result.output
    return sorted((r["t"], r["id"]) for r in json.loads(result.output))


def test_flight_sql_and_lake_sql_read_a_commit_whose_heads_lag_whole(
    lake: tuple[LakeSettings, Catalog],
) -> None:
    settings, catalog = lake
    # Refreshed by the test alone: the endpoint's snapshot is exactly the one after each refresh.
    with serving(settings, catalog, snapshot_ttl_seconds=3600) as server:
        client, options = login(f"grpc://127.0.0.1:{server.port}")
        pinned = plan(client, options, SQL)
        assert commit_with_head_moves_throttled(settings) == [2] * len(NAMES)
        assert heads(catalog) == [1] * len(NAMES)  # answered as made, no head moved
        server.snapshots.refresh()  # by change: the commit point is in the change feed
        assert rows_of(query(client, options, SQL)) == NEW
        assert rows_of(fetch(client, options, pinned)) == OLD  # the ticket planned before it
    assert lake_sql(settings) == NEW
    assert heads(catalog) == [1] * len(NAMES)  # readers of the snapshot wrote nothing


def commit_killed_at_its_commit_point(settings: LakeSettings) -> None:
    """The same commit, its writer stopped right after the commit point: no head moved and no
    manifest published (the canonical files of version 2 are not on storage)."""

    def stop(at: str) -> None:
        if at == "transaction:committed":
            raise SystemExit("stopped at the commit point")

    with Catalog(settings, hook=stop) as c, pytest.raises(SystemExit):
        with Transaction(c.tables, max_ops=4) as tx:
            append_each(tx)


def test_a_commit_whose_writer_died_before_publishing_reads_whole_and_old_until_published(
    lake: tuple[LakeSettings, Catalog],
) -> None:
    # A replica (read-only registry credentials: it cannot finish the commit) reads every table
    # at its last published version, never some new and some old, and is not told a version
    # was "cleaned up"; once the commit is finished it reads all of it.
    settings, catalog = lake
    with serving(settings, catalog, snapshot_ttl_seconds=3600) as server:
        client, options = login(f"grpc://127.0.0.1:{server.port}")
        pinned = plan(client, options, SQL)
        commit_killed_at_its_commit_point(settings)
        assert heads(catalog) == [1] * len(NAMES)
        server.snapshots.refresh()  # by change: the commit point is in the change feed
        during = plan(client, options, SQL)
        assert rows_of(fetch(client, options, during)) == OLD
        assert lake_sql(settings) == OLD
        assert heads(catalog) == [1] * len(NAMES)  # the readers wrote nothing
        for name in NAMES:  # `lake table repair`: completes the commit and publishes it
            result = CliRunner().invoke(
                cli,
                ["table", "repair", name],
                env={"LAKE_HOME": str(settings.home), "LAKE_REGISTRY_URL": settings.registry_url},
            )
            assert result.exit_code == 0, result.output
        assert heads(catalog) == [2] * len(NAMES)
        server.snapshots.refresh()
        assert rows_of(query(client, options, SQL)) == NEW
        assert rows_of(fetch(client, options, pinned)) == OLD  # tickets stay pinned
        assert rows_of(fetch(client, options, during)) == OLD
    assert lake_sql(settings) == NEW
