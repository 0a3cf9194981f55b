"""The REST server (uvicorn as ``rest.run`` configures it) closes a connection whose request
headers are not complete within LAKE_REST_HEADER_TIMEOUT_SECONDS, over raw sockets: every wait
is a socket read bounded by the timeout plus a margin, never a sleep."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path

import pytest

from lake_platform.errors import SettingsError
from lake_platform.settings import load_settings
from lake_platform_tests.rest.conftest import RestLake, start_rest_lake
from lake_platform_tests.rest.test_body import connect, head, read_answer

HEADER_TIMEOUT = 1.0
MARGIN = 3.0  # two shared cores: the timer fires late under load, never early
SLOW_CLIENTS = 20
HALF_HEADERS = b"GET /v1/namespace/p$w/list HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: a"


@pytest.fixture
def lake(tmp_path: Path) -> Iterator[RestLake]:
    yield from start_rest_lake(
        tmp_path,
        rest_header_timeout_seconds=HEADER_TIMEOUT,
        rest_body_timeout_seconds=HEADER_TIMEOUT + MARGIN + 10,
        rest_keep_alive_seconds=60,  # only the header timeout closes a connection here
        rest_max_connections=SLOW_CLIENTS,
    )


def dropped_after(sock: socket.socket, since: float) -> float:
    """Seconds from ``since`` until the server closed ``sock`` (recv returns b'' or the
    connection is reset); a socket still open past the timeout plus the margin fails."""
    sock.settimeout(max(0.1, since + HEADER_TIMEOUT + MARGIN - time.monotonic()))
    try:
        data = sock.recv(65536)
    except ConnectionResetError:
        return time.monotonic() - since
    except TimeoutError:
        pytest.fail(f"still open {HEADER_TIMEOUT + MARGIN} s after its headers started")
    assert data == b"", data  # no answer: the request never reached the app
    return time.monotonic() - since


def listing(lake: RestLake) -> bytes:
    return head("GET", "/v1/namespace/p$w/list", lake.headers("reader"))


@pytest.mark.parametrize("sent", [b"", HALF_HEADERS], ids=["nothing", "half-headers"])
def test_a_connection_without_complete_headers_is_closed_while_others_are_served(
    lake: RestLake, sent: bytes
) -> None:
    with connect(lake) as slow, connect(lake) as normal:
        started = time.monotonic()
        slow.sendall(sent)
        normal.sendall(listing(lake))
        assert read_answer(normal)[0] == 200
        assert HEADER_TIMEOUT * 0.9 <= dropped_after(slow, started) <= HEADER_TIMEOUT + MARGIN
        normal.sendall(listing(lake))  # the served client's connection is kept
        assert read_answer(normal)[0] == 200


def test_the_next_request_on_a_kept_alive_connection_is_timed_too(lake: RestLake) -> None:
    with connect(lake) as sock:
        sock.sendall(listing(lake))
        assert read_answer(sock)[0] == 200
        started = time.monotonic()
        sock.sendall(HALF_HEADERS)
        assert HEADER_TIMEOUT * 0.9 <= dropped_after(sock, started) <= HEADER_TIMEOUT + MARGIN


def test_an_idle_kept_alive_connection_is_left_to_the_keep_alive_timeout(lake: RestLake) -> None:
    with connect(lake) as sock:
        sock.sendall(listing(lake))
        assert read_answer(sock)[0] == 200
        # Idle past the header timeout (keep-alive is 60 s here): neither answered nor closed.
        sock.settimeout(HEADER_TIMEOUT + 1.0)
        with pytest.raises(TimeoutError):
            sock.recv(65536)
        sock.settimeout(10)
        sock.sendall(listing(lake))
        assert read_answer(sock)[0] == 200


def test_a_request_whose_headers_arrived_is_not_cut_by_the_header_timeout(lake: RestLake) -> None:
    body = b"{}"
    with connect(lake) as sock:
        sock.sendall(
            head(
                "POST",
                "/v1/namespace/p$w$ns/describe",
                {
                    **lake.headers("reader"),
                    "Content-Type": "application/json",
                    "Content-Length": str(len(body)),
                },
            )
        )
        # The app waits for the body (under the longer body timeout): past the header timeout
        # the server has neither answered nor closed the connection.
        sock.settimeout(HEADER_TIMEOUT + 1.0)
        with pytest.raises(TimeoutError):
            sock.recv(65536)
        sock.settimeout(10)
        sock.sendall(body)
        assert read_answer(sock)[0] == 200


def test_slow_clients_holding_every_connection_slot_are_dropped(lake: RestLake) -> None:
    with ExitStack() as held:
        started = time.monotonic()
        slow = [held.enter_context(connect(lake)) for _ in range(SLOW_CLIENTS)]
        for sock in slow:
            sock.sendall(HALF_HEADERS)
        with connect(lake) as refused:  # while they hold the slots: uvicorn's 503
            refused.sendall(listing(lake))
            assert read_answer(refused)[0] == 503
        for sock in slow:
            dropped_after(sock, started)
        with connect(lake) as normal:
            normal.sendall(listing(lake))
            assert read_answer(normal)[0] == 200


@pytest.mark.parametrize("value", [0, 3601])
def test_a_header_timeout_out_of_range_is_a_settings_error_naming_it(tmp_path: Path, value: float) -> None:
    with pytest.raises(SettingsError) as refused:
        load_settings(home=tmp_path, rest_header_timeout_seconds=value)
    assert "REST_HEADER_TIMEOUT_SECONDS" in str(refused.value).upper()
