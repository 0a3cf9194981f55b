"""The spool and its results area's limits: a result past LAKE_RESULTS_MAX_BYTES stops with
INVALID_ARGUMENT (ResultTooLarge) and leaves nothing, and the server deletes expired results
itself (its sweep, ticked here rather than waited for)."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.flight as fl
import pytest

from lake_platform.catalog.catalog import Catalog
from lake_platform.maintenance.results import GRACE_SECONDS
from lake_platform.settings import LakeSettings
from lake_platform_tests.flight.conftest import build_catalog, login, plan, serving, t_rows

SPOOL = {"spool_min_rows": 3000, "spool_segment_bytes": 16 << 10, "batch_size": 512}
CAP = 40_000


@pytest.fixture(scope="module")
def lake(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[LakeSettings, Catalog]]:
    home = tmp_path_factory.mktemp("spool-area") / "home"
    settings, catalog = build_catalog(home, results_max_bytes=CAP)
    catalog.tables.create_table("p.w.ns.big", t_rows(4000).to_reader())
    try:
        yield settings, catalog
    finally:
        catalog.close()


@pytest.fixture(scope="module")
def server(lake: tuple[LakeSettings, Catalog]) -> Iterator[Any]:
    with serving(*lake, **SPOOL) as running:
        yield running


def jobs(lake: tuple[LakeSettings, Catalog]) -> list[Path]:
    return sorted(Path(lake[0].results_root).glob("p/*"))


def spooled(server: Any, sql: str) -> fl.FlightInfo:
    client, options = login(f"grpc://127.0.0.1:{server.port}")
    return plan(client, fl.FlightCallOptions(headers=[*options.headers, (b"x-lake-spool", b"true")]), sql)


def test_a_result_past_the_cap_is_invalid_argument_and_deleted(lake: Any, server: Any) -> None:
    before = jobs(lake)
    with pytest.raises(pa.ArrowInvalid, match=f"LAKE_RESULTS_MAX_BYTES={CAP}") as err:
        spooled(server, "SELECT id, s FROM w.ns.big")
    assert "[ResultTooLarge, code 13]" in str(err.value)
    assert jobs(lake) == before  # its job deleted
    # one within it is spooled and served as before
    info = spooled(server, "SELECT id FROM w.ns.big WHERE id < 100")
    client, options = login(f"grpc://127.0.0.1:{server.port}")
    assert sum(client.do_get(e.ticket, options).read_all().num_rows for e in info.endpoints) == 100


def test_the_server_deletes_expired_results_itself(lake: Any, server: Any) -> None:
    before = set(jobs(lake))
    spooled(server, "SELECT id FROM w.ns.big WHERE id < 10")
    [old] = set(jobs(lake)) - before
    spooled(server, "SELECT id FROM w.ns.big WHERE id < 20")
    [live] = set(jobs(lake)) - before - {old}
    meta = json.loads((old / "job.json").read_text())
    meta["expires_at"] = time.time() - GRACE_SECONDS - 1  # the clock past its expiry and grace
    (old / "job.json").write_text(json.dumps(meta))
    outcome = server.results_sweeper.tick()
    assert [d["job"] for d in outcome.deleted] == [old.name]
    assert not old.exists() and live.exists()
    assert server.results_sweeper.interval == lake[0].results_sweep_seconds == 300.0
