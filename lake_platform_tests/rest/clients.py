"""Stock clients pointed at a REST server: pylance's RestNamespace and the generated client.
Importable, so spawned client processes can run :func:`append_many`."""

from __future__ import annotations

from typing import Any

import lance  # the tests play Lance clients; the package imports lance only in engine/
import pyarrow as pa
from lance.namespace import RestNamespace
from lance_namespace_urllib3_client import ApiClient, Configuration


def rest_namespace(url: str, token: str) -> RestNamespace:
    return RestNamespace(uri=url, **{"header.Authorization": f"Bearer {token}"})


def api_client(url: str, token: str, *, api_key: bool = False) -> ApiClient:
    config = Configuration(host=url)
    if api_key:
        config.api_key = {"ApiKeyAuth": token}
    else:
        config.access_token = token
    return ApiClient(config)


def rows(ids: list[int], tag: str = "x") -> pa.Table:
    return pa.table({"id": pa.array(ids, pa.int64()), "tag": pa.array([tag] * len(ids), pa.string())})


def append_many(url: str, token: str, table_id: list[str], worker: int, count: int, start: Any) -> None:
    """A client process: wait for ``start``, then append ``count`` one-row batches through REST."""
    ns = rest_namespace(url, token)
    start.wait()
    for i in range(count):
        lance.write_dataset(
            rows([worker * 1000 + i], f"w{worker}"), namespace_client=ns, table_id=table_id, mode="append"
        )
