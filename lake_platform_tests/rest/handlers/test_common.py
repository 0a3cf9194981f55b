"""Paging shared by every listing (``handlers/common.py`` over ``catalog/listings.py``): a bad
``limit`` (below 1, no integer, past 64 bits) or ``page_token`` is InvalidInput naming it,
before the registry is read: not after the whole listing was read (a ``limit`` of -1 read all of
it, then refused), nor after the container was looked up (a bad limit on a missing namespace
was 404)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from lake_platform_tests.flight.helpers import CountingStore
from lake_platform_tests.rest.clients import rows
from lake_platform_tests.rest.conftest import RestLake, start_rest_lake
from lake_platform_tests.rest.handlers.events import NAME, TP, problem

#: Each listing of the spec and of lake's own routes: (method, path).
LISTINGS = [
    ("GET", "/v1/namespace/p/list"),  # a project's warehouses (LakeNamespace's listing)
    ("GET", "/v1/namespace/p$w/list"),  # a warehouse's namespaces
    ("GET", "/v1/namespace/p$w$ns/list"),
    ("GET", "/v1/namespace/p$w$ns/table/list"),
    ("GET", "/v1/table"),
    ("GET", "/v1/projects"),
    ("GET", "/v1/warehouses"),
    ("POST", f"/v1/table/{TP}/tags/list"),
    ("POST", f"/v1/table/{TP}/branches/list"),
    ("POST", f"/v1/table/{TP}/version/list"),
]
#: Limits a query string may carry that are no page size.
BAD_LIMITS = ["-1", "0", "-9223372036854775808", "two", "1.5", "true", "99999999999999999999999"]


@pytest.fixture
def lake(tmp_path: Path) -> Iterator[tuple[RestLake, CountingStore]]:
    wrapped: list[CountingStore] = []

    def counting(store: Any) -> CountingStore:
        wrapped.append(CountingStore(store))
        return wrapped[0]

    for lake in start_rest_lake(tmp_path, store=counting):
        lake.catalog.containers.create_namespace("p.w.ns.sub")
        lake.catalog.tables.create_table(NAME, rows([1, 2]).to_reader())
        lake.catalog.tags.create_tag(NAME, "t1", 1)
        lake.catalog.branches.create_branch(NAME, "dev")
        yield lake, wrapped[0]


def send(lake: RestLake, method: str, path: str, **kwargs: Any) -> Any:
    return lake.post(path, None, **kwargs) if method == "POST" else lake.get(path, **kwargs)


@pytest.mark.parametrize(("method", "path"), LISTINGS)
def test_a_bad_limit_is_refused_before_the_registry_is_read(
    lake: tuple[RestLake, CountingStore], method: str, path: str
) -> None:
    rest, store = lake
    listed = store.scans
    assert send(rest, method, path, who="admin", params={"limit": "1"}).status_code == 200
    assert store.scans > listed  # a listing is read with scans: counted here
    for limit in BAD_LIMITS:
        before = store.scans
        resp = send(rest, method, path, who="admin", params={"limit": limit})
        assert problem(resp) == (400, 13), (limit, resp.text)
        assert "limit" in resp.json()["detail"], resp.text
        assert store.scans == before, limit  # nothing of the listing read


@pytest.mark.parametrize(
    ("method", "path", "status"),
    [
        ("GET", "/v1/namespace/p$w$nope/list", 404),
        ("GET", "/v1/namespace/p$w$nope/table/list", 404),
        ("GET", "/v1/namespace/p$nope/table/list", 404),
        ("GET", "/v1/namespace/p$w/table/list", 200),  # no tables directly in a warehouse
        ("POST", "/v1/table/p$w$ns$nope/tags/list", 404),
        ("POST", "/v1/table/p$w$ns$nope/branches/list", 404),
        ("POST", "/v1/table/p$w$ns$nope/version/list", 404),
    ],
)
def test_a_bad_limit_is_refused_before_its_container_is_looked_up(
    lake: tuple[RestLake, CountingStore], method: str, path: str, status: int
) -> None:
    rest, _ = lake
    assert send(rest, method, path, params={"limit": "1"}).status_code == status
    resp = send(rest, method, path, params={"limit": "0"})
    assert problem(resp) == (400, 13) and "limit" in resp.json()["detail"], resp.text


def test_a_bad_limit_in_a_json_body_is_refused_before_the_registry_is_read(
    lake: tuple[RestLake, CountingStore],
) -> None:
    """ListTableIndices takes its paging in a JSON body: a limit of another JSON type too; a
    missing table with a bad limit is the limit's 400, not 404."""
    rest, store = lake
    for path in (f"/v1/table/{TP}/index/list", "/v1/table/p$w$ns$nope/index/list"):
        assert rest.post(path, {"limit": 1}).status_code in (200, 404)
        for limit in [-1, 0, "2", 2.5, True, [1], {"n": 1}, 2**63]:
            before = store.scans
            resp = rest.post(path, {"limit": limit})
            assert problem(resp) == (400, 13), (limit, resp.text)
            assert store.scans == before, limit
            if limit != 2**63:  # that one the body's parser refuses (no JSON integer of ours)
                assert "limit" in resp.json()["detail"], resp.text
