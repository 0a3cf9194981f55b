"""uvicorn as ``rest.run`` configures it: a request arriving while LAKE_REST_MAX_CONNECTIONS
connections are open (its own counted) is answered 503 by uvicorn itself."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path

import pytest

from lake_platform.errors import SettingsError
from lake_platform.settings import load_settings
from lake_platform_tests.rest.conftest import RestLake, start_rest_lake
from lake_platform_tests.rest.test_body import connect, head, read_answer

LIMIT = 4


@pytest.fixture
def lake(tmp_path: Path) -> Iterator[RestLake]:
    # Idle kept-alive connections stay open for the whole test.
    yield from start_rest_lake(tmp_path, rest_max_connections=LIMIT, rest_keep_alive_seconds=60)


def test_a_connection_beyond_the_limit_is_answered_503(lake: RestLake) -> None:
    listing = head("GET", "/v1/namespace/p$w/list", lake.headers("reader"))
    with ExitStack() as held:
        open_ones = [held.enter_context(connect(lake)) for _ in range(LIMIT - 1)]
        for sock in open_ones:
            sock.sendall(listing)
            assert read_answer(sock)[0] == 200  # answered: the server holds this connection open

        with connect(lake) as extra:
            extra.sendall(listing)
            status, headers, _ = read_answer(extra)
            assert status == 503, headers


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("rest_max_connections", 1),
        ("rest_body_timeout_seconds", 0),
        ("rest_keep_alive_seconds", 0),
        ("rest_max_json_depth", 1),
    ],
)
def test_a_limit_out_of_range_is_a_settings_error_naming_it(tmp_path: Path, name: str, value: int) -> None:
    with pytest.raises(SettingsError) as refused:
        load_settings(home=tmp_path, **{name: value})
    assert name.upper() in str(refused.value).upper()
