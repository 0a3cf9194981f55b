"""What the spec says each operation answers, read from the pinned generated client.

The Lance Namespace spec is not vendored as a file: ``lance-namespace-urllib3-client`` (pinned
with ``lance-namespace``) is generated from it. ``lake_platform.rest.spec`` reads each operation's
method, path and query parameters from that package's source; this module reads, from the same
source, each operation's ``_response_types_map`` (HTTP status -> the spec's response schema name)
and resolves the schema names to the package's pydantic models, which OpenAPI Generator builds
from the spec's ``components/schemas``. Those models are what success and error bodies are
validated against (jsonschema is not a dependency of this package and there is no spec file to
feed it)."""

from __future__ import annotations

import ast
import functools
import importlib
from dataclasses import dataclass
from importlib import resources
from typing import Any

from lake_platform.rest.spec import CLIENT_API, Operation, operations

MODELS = "lance_namespace_urllib3_client.models"

#: the spec's standard error responses: the HTTP status each error code is answered with.
STATUS_BY_CODE: dict[int, int] = {
    0: 406,
    **dict.fromkeys((1, 4, 6, 8, 10, 11, 12, 22), 404),
    **dict.fromkeys((2, 3, 5, 7, 9, 14, 23), 409),
    13: 400,
    15: 403,
    16: 401,
    17: 503,
}


@dataclass(frozen=True)
class SpecOperation:
    operation: Operation
    responses: dict[str, str | None]  # "200" / "404" / "5XX" -> the schema's name (None: no body)

    @property
    def operation_id(self) -> str:
        return self.operation.operation_id

    @property
    def success_status(self) -> int:
        """The spec's success status: 200, or 201/202 for the asynchronous operations."""
        return min(int(s) for s in self.responses if s.isdigit() and s.startswith("2"))

    @property
    def success_schema(self) -> str | None:
        return self.responses.get(str(self.success_status))


def _snake(camel: str) -> str:
    return "".join("_" + c.lower() if c.isupper() else c for c in camel).lstrip("_")


def _response_maps() -> dict[str, dict[str, str | None]]:
    """{snake operation name: its response map}, from each public operation method."""
    found: dict[str, dict[str, str | None]] = {}
    for module in sorted(resources.files(CLIENT_API).iterdir(), key=lambda p: p.name):
        if not module.name.endswith("_api.py"):
            continue
        tree = ast.parse(module.read_text(encoding="utf-8"))
        for fn in ast.walk(tree):
            if not isinstance(fn, ast.FunctionDef) or fn.name.startswith("_"):
                continue
            for node in ast.walk(fn):
                target = node.target if isinstance(node, ast.AnnAssign) else None
                if getattr(target, "id", None) == "_response_types_map" and node.value is not None:
                    found.setdefault(fn.name, ast.literal_eval(node.value))  # type: ignore[union-attr]
    return found


@functools.cache
def spec_operations() -> dict[str, SpecOperation]:
    """Every operation of the spec by operation id, with its response schemas."""
    maps = _response_maps()
    out = {}
    for op in operations():
        responses = maps.get(_snake(op.operation_id))
        if responses is None:
            raise RuntimeError(f"{CLIENT_API}: no response map for {op.operation_id}")
        out[op.operation_id] = SpecOperation(op, responses)
    return out


def model(schema: str) -> Any:
    """The generated pydantic model of a spec schema (``DescribeTableResponse``), or None when the
    schema is a primitive (``str``, ``int``, ``bytearray``, ``Dict[str, str]``)."""
    module = importlib.import_module(MODELS)
    return getattr(module, schema, None)
