"""Serve the REST app under uvicorn until SIGINT/SIGTERM (uvicorn's graceful shutdown)."""

from __future__ import annotations

import socket
from collections.abc import Callable
from typing import Any

from lake_platform.errors import ServiceUnavailable
from lake_platform.settings import LakeSettings


def uvicorn_config(settings: LakeSettings, app: Any, **overrides: Any) -> Any:
    import uvicorn
    from uvicorn.protocols.http.auto import AutoHTTPProtocol

    from lake_platform.rest.header_timeout import HeaderDeadlines

    # uvicorn has no timeout for a request's headers: this wrapper of its own protocol is one.
    deadlines = HeaderDeadlines(settings.rest_header_timeout_seconds)
    options: dict[str, Any] = {
        "http": deadlines.protocol(AutoHTTPProtocol),
        "host": settings.rest_host,
        "port": settings.rest_port,
        "log_level": "warning",
        "access_log": False,
        "lifespan": "on",
        # Nothing reads the client address: no X-Forwarded-* middleware on every request (and the
        # header timeout finds a request's connection by the address uvicorn saw).
        "proxy_headers": False,
        # Beyond this many open connections (or running requests) uvicorn answers 503 itself; a
        # connection that never finishes its headers holds a slot until the header timeout.
        "limit_concurrency": settings.rest_max_connections,
        "timeout_keep_alive": settings.rest_keep_alive_seconds,
    }
    if settings.rest_tls_cert_file is not None:
        options["ssl_certfile"] = str(settings.rest_tls_cert_file)
        options["ssl_keyfile"] = str(settings.rest_tls_key_file)
    options.update(overrides)
    return uvicorn.Config(deadlines.app(app), **options)


def listen(host: str, port: int) -> socket.socket:
    """The listening socket, bound before anything starts: a busy port is a typed error."""
    try:
        family, kind, proto, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
        sock = socket.socket(family, kind, proto)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
    except OSError as exc:
        raise ServiceUnavailable(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None
    return sock


def serve(settings: LakeSettings, listening: Callable[[str, int], None] | None = None) -> None:
    """Serve until Ctrl-C or SIGTERM. ``listening(host, port)`` is called once uvicorn accepts
    connections; a busy port, a busy metrics port or a failed start-up raises (or exits)
    before it."""
    import uvicorn

    from lake_platform.rest.app import build_app
    from lake_platform.rest.server import RestService, check_bind

    check_bind(settings)
    sock = listen(settings.rest_host, settings.rest_port)
    service = RestService(settings)
    try:
        service.start_metrics()  # before uvicorn: a busy metrics port is a typed error, not a log line
        host, port = sock.getsockname()[:2]

        class Server(uvicorn.Server):
            async def startup(self, sockets: list[socket.socket] | None = None) -> None:
                await super().startup(sockets)
                if self.started and listening is not None:
                    listening(host, port)

        Server(uvicorn_config(settings, build_app(service))).run(sockets=[sock])
    finally:
        service.close()
        sock.close()
