"""The spec (as the pinned client declares it) is whole; each of its operations is routed and answered."""

from __future__ import annotations

import re
from pathlib import Path

import lance_namespace
import pytest
from starlette.routing import Route

from lake_platform.rest import spec
from lake_platform.rest.app import routes
from lake_platform.rest.handlers import HANDLERS, UNSUPPORTED
from lake_platform_tests.rest.conftest import RestLake

DOCS = Path(__file__).resolve().parents[2] / "docs" / "rest.md"


def test_the_spec_has_all_54_operations() -> None:
    ops = spec.operations()
    assert len(ops) == 54  # a shrunken (or grown) spec must be looked at, not silently served
    assert len({o.operation_id for o in ops}) == 54
    # The same operations as the pinned client's abstract interface (its methods, snake_case).
    abc_methods = {
        name
        for name in dir(lance_namespace.LanceNamespace)
        if not name.startswith("_") and name not in ("namespace_id", "create_empty_table")
    }
    snake = {re.sub(r"(?<!^)(?=[A-Z])", "_", o.operation_id).lower() for o in ops}
    assert snake <= abc_methods


def test_every_operation_has_a_route_and_exactly_one_answer() -> None:
    table = {(r.path, m) for r in routes(None) if isinstance(r, Route) for m in (r.methods or ())}  # type: ignore[arg-type]
    missing = [o.operation_id for o in spec.operations() if (o.path, o.method) not in table]
    assert missing == []
    ids = {o.operation_id for o in spec.operations()}
    assert set(HANDLERS) | set(UNSUPPORTED) == ids
    assert set(HANDLERS) & set(UNSUPPORTED) == set()


def test_the_docs_list_exactly_the_unsupported_operations() -> None:
    text = DOCS.read_text()
    section = text.split("## Unsupported operations", 1)[1].split("\n## ", 1)[0]
    listed = set(re.findall(r"^\| `(\w+)` \|", section, re.MULTILINE))
    assert listed == set(UNSUPPORTED)


@pytest.mark.parametrize("operation", sorted(UNSUPPORTED))
def test_an_unsupported_operation_answers_the_spec_unsupported_error(
    rest_lake: RestLake, operation: str
) -> None:
    op = next(o for o in spec.operations() if o.operation_id == operation)
    path = op.path.replace("{id}", "p$w$ns$t").replace("{index_name}", "idx")
    if op.method == "GET":
        resp = rest_lake.get(path)
    elif op.request_type == spec.ARROW_STREAM:
        resp = rest_lake.post(path, headers={"content-type": spec.ARROW_STREAM}, data=b"")
    else:
        resp = rest_lake.post(path, {})
    assert (resp.status_code, resp.json()["code"]) == (406, 0), resp.text
    assert resp.headers["content-type"] == "application/problem+json"
