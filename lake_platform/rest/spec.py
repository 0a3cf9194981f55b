"""The vendored Lance Namespace spec (``spec.yaml``, lance-namespace v0.11.1, the same 54
operations as the pinned 0.13.0 client): the routes are built from it, so an operation the spec
has can never be missing from the server (``lake_platform_tests/rest/test_spec.py``)."""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from importlib import resources
from typing import Any

import yaml

ARROW_STREAM = "application/vnd.apache.arrow.stream"
ARROW_FILE = "application/vnd.apache.arrow.file"
JSON = "application/json"


@dataclass(frozen=True)
class Operation:
    operation_id: str  # e.g. "DescribeTable"
    method: str  # "GET" or "POST"
    path: str  # e.g. "/v1/table/{id}/describe"
    request_type: str | None  # the body's content type, None for no body
    query: tuple[str, ...]  # query-string parameters the spec names


@functools.cache
def spec() -> dict[str, Any]:
    text = resources.files("lake_platform.rest").joinpath("spec.yaml").read_text(encoding="utf-8")
    loaded: dict[str, Any] = yaml.safe_load(text)
    return loaded


@functools.cache
def operations() -> tuple[Operation, ...]:
    doc = spec()
    params = doc.get("components", {}).get("parameters", {})
    found: list[Operation] = []
    for path, item in doc["paths"].items():
        shared = item.get("parameters", [])
        for method, op in item.items():
            if method not in ("get", "post", "put", "delete", "patch"):
                continue
            query = []
            for p in [*shared, *op.get("parameters", [])]:
                resolved = params.get(p["$ref"].rsplit("/", 1)[-1], {}) if "$ref" in p else p
                if resolved.get("in") == "query":
                    query.append(resolved["name"])
            content = op.get("requestBody", {}).get("content", {})
            found.append(
                Operation(
                    operation_id=op["operationId"],
                    method=method.upper(),
                    path=path,
                    request_type=next(iter(content), None),
                    query=tuple(query),
                )
            )
    return tuple(found)


def error_codes() -> dict[int, str]:
    """The spec's ErrorResponse ``code`` enum, as {code: name} from its description."""
    schema = spec()["components"]["schemas"]["ErrorResponse"]["properties"]["code"]
    codes: dict[int, str] = {}
    for match in re.finditer(r"^\s*(\d+) - (\w+):", str(schema.get("description", "")), re.MULTILINE):
        codes[int(match.group(1))] = match.group(2)
    return codes
