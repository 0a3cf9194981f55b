"""A REST server on a free loopback port (uvicorn in a thread of the test process) over a catalog
on a fresh home with project ``p`` (warehouse ``p.w``, namespace ``p.w.ns``) and project ``q``
(``q.w.ns``), and service tokens for each."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import requests

from lake_platform.catalog.catalog import Catalog
from lake_platform.registry.factory import open_metastore
from lake_platform.registry.store import MetaStore
from lake_platform.rest.app import build_app
from lake_platform.rest.run import uvicorn_config
from lake_platform.rest.server import RestService
from lake_platform.settings import LakeSettings, load_settings
from lake_platform_tests.servers import free_port


@dataclass
class RestLake:
    settings: LakeSettings
    catalog: Catalog
    service: RestService
    url: str
    tokens: dict[str, str] = field(default_factory=dict)

    def headers(self, who: str = "writer") -> dict[str, str]:
        return {"Authorization": f"Bearer {self.tokens[who]}"}

    def post(self, path: str, body: Any = None, who: str = "writer", **kwargs: Any) -> requests.Response:
        headers = {**self.headers(who), **kwargs.pop("headers", {})}
        return requests.post(self.url + path, json=body, headers=headers, timeout=60, **kwargs)

    def get(self, path: str, who: str = "writer", **kwargs: Any) -> requests.Response:
        return requests.get(self.url + path, headers=self.headers(who), timeout=60, **kwargs)


class ServerThread:
    def __init__(self, settings: LakeSettings, app: Any) -> None:
        import uvicorn

        self.server = uvicorn.Server(uvicorn_config(settings, app))
        self.thread = threading.Thread(target=self.server.run, name="rest-server", daemon=True)

    def start(self) -> None:
        self.thread.start()
        # uvicorn sets `started` once the socket listens; the thread ends early if it cannot bind.
        while not self.server.started:
            if not self.thread.is_alive():
                raise RuntimeError("the REST server did not start")
            self.thread.join(0.01)

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(30)


def rest_settings(home: Path, **overrides: Any) -> LakeSettings:
    return load_settings(home=home, rest_port=free_port(), **overrides)


@pytest.fixture
def rest_lake(tmp_path: Path) -> Iterator[RestLake]:
    yield from start_rest_lake(tmp_path)


def start_rest_lake(
    tmp_path: Path, store: Callable[[MetaStore], MetaStore] | None = None, **overrides: Any
) -> Iterator[RestLake]:
    """``store``: what the catalog reads the registry through, given the registry (a wrapper
    counting its reads, say)."""
    settings = rest_settings(tmp_path / "home", **overrides)
    registry = open_metastore(settings)
    catalog = Catalog(settings, registry if store is None else store(registry))
    for project in ("p", "q"):
        catalog.containers.create_project(project)
        catalog.containers.create_warehouse(f"{project}.w")
        catalog.containers.create_namespace(f"{project}.w.ns")
    tokens = {
        "writer": catalog.access.create_token("etl", project="p", role="writer")[1],
        "reader": catalog.access.create_token("viewer", project="p", role="reader")[1],
        "admin": catalog.access.create_token("boss", project="p", role="admin")[1],
        "other": catalog.access.create_token("qwriter", project="q", role="writer")[1],
    }
    service = RestService(settings, catalog=catalog)
    server = ServerThread(settings, build_app(service))
    server.start()
    try:
        yield RestLake(settings, catalog, service, f"http://127.0.0.1:{settings.rest_port}", tokens)
    finally:
        server.stop()
        catalog.close()
        registry.close()  # a wrapper need not close what it wraps
