"""The scale-out pair end to end: a DynamoDB registry (moto on loopback) and an S3 warehouse
(SeaweedFS on loopback), several writer processes, one table."""

from __future__ import annotations

from typing import Any

import pytest

from lake_platform.engine import lance_engine as engine
from lake_platform_tests.catalog.conftest import append_in_processes, ids_of, rows

T = "p.w.ns.t"


@pytest.mark.slow
def test_four_processes_on_dynamodb_and_s3_lose_no_commit(scale_out: Any) -> None:
    settings, catalog = scale_out
    assert catalog.store.url.startswith("dynamodb://")
    catalog.tables.create_table(T, rows([-1]))
    append_in_processes(T, settings, 4, 25)
    snap = catalog.reads.open_table(T)
    location = snap.record.location
    assert location.startswith("s3://")
    assert snap.version == catalog.reads.describe_table(T, with_stats=False).current_version == 101
    assert engine.versions_on_disk(location, settings.storage_options(location))[-1] == 101
    assert len([e for e in catalog.reads.history(T) if e.operation == "append"]) == 100
    assert ids_of(snap) == sorted([-1] + [w * 1000 + i for w in range(4) for i in range(25)])


def test_drop_recreate_and_undrop_on_the_scale_out_pair(scale_out: Any) -> None:
    _, catalog = scale_out
    catalog.tables.create_table(T, rows([1]))
    catalog.trash.drop_table(T)
    catalog.tables.create_table(T, rows([2]))
    catalog.trash.undrop_table(T, as_name="p.w.ns.t_old")
    assert ids_of(catalog.reads.open_table(T)) == [2]
    assert ids_of(catalog.reads.open_table("p.w.ns.t_old")) == [1]
