"""The kit's HTTP client: one operation of the spec per call, answers kept raw.

urllib3 is the transport the spec's own generated client uses (a dependency of the pinned
``lance-namespace``), so the kit adds none. Answers are not interpreted here: the checks look at
the status, the content type and the body themselves."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote, urlencode

import urllib3

from lake_platform.conformance.spec import SpecOperation, spec_operations

DEFAULT_DELIMITER = "$"


@dataclass(frozen=True)
class Answer:
    operation_id: str
    method: str
    url: str
    status: int
    content_type: str  # the media type without parameters, lower case
    body: bytes

    def json(self) -> Any:
        """The body as JSON, or raises ValueError."""
        return json.loads(self.body)

    def describe(self) -> str:
        return f"{self.status} {self.content_type or '-'} {self.body[:200]!r}"


class NamespaceClient:
    """Sends the spec's operations to one server, with an optional bearer token."""

    def __init__(self, url: str, token: str | None = None, timeout: float = 60.0) -> None:
        self.url = url.rstrip("/")
        self.headers = {"Authorization": f"Bearer {token}"} if token else {}
        self.pool = urllib3.PoolManager(timeout=urllib3.Timeout(total=timeout), retries=False)

    def close(self) -> None:
        self.pool.clear()

    def call(
        self,
        operation_id: str,
        ident: list[str] | None = None,
        body: Any = None,
        *,
        query: dict[str, Any] | None = None,
        raw: bytes | None = None,
        content_type: str | None = None,
        delimiter: str = DEFAULT_DELIMITER,
        path_params: dict[str, str] | None = None,
    ) -> Answer:
        """One request of ``operation_id``: ``ident`` joined with ``delimiter`` in the path (the
        root when empty), ``body`` as JSON, or ``raw`` bytes as ``content_type``."""
        op: SpecOperation = spec_operations()[operation_id]
        path = op.operation.path
        if "{id}" in path:
            path = path.replace("{id}", quote(delimiter.join(ident or []) or delimiter, safe=""))
        for name, value in (path_params or {}).items():
            path = path.replace("{" + name + "}", quote(value, safe=""))
        params = dict(query or {})
        if delimiter != DEFAULT_DELIMITER:
            params["delimiter"] = delimiter
        if params:
            path += "?" + urlencode({k: _query_value(v) for k, v in params.items()})
        headers = dict(self.headers)
        data: bytes | None = None
        if raw is not None:
            data = raw
            headers["Content-Type"] = content_type or op.operation.request_type or "application/json"
        elif body is not None:
            data = json.dumps(body).encode()
            headers["Content-Type"] = "application/json"
        url = self.url + path
        resp = self.pool.request(op.operation.method, url, body=data, headers=headers)
        kind = (resp.headers.get("content-type") or "").split(";")[0].strip().lower()
        return Answer(operation_id, op.operation.method, url, resp.status, kind, resp.data)


def _query_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)
