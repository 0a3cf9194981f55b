"""Whether ``lake up``'s servers can start and whether they run: ports checked before anything
starts, the wait until every server answers, and the watch for one that exits."""

from __future__ import annotations

import socket
import subprocess
import time
import urllib.request
from pathlib import Path
from typing import IO, Protocol

from lake_platform.errors import ServiceUnavailable


class Platform(Protocol):
    """What is watched of a started platform (``launcher.Platform``)."""

    ui_url: str
    flight_address: str
    rest_address: str
    processes: list[subprocess.Popen[bytes]]
    logs: list[IO[bytes]]
    names: list[str]


def check_ports(ports: dict[str, tuple[str, int]]) -> None:
    """InvalidInput when two servers are given one port; ServiceUnavailable naming the server
    when its port cannot be bound (another program holds it): found before anything starts,
    rather than as a child that dies while a readiness check connects to whatever holds the port."""
    from lake_platform.errors import InvalidInput
    from lake_platform.rest.run import listen

    given = list(ports.items())
    for i, (server, (host, port)) in enumerate(given):
        for other, (other_host, other_port) in given[i + 1 :]:
            overlap = host == other_host or {host, other_host} & {"", "0.0.0.0", "::"}
            if port == other_port != 0 and overlap:
                # Each alone is free: checked one at a time, both would pass.
                raise InvalidInput(f"{server} and {other} are both given port {port}")
    for server, (host, port) in ports.items():
        try:
            listen(host, port).close()
        except ServiceUnavailable as exc:
            raise ServiceUnavailable(f"{exc} (for {server})") from None


def exited(platform: Platform, when: str = " during start-up") -> ServiceUnavailable | None:
    """The error naming the first process that exited, with the end of its log; None while all
    run."""
    for name, proc, out in zip(platform.names, platform.processes, platform.logs, strict=True):
        if proc.poll() is not None:
            log = Path(out.name)
            try:
                lines = log.read_text(errors="replace").strip().splitlines()
            except OSError:
                lines = []
            last = f": {lines[-1]}" if lines else ""
            return ServiceUnavailable(
                f"the {name} process exited{when} (exit {proc.returncode}){last}; its log: {log}"
            )
    return None


def wait_code_server(platform: Platform, host: str, port: int, timeout: float) -> None:
    """Until Dagster's code server answers its health check: the webserver and the daemon start
    after it, and find the definitions loaded (they would otherwise start on a location in
    error). A process that exits meanwhile fails the start, as in ``wait_ready``."""
    from lake_platform.up.code_server import serving

    deadline = time.monotonic() + timeout
    while True:
        gone = exited(platform)
        if gone is not None:
            raise gone
        left = deadline - time.monotonic()
        if left <= 0:
            raise ServiceUnavailable(
                f"the Dagster code server ({host}:{port}) did not answer within {timeout:.0f}s"
            )
        # Each check waits (up to a second) for the server to listen: no sleep between them.
        if serving(host, port, wait=min(1.0, left)):
            return


def wait_ready(platform: Platform, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    ui_up = flight_up = rest_up = False
    while time.monotonic() < deadline:
        gone = exited(platform)
        if gone is not None:
            raise gone
        if not ui_up:
            try:
                with urllib.request.urlopen(f"{platform.ui_url}/server_info", timeout=2) as resp:
                    ui_up = resp.status == 200
            except OSError:
                pass
        if not flight_up:
            host, _, port = platform.flight_address.rpartition(":")
            try:
                with socket.create_connection((host, int(port)), timeout=2):
                    flight_up = True
            except OSError:
                pass
        if not rest_up:
            host, _, port = platform.rest_address.rpartition(":")
            try:
                with socket.create_connection((host, int(port)), timeout=2):
                    rest_up = True
            except OSError:
                pass
        if ui_up and flight_up and rest_up:
            return
        time.sleep(0.5)
    raise ServiceUnavailable(
        f"the platform did not answer (Dagster UI {platform.ui_url}: {ui_up}, "
        f"Flight SQL {platform.flight_address}: {flight_up}, "
        f"REST {platform.rest_address}: {rest_up}) within {timeout:.0f}s"
    )


def wait_for_exit(platform: Platform, poll_seconds: float = 1.0) -> ServiceUnavailable:
    """Block until one of the platform's processes exits: the error naming it, with the last
    line of its log."""
    while True:
        gone = exited(platform, when="")
        if gone is not None:
            return gone
        time.sleep(poll_seconds)
