"""``/metrics`` over HTTP: prometheus_client's own server on its own port (``LAKE_METRICS_PORT``),
so a scrape never competes with gRPC's workers or the REST server's event loop; one per address
in a process, shared by the surfaces that ask for it."""

from __future__ import annotations

import threading

from lake_platform.observability.metrics import REGISTRY


class MetricsServer:
    """``/metrics`` over HTTP on its own port, in a daemon thread."""

    def __init__(self, host: str, port: int) -> None:
        from prometheus_client import start_http_server

        from lake_platform.errors import ServiceUnavailable

        try:
            self._server, self._thread = start_http_server(port, addr=host, registry=REGISTRY)
        except OSError as exc:
            raise ServiceUnavailable(
                f"cannot serve metrics on {host}:{port} (LAKE_METRICS_HOST, LAKE_METRICS_PORT): "
                f"{exc.strerror}"
            ) from None
        self.host = host
        self.port: int = self._server.server_port

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}/metrics"

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)

    def __enter__(self) -> MetricsServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


class SharedMetricsServer:
    """One ``/metrics`` per configured address in a process: the Flight endpoint and the REST
    catalog in one process both ask for LAKE_METRICS_PORT and share it (the registry is shared
    anyway); it stops when the last user stops it."""

    def __init__(self, server: MetricsServer, key: tuple[str, int]) -> None:
        self.server, self.key, self.users = server, key, 1
        self.port, self.host = server.port, server.host

    @property
    def url(self) -> str:
        return self.server.url

    def stop(self) -> None:
        with _shared_lock:
            self.users -= 1
            if self.users > 0:
                return
            _shared.pop(self.key, None)
        self.server.stop()

    def __enter__(self) -> SharedMetricsServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


_shared: dict[tuple[str, int], SharedMetricsServer] = {}
_shared_lock = threading.Lock()


#: What start_metrics_server returns: has ``host``, ``port``, ``url`` and ``stop()``.
Exposition = MetricsServer | SharedMetricsServer


def start_metrics_server(host: str, port: int | None) -> Exposition | None:
    """Serve ``/metrics`` when ``port`` is set (0: any free port, never shared); None means
    metrics are off."""
    if port is None:
        return None
    if port == 0:
        return MetricsServer(host, port)
    with _shared_lock:
        shared = _shared.get((host, port))
        if shared is not None:
            shared.users += 1
            return shared
        shared = _shared[(host, port)] = SharedMetricsServer(MetricsServer(host, port), (host, port))
        return shared
