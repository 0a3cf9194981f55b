"""The hot operations' dispatch ahead of Starlette's router (``rest/dispatch.py``): it takes
exactly the requests the router would give those routes, and every other request answers
byte for byte what the router alone answers."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from starlette.routing import Match

from lake_platform.rest import app as rest_app
from lake_platform.rest.dispatch import HotRoutes
from lake_platform_tests.rest.conftest import RestLake

#: Paths around the hot routes: taken, and near misses the router must decide.
PATHS = [
    "/v1/table/p$w$ns$t/describe",
    "/v1/table/p$w$ns$t/version/list",
    "/v1/table/p$w$ns$t/version/create",
    "/v1/table/p$w$ns$t/version/describe",
    "/v1/table/p.w.ns.t/describe",
    "/v1/table//describe",
    "/v1/table/p$w$ns$t/describe/",
    "/v1/table/p$w$ns$t/describe\n",
    "/v1/table/p/w/describe",
    "/v1/table/p$w$ns$t/version",
    "/v1/table/p$w$ns$t/version/list/x",
    "/v1/table/p$w$ns$t/nosuch",
    "/v1/table/p$w$ns$t/undrop",
    "/v1/table/p$w$ns$t/count_rows",
    "/v1/table/p$w$ns$t",
    "/v1/table/",
    "/v1/tables/p$w$ns$t/describe",
    "/v1/namespace/p$w$ns/describe",
    "/v2/table/p$w$ns$t/describe",
]


def scope_of(method: str, path: str, *, headers: list[tuple[bytes, bytes]] = (), root: str = "") -> Any:
    return {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": method,
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "query_string": b"",
        "root_path": root,
        "headers": [(b"host", b"lake"), *headers],
        "server": ("127.0.0.1", 2333),
        "client": ("127.0.0.1", 40000),
    }


def router_route(app: Any, scope: Any) -> Any:
    """The route Starlette's router would run for ``scope`` (the first full match), if any."""
    for route in app.router.routes:
        match, _ = route.matches(scope)
        if match == Match.FULL:
            return route
    return None


def starlette_app(built: Any) -> Any:
    return built.app.app  # observe -> HotRoutes -> Starlette


async def answer(app: Any, scope: Any, body: bytes = b"{}") -> tuple[int, list[Any], bytes]:
    sent: list[Any] = []
    delivered = False

    async def receive() -> Any:
        nonlocal delivered
        if delivered:
            await asyncio.Event().wait()  # the client stays connected
        delivered = True
        return {"type": "http.request", "body": body, "more_body": False}

    async def send(message: Any) -> None:
        sent.append(message)

    await app(dict(scope), receive, send)
    start = sent[0]
    return start["status"], sorted(start["headers"]), b"".join(m.get("body", b"") for m in sent[1:])


@pytest.mark.parametrize("method", ["POST", "GET", "PUT"])
def test_the_dispatch_takes_exactly_what_the_router_would_give_a_hot_route(
    rest_lake: RestLake, method: str
) -> None:
    built = rest_app.build_app(rest_lake.service)
    hot: HotRoutes = built.app
    app = starlette_app(built)
    for path in PATHS:
        for root in ("", "/lake"):
            scope = scope_of(method, path, root=root)
            taken = hot.match(scope)
            if taken is not None:
                assert taken is router_route(app, scope), (method, path)
                assert taken.name in rest_app.HOT_OPERATIONS
    taken = {path for path in PATHS if hot.match(scope_of(method, path))}
    expected = set(PATHS[:5]) if method == "POST" else set()
    assert taken == expected


def test_other_requests_answer_exactly_what_the_router_answers(rest_lake: RestLake) -> None:
    built = rest_app.build_app(rest_lake.service)
    router_only = rest_app.observed_app(starlette_app(built))
    auth = [(b"authorization", f"Bearer {rest_lake.tokens['writer']}".encode())]
    for method in ("POST", "GET"):
        for path in PATHS:
            for headers in (auth, []):
                scope = scope_of(method, path, headers=[(b"content-type", b"application/json"), *headers])
                fast = asyncio.run(answer(built, scope))
                slow = asyncio.run(answer(router_only, scope))
                assert fast == slow, (method, path)
                if fast[0] >= 400:
                    assert (b"content-type", b"application/problem+json") in fast[1], (method, path)


def test_a_hot_request_never_reaches_the_router(rest_lake: RestLake, monkeypatch: Any) -> None:
    built = rest_app.build_app(rest_lake.service)
    hot: HotRoutes = built.app
    reached: list[str] = []
    starlette = hot.app

    async def spy(scope: Any, receive: Any, send: Any) -> None:
        reached.append(scope["path"])
        await starlette(scope, receive, send)

    monkeypatch.setattr(hot, "app", spy)
    auth = [(b"authorization", f"Bearer {rest_lake.tokens['writer']}".encode())]
    status, _, body = asyncio.run(
        answer(built, scope_of("POST", "/v1/table/p$w$ns$t/describe", headers=auth))
    )
    assert status == 404 and b'"code":4' in body.replace(b" ", b"")  # no such table, as a problem
    assert reached == []
    asyncio.run(answer(built, scope_of("POST", "/v1/table/p$w$ns$t/nosuch", headers=auth)))
    assert reached == ["/v1/table/p$w$ns$t/nosuch"]


def test_the_hot_routes_must_be_the_routers_first(rest_lake: RestLake) -> None:
    table = rest_app.routes(rest_lake.service)
    with pytest.raises(ValueError, match="first"):
        HotRoutes(None, list(reversed(table)), rest_app.HOT_OPERATIONS)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="POST"):
        undrop = [r for r in table if r.name == "ListProjects"]
        HotRoutes(None, undrop, ("ListProjects",))  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "raw",
    [
        b"",
        b"delimiter=%24&limit=1&descending=true",
        b"limit=1&limit=2",
        b"a=&b",
        b"delimiter=.&x=%2F%20y+z",
        b"%ff=%fe",
    ],
)
def test_query_parameters_read_as_starlette_reads_them(raw: bytes) -> None:
    from starlette.requests import Request

    scope = {**scope_of("POST", "/v1/table/x/describe"), "query_string": raw}
    expected = dict(Request(scope).query_params)
    assert dict(rest_app.query_map(scope)) == expected
    assert dict(rest_app.query_map(scope)) == expected  # the cached answer too


def test_a_cached_query_cannot_be_changed_by_a_request_and_the_cache_is_bounded() -> None:
    scope = {**scope_of("POST", "/v1/table/x/describe"), "query_string": b"delimiter=."}
    params = rest_app.query_map(scope)
    with pytest.raises(TypeError):
        params["delimiter"] = "$"  # type: ignore[index]
    assert rest_app.query_map(scope)["delimiter"] == "."
    for n in range(3 * rest_app._QUERY_CACHE_SIZE):
        rest_app.query_map({**scope, "query_string": b"limit=%d" % n})
    assert len(rest_app._QUERIES) <= rest_app._QUERY_CACHE_SIZE
    long = b"page_token=" + b"x" * rest_app._QUERY_CACHE_MAX_BYTES
    assert rest_app.query_map({**scope, "query_string": long})["page_token"].startswith("x")
    assert long not in rest_app._QUERIES
