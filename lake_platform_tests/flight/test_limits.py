"""Query limits from settings, each answering with its status and naming the exact limit:

| limit | setting | status |
| --- | --- | --- |
| wall-clock time of a query | LAKE_FLIGHT_QUERY_TIMEOUT_SECONDS | DEADLINE_EXCEEDED |
| concurrent queries | LAKE_FLIGHT_MAX_CONCURRENT_QUERIES | RESOURCE_EXHAUSTED |
| result size | LAKE_FLIGHT_MAX_RESULT_BYTES | INVALID_ARGUMENT (retrying the same query cannot help) |
| memory beyond what spilling can save | LAKE_FLIGHT_MEMORY_LIMIT_BYTES | RESOURCE_EXHAUSTED |
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.flight as fl
import pytest

from lake_platform.query.errors import timed_out, too_large
from lake_platform.query.limits import QueryLimits, limits_from
from lake_platform.settings import LakeSettings
from lake_platform.settings.flight import FlightSettings, flight_settings
from lake_platform_tests.flight.conftest import fetch, login, plan, raw_status, serving, wait_until
from lake_platform_tests.flight.helpers import SLOW_SQL, SlowUdf, streams_of

#: DataFusion needs seconds of CPU before this sort yields its first batch.
HEAVY_SORT = "SELECT value FROM generate_series(1, 60000000) ORDER BY value DESC"


@pytest.fixture
def limited(lake: tuple[LakeSettings, Any]) -> Iterator[Any]:
    settings, catalog = lake
    with serving(
        settings,
        catalog,
        max_concurrent_queries=1,
        admission_wait_seconds=0.2,
        max_result_bytes=20_000,
        memory_limit_bytes=32 << 20,
    ) as server:
        yield server


@pytest.fixture
def timed(lake: tuple[LakeSettings, Any]) -> Iterator[Any]:
    settings, catalog = lake
    with serving(settings, catalog, query_timeout_seconds=0.5) as server:
        yield server


def test_flight_settings_become_the_query_limits_labelled_with_their_settings(
    lake: tuple[LakeSettings, Any], tmp_path: Path
) -> None:
    settings, _ = lake
    flight = flight_settings(
        port=0,
        max_result_bytes=20_000,
        query_timeout_seconds=2.5,
        batch_size=1024,
        dataset_cache_size=3,
        spill_dir=tmp_path,
        spill_compression="zstd",
        session_pool_size=5,
        cache_bytes=1 << 20,
        cache_admit_after=2,
        plan_cache_size=7,
        result_cache_bytes=3 << 20,
        result_cache_entry_bytes=1 << 20,
        max_value_bytes=2 << 20,
        max_join_pairs=1234,
        max_relations=9,
    )
    limits = limits_from(flight, settings)
    shared = [f.name for f in dataclasses.fields(QueryLimits) if f.name in FlightSettings.model_fields]
    assert len(shared) == 19  # every limit but the labels comes from a setting of the same name
    for name in shared:
        assert getattr(limits, name) == getattr(flight, name), name
        assert limits.label(name) == f"LAKE_FLIGHT_{name.upper()}"
    assert too_large(limits).message.startswith(
        "the result is larger than LAKE_FLIGHT_MAX_RESULT_BYTES=20000;"
    )
    assert "longer than LAKE_FLIGHT_QUERY_TIMEOUT_SECONDS=2.5 and" in timed_out(limits).message
    assert limits_from(flight_settings(port=0), settings).spill_dir == settings.home / "spill"


def test_query_timeout_interrupts_even_a_blocking_sort(timed: Any) -> None:
    client, options = login(f"grpc://127.0.0.1:{timed.port}")
    info = plan(client, options, HEAVY_SORT)
    started = time.monotonic()
    with pytest.raises(fl.FlightTimedOutError, match="LAKE_FLIGHT_QUERY_TIMEOUT_SECONDS=0.5") as err:
        fetch(client, options, info)
    elapsed = time.monotonic() - started
    assert elapsed < 2.5, f"the timeout took {elapsed:.1f}s to stop a query that had not produced a batch"
    assert "Traceback" not in str(err.value)
    assert wait_until(lambda: streams_of(timed) == 0)


def test_concurrency_limit_answers_resource_exhausted_naming_the_limit(limited: Any) -> None:
    client, options = login(f"grpc://127.0.0.1:{limited.port}")
    with SlowUdf(limited, delay=0.15):
        first = client.do_get(plan(client, options, SLOW_SQL).endpoints[0].ticket, options)
        first.read_chunk()
        second = plan(client, options, "SELECT count(*) AS n FROM w.ns.t")
        started = time.monotonic()
        with pytest.raises(
            pa.ArrowException, match="resource exhausted.*LAKE_FLIGHT_MAX_CONCURRENT_QUERIES=1"
        ):
            fetch(client, options, second)
        assert time.monotonic() - started < 2.0  # waited admission_wait_seconds, not forever
        for _ in first:
            pass
    assert wait_until(lambda: streams_of(limited) == 0)
    assert fetch(client, options, second).to_pylist() == [{"n": 1000}]


def test_result_size_limit_answers_invalid_argument_naming_the_limit(limited: Any) -> None:
    client, options = login(f"grpc://127.0.0.1:{limited.port}")
    info = plan(client, options, "SELECT * FROM w.ns.t")
    with pytest.raises(pa.ArrowInvalid, match="LAKE_FLIGHT_MAX_RESULT_BYTES=20000"):
        fetch(client, options, info)
    assert fetch(client, options, plan(client, options, "SELECT id FROM w.ns.t LIMIT 10")).num_rows == 10
    code, _ = raw_status(limited, info.endpoints[0].ticket)
    assert code == "INVALID_ARGUMENT"


def test_memory_limit_answers_resource_exhausted_naming_the_limit(limited: Any) -> None:
    """An operator that cannot spill (array_agg's accumulator) over a 32 MiB pool."""
    client, options = login(f"grpc://127.0.0.1:{limited.port}")
    info = plan(client, options, "SELECT array_agg(value) AS a FROM generate_series(1, 8000000)")
    with pytest.raises(pa.ArrowException, match="LAKE_FLIGHT_MEMORY_LIMIT_BYTES") as err:
        fetch(client, options, info)
    assert "Traceback" not in str(err.value)
    code, details = raw_status(limited, info.endpoints[0].ticket)
    assert code == "RESOURCE_EXHAUSTED" and "LAKE_FLIGHT_MEMORY_LIMIT_BYTES" in details


def test_each_limit_has_its_grpc_code(limited: Any, timed: Any) -> None:
    """What a generic gRPC client (not pyarrow's mapping) sees."""
    client, options = login(f"grpc://127.0.0.1:{timed.port}")
    code, details = raw_status(timed, plan(client, options, HEAVY_SORT).endpoints[0].ticket)
    assert code == "DEADLINE_EXCEEDED" and "LAKE_FLIGHT_QUERY_TIMEOUT_SECONDS" in details
    client, options = login(f"grpc://127.0.0.1:{limited.port}")
    with SlowUdf(limited, delay=0.15):
        first = client.do_get(plan(client, options, SLOW_SQL).endpoints[0].ticket, options)
        first.read_chunk()
        code, details = raw_status(limited, plan(client, options, "SELECT 1 AS one").endpoints[0].ticket)
        assert code == "RESOURCE_EXHAUSTED" and "LAKE_FLIGHT_MAX_CONCURRENT_QUERIES" in details
        first.cancel()
    assert wait_until(lambda: streams_of(limited) == 0)


def test_the_cache_budget_defaults_to_a_modest_share(lake: tuple[LakeSettings, Any]) -> None:
    import os

    settings, _ = lake
    ram = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    small = limits_from(flight_settings(port=0, memory_limit_bytes=256 << 20), settings)
    assert small.cache_bytes == min(ram // 16, 128 << 20)  # at most half the query pool
    large = limits_from(flight_settings(port=0, memory_limit_bytes=1 << 40), settings)
    assert large.cache_bytes == ram // 16
    assert limits_from(flight_settings(port=0, cache_bytes=0), settings).cache_bytes == 0
