"""The Lance Namespace operations this server routes, read from the pinned generated client.

``lance-namespace-urllib3-client`` (pinned with ``lance-namespace``) is generated from the Lance
Namespace spec: each operation is one ``_<name>_serialize`` method naming its HTTP method,
path, query parameters and body content type. Reading them from the installed package (its
source, never by importing or calling it) gives the spec's 54 operations without a copy of the
spec in this repository, and moves with the pin: an operation a newer client adds (or drops)
fails ``lake_platform_tests/rest/test_spec.py`` until it is routed (or looked at). The error
codes come from the same pin's ``lance_namespace.errors.ErrorCode``."""

from __future__ import annotations

import ast
import functools
from dataclasses import dataclass
from importlib import resources

ARROW_STREAM = "application/vnd.apache.arrow.stream"
ARROW_FILE = "application/vnd.apache.arrow.file"
JSON = "application/json"

CLIENT_API = "lance_namespace_urllib3_client.api"


@dataclass(frozen=True)
class Operation:
    operation_id: str  # e.g. "DescribeTable"
    method: str  # "GET" or "POST"
    path: str  # e.g. "/v1/table/{id}/describe"
    request_type: str | None  # the body's content type, None for no body
    query: tuple[str, ...]  # query-string parameters the spec names


def _camel(snake: str) -> str:
    return "".join(word.capitalize() for word in snake.split("_"))


def _operation(name: str, serialize: ast.FunctionDef) -> Operation:
    method = path = None
    query: list[str] = []
    content: list[str] = []
    for node in ast.walk(serialize):
        if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Attribute):
            continue
        if node.func.attr == "param_serialize":
            kwargs = {kw.arg: kw.value for kw in node.keywords}
            method = ast.literal_eval(kwargs["method"])
            path = ast.literal_eval(kwargs["resource_path"])
        elif node.func.attr == "append" and getattr(node.func.value, "id", "") == "_query_params":
            query.append(ast.literal_eval(node.args[0].elts[0]))  # type: ignore[attr-defined]
        elif node.func.attr == "select_header_content_type":
            content = list(ast.literal_eval(node.args[0]))
    if method is None or path is None:
        raise RuntimeError(f"{CLIENT_API}: _{name}_serialize names no method and path")
    return Operation(_camel(name), method, path, content[0] if content else None, tuple(query))


@functools.cache
def operations() -> tuple[Operation, ...]:
    """Every operation once (the client repeats some under several tag modules), in path order."""
    found: dict[str, Operation] = {}
    for module in sorted(resources.files(CLIENT_API).iterdir(), key=lambda p: p.name):
        if not module.name.endswith("_api.py"):
            continue
        tree = ast.parse(module.read_text(encoding="utf-8"))
        for cls in (n for n in tree.body if isinstance(n, ast.ClassDef)):
            for fn in cls.body:
                if (
                    isinstance(fn, ast.FunctionDef)
                    and fn.name.startswith("_")
                    and fn.name.endswith("_serialize")
                ):
                    op = _operation(fn.name[1 : -len("_serialize")], fn)
                    if found.setdefault(op.operation_id, op) != op:
                        raise RuntimeError(f"{CLIENT_API}: {op.operation_id} is defined two different ways")
    return tuple(sorted(found.values(), key=lambda o: (o.path, o.method)))


def error_codes() -> dict[int, str]:
    """The spec's ErrorResponse ``code`` enum, as {code: name} in the spec's spelling
    (``Unsupported``, ``TableNotFound``, ...)."""
    from lance_namespace.errors import ErrorCode

    return {int(code): _camel(code.name.lower()) for code in ErrorCode}
