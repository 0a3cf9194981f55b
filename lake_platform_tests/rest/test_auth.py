"""Identity and tenant scoping on every route group: missing, malformed, expired and revoked
credentials are 401 (code 16); another project's objects look exactly like missing ones."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import lance
import pytest
import requests

from lake_platform.auth.keyfile import endpoint_keys
from lake_platform.auth.tokens import Identity, Sealer
from lake_platform_tests.rest.clients import rest_namespace, rows
from lake_platform_tests.rest.conftest import RestLake, start_rest_lake

ARROW = "application/vnd.apache.arrow.stream"

#: One route per group: (group, method, path template with {t} = a table id / {n} = a namespace id, body)
ROUTES: list[tuple[str, str, str, Any]] = [
    ("namespace", "GET", "/v1/namespace/{n}/list", None),
    ("namespace", "POST", "/v1/namespace/{n}/describe", {}),
    ("namespace", "POST", "/v1/namespace/{n}/exists", {}),
    ("table", "GET", "/v1/namespace/{n}/table/list", None),
    ("table", "POST", "/v1/table/{t}/describe", {}),
    ("table", "POST", "/v1/table/{t}/exists", {}),
    ("table", "POST", "/v1/table/{t}/stats", {}),
    ("version", "POST", "/v1/table/{t}/version/list", {}),
    ("version", "POST", "/v1/table/{t}/version/describe", {"version": 1}),
    ("tag", "POST", "/v1/table/{t}/tags/list", {}),
    ("data", "POST", "/v1/table/{t}/count_rows", {}),
    ("control", "GET", "/v1/trash/{t}", None),
    ("control", "GET", "/v1/warehouses/p$w", None),
]
#: Writes, for the tenant check: another project's writer must see "missing" too.
WRITES: list[tuple[str, str, Any]] = [
    ("/v1/table/{t}/declare", "table", {}),
    ("/v1/table/{t}/drop", "table", None),
    ("/v1/table/{t}/tags/create", "table", {"tag": "x", "version": 1}),
    ("/v1/table/{t}/version/create", "table", {"version": 2, "manifest_path": "_versions/x.manifest"}),
    ("/v1/namespace/{n}$sub/create", "namespace", {}),
    ("/v1/namespace/{n}/drop", "namespace", {}),
    ("/v1/table/{t}/undrop", "table", {}),
]


@pytest.fixture(scope="module")
def lake(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RestLake]:
    """One server for the module: no test changes what another reads (the tokens and the user
    a test adds are its own; the other project's writes must change nothing, which each such
    test checks), and a wrong token throttled by earlier failures is refused all the same."""
    for lake in start_rest_lake(tmp_path_factory.mktemp("auth")):
        ns = rest_namespace(lake.url, lake.tokens["writer"])
        lance.write_dataset(rows([1]), namespace_client=ns, table_id=["p", "w", "ns", "t"], mode="create")
        yield lake


def call(lake: RestLake, method: str, path: str, body: Any, headers: dict[str, str]) -> requests.Response:
    return requests.request(
        method, lake.url + path, json=body if method == "POST" else None, headers=headers, timeout=60
    )


def fill(path: str, t: str = "p$w$ns$t", n: str = "p$w$ns") -> str:
    return path.replace("{t}", t).replace("{n}", n)


def fresh_snapshot(lake: RestLake) -> None:
    """A snapshot whose load began after now: a first refresh may join a load already in flight
    (begun earlier); a second one starts after it."""
    lake.service.snapshots.refresh()
    lake.service.snapshots.refresh()


def expect_401(resp: requests.Response) -> None:
    assert resp.status_code == 401, resp.text
    assert resp.headers["content-type"] == "application/problem+json"
    assert resp.json()["code"] == 16


def expired_login_token(lake: RestLake) -> str:
    keys = endpoint_keys(lake.service.flight.sealing_keys(), lake.settings)
    past = Sealer(keys, clock=lambda: time.time() - 7200)  # issued two hours ago, for an hour
    return past.bearer(Identity("alice", "user", "p", "reader"), 3600)


@pytest.mark.parametrize(("group", "method", "path", "body"), ROUTES, ids=[f"{r[0]}:{r[2]}" for r in ROUTES])
def test_every_route_group_refuses_bad_credentials(
    lake: RestLake, group: str, method: str, path: str, body: Any
) -> None:
    url = fill(path)
    ok = call(lake, method, url, body, lake.headers("reader"))
    assert ok.status_code == 200, ok.text  # the route works with a valid token...
    revoked_id = lake.catalog.access.create_token("gone", project="p", role="reader")
    lake.catalog.access.revoke_token(revoked_id[0].token_id)
    for headers in (
        {},
        {"Authorization": "Basic dXNlcjpwYXNz"},
        {"Authorization": "Bearer "},
        {"Authorization": "Bearer lkt_0123456789abcdef_wrongsecret"},
        {"x-api-key": "not-a-token"},
        {"Authorization": f"Bearer {expired_login_token(lake)}"},
        {"Authorization": f"Bearer {revoked_id[1]}"},
        {"x-api-key": revoked_id[1]},
    ):
        expect_401(call(lake, method, url, body, headers))  # ...and nothing else does


def test_login_tokens_from_a_flight_handshake_work_and_x_api_key_too(lake: RestLake) -> None:
    lake.catalog.access.add_user("alice", project="p", role="reader", password="correct horse")
    _identity, bearer = lake.service.auth.login("alice", "correct horse")  # what Flight's Handshake issues
    fresh_snapshot(lake)  # the user is in the snapshot the revocation check reads
    assert call(lake, "POST", "/v1/table/p$w$ns$t/describe", {}, {"Authorization": f"Bearer {bearer}"}).ok
    resp = call(lake, "POST", "/v1/table/p$w$ns$t/describe", {}, {"x-api-key": lake.tokens["reader"]})
    assert resp.ok and resp.json()["version"] == 1
    # Removing the user revokes its login token once the snapshot has refreshed.
    lake.catalog.access.remove_user("alice")
    fresh_snapshot(lake)
    expect_401(call(lake, "POST", "/v1/table/p$w$ns$t/describe", {}, {"Authorization": f"Bearer {bearer}"}))


def test_a_service_token_revoked_after_use_stops_working_after_a_snapshot_refresh(lake: RestLake) -> None:
    record, token = lake.catalog.access.create_token("short", project="p", role="reader")
    headers = {"Authorization": f"Bearer {token}"}
    assert call(lake, "POST", "/v1/table/p$w$ns$t/describe", {}, headers).ok
    lake.catalog.access.revoke_token(record.token_id)
    fresh_snapshot(lake)
    expect_401(call(lake, "POST", "/v1/table/p$w$ns$t/describe", {}, headers))


@pytest.mark.parametrize(("method", "path", "body"), [(r[1], r[2], r[3]) for r in ROUTES])
def test_another_projects_objects_look_exactly_like_missing_ones(
    lake: RestLake, method: str, path: str, body: Any
) -> None:
    other = lake.headers("other")  # a writer of project q
    existing = call(lake, method, fill(path), body, other)
    missing = call(lake, method, fill(path, "p$w$ns$nope", "p$w$nope"), body, other)
    assert existing.status_code == missing.status_code == 404, existing.text
    assert existing.json()["code"] == missing.json()["code"]
    detail = existing.json()["detail"]
    renamed = (
        detail.replace("p.w.ns.t", "p.w.ns.nope")
        if "p.w.ns.t" in detail
        else detail.replace("p.w.ns", "p.w.nope")
    )
    assert renamed == missing.json()["detail"]  # the same words, only the name differs


@pytest.mark.parametrize(("path", "kind", "body"), WRITES)
def test_another_projects_writer_changes_nothing_and_learns_nothing(
    lake: RestLake, path: str, kind: str, body: Any
) -> None:
    other = lake.headers("other")
    before = [(i.key, i.revision) for p in ("prj/", "whs/", "nsp/", "tbl/", "ver/", "trs/") for i in
              lake.catalog.store.scan_prefix(p)]  # fmt: skip
    existing = call(lake, "POST", fill(path), body, other)
    missing = call(lake, "POST", fill(path, "p$w$ns$nope", "p$w$nope"), body, other)
    code = 4 if kind == "table" else 1
    assert (existing.status_code, existing.json()["code"]) == (404, code), existing.text
    assert (missing.status_code, missing.json()["code"]) == (404, code), missing.text
    after = [(i.key, i.revision) for p in ("prj/", "whs/", "nsp/", "tbl/", "ver/", "trs/") for i in
             lake.catalog.store.scan_prefix(p)]  # fmt: skip
    assert after == before


def test_listings_show_only_the_callers_project(lake: RestLake) -> None:
    assert lake.get("/v1/namespace/$/list", who="other").json()["namespaces"] == ["q"]
    assert lake.get("/v1/namespace/$/list").json()["namespaces"] == ["p"]
    assert lake.get("/v1/table", who="other").json()["tables"] == []
    assert lake.get("/v1/table").json()["tables"] == ["p$w$ns$t"]
    assert lake.get("/v1/projects", who="other").json()["projects"] == ["q"]
    assert lake.get("/v1/warehouses", who="other").json()["warehouses"] == ["q$w"]
    assert lake.get("/v1/trash", who="other").json()["dropped"] == []
