"""Answers leave in one write (``rest/transport.py``): the head waits for the body, never for
anything else — a HEAD answer, an interim ``100 Continue`` and a closing connection still get
every byte, in order, over a real uvicorn server."""

from __future__ import annotations

import asyncio
import socket
from typing import Any

import requests

from lake_platform.rest.transport import CoalescingTransport, is_response_head
from lake_platform_tests.rest.conftest import RestLake

HEAD = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n"


class Recorder(asyncio.Transport):
    """The socket end: what was written, in which writes."""

    def __init__(self) -> None:
        super().__init__()
        self.writes: list[bytes] = []
        self.closed = False

    def write(self, data: Any) -> None:
        self.writes.append(bytes(data))

    def close(self) -> None:
        self.closed = True

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return f"extra:{name}"


def test_a_head_goes_out_with_its_body_in_one_write() -> None:
    async def run() -> list[bytes]:
        sink = Recorder()
        transport = CoalescingTransport(sink, asyncio.get_running_loop())
        transport.write(HEAD)
        assert sink.writes == []
        transport.write(b"{}")
        assert transport.get_extra_info("peername") == "extra:peername"  # the rest is the socket's
        await asyncio.sleep(0)
        return sink.writes

    assert asyncio.run(run()) == [HEAD + b"{}"]


def test_a_head_without_a_body_is_flushed_at_the_next_turn_and_on_close() -> None:
    async def run() -> tuple[list[bytes], list[bytes], bool]:
        loop = asyncio.get_running_loop()
        alone, closing = Recorder(), Recorder()
        CoalescingTransport(alone, loop).write(HEAD)
        await asyncio.sleep(0)
        second = CoalescingTransport(closing, loop)
        second.write(HEAD)
        second.close()
        return alone.writes, closing.writes, closing.closed

    assert asyncio.run(run()) == ([HEAD], [HEAD], True)


def test_interim_answers_and_body_chunks_are_not_held() -> None:
    assert not is_response_head(b"HTTP/1.1 100 Continue\r\n\r\n")
    assert not is_response_head(b"5\r\nhello\r\n")
    assert not is_response_head(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n{}")
    assert is_response_head(HEAD)
    assert is_response_head(b"HTTP/1.1 404 Not Found\r\n\r\n")


def test_head_and_expect_continue_over_a_real_server(rest_lake: RestLake) -> None:
    # HEAD: uvicorn writes no body at all; the held head must still leave.
    head = requests.head(rest_lake.url + "/v1/projects", headers=rest_lake.headers(), timeout=10)
    assert head.status_code == 200 and head.content == b""
    # Expect: 100-continue: the interim answer must come before the client sends its body.
    port = int(rest_lake.url.rsplit(":", 1)[1])
    body = b'{"id":["p","w","ns","t"]}'
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(
            b"POST /v1/table/p$w$ns$t/describe HTTP/1.1\r\nhost: lake\r\n"
            b"authorization: Bearer " + rest_lake.tokens["writer"].encode() + b"\r\n"
            b"content-type: application/json\r\nexpect: 100-continue\r\n"
            b"content-length: " + str(len(body)).encode() + b"\r\n\r\n"
        )
        interim = sock.recv(4096)
        assert interim.startswith(b"HTTP/1.1 100 Continue\r\n\r\n")
        sock.sendall(body)
        answer = interim[len(b"HTTP/1.1 100 Continue\r\n\r\n") :]
        while b"\r\n\r\n" not in answer or not answer.rstrip().endswith(b"}"):
            chunk = sock.recv(4096)
            assert chunk, "the server closed before answering"
            answer += chunk
    assert answer.startswith(b"HTTP/1.1 404 ")  # no such table, as a problem body
    assert b"application/problem+json" in answer
