"""The app's request pipeline: handlers run on Starlette's thread pool, off the event loop, in the
request's context (a blocking handler never holds up another request), and answers name the
principal they were given for."""

from __future__ import annotations

import asyncio
import json
import threading
from typing import Any

import pytest
from starlette.applications import Starlette
from starlette.responses import Response
from starlette.routing import Route

from lake_platform.observability import context
from lake_platform.rest import app as rest_app
from lake_platform.rest.request import Reply, RestRequest
from lake_platform_tests.rest.conftest import RestLake


def scope_of(path: str, token: str) -> dict[str, Any]:
    return {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "query_string": b"",
        "root_path": "",
        "headers": [(b"host", b"lake"), (b"authorization", f"Bearer {token}".encode())],
        "server": ("127.0.0.1", 2333),
        "client": ("127.0.0.1", 40000),
    }


async def call(app: Any, scope: dict[str, Any]) -> tuple[int, bytes]:
    sent: list[Any] = []

    async def receive() -> Any:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: Any) -> None:
        sent.append(message)

    await app(scope, receive, send)
    return sent[0]["status"], b"".join(m.get("body", b"") for m in sent[1:])


def test_a_blocking_handler_runs_off_the_loop_and_never_holds_up_another_request(rest_lake: RestLake) -> None:
    """``waits`` blocks its thread until ``frees`` has run: on the event loop, ``frees`` could
    never start and ``waits`` would time out (False)."""
    freed = threading.Event()
    seen: dict[str, Any] = {}

    def waits(request: RestRequest) -> Any:
        info = context.current()
        seen["thread"] = threading.current_thread()
        seen["request"] = (info.request_id, info.principal) if info else None
        return {"freed": freed.wait(30)}

    def frees(request: RestRequest) -> Any:
        freed.set()
        return {}

    service = rest_lake.service
    app = Starlette(
        routes=[
            Route("/waits", rest_app.Endpoint(service, waits, name="Waits").answer, methods=["POST"]),
            Route("/frees", rest_app.Endpoint(service, frees, name="Frees").answer, methods=["POST"]),
        ]
    )
    token = rest_lake.tokens["writer"]

    async def both() -> tuple[Any, Any, threading.Thread, str]:
        info, ctx = context.begin("rest", "test")
        try:
            answers = await asyncio.gather(
                call(app, scope_of("/waits", token)), call(app, scope_of("/frees", token))
            )
        finally:
            context.end(ctx)
        return answers[0], answers[1], threading.current_thread(), info.request_id

    (status, body), (other, _), loop_thread, request_id = asyncio.run(both())
    assert (status, json.loads(body), other) == (200, {"freed": True}, 200)
    assert seen["thread"] is not loop_thread
    # the request context reached the thread, with the principal the pipeline identified
    assert seen["request"] == (request_id, "etl")


@pytest.mark.parametrize(
    ("result", "status", "media", "body"),
    [
        (
            {"version": 3, "properties": {"ü": "✓"}},
            200,
            "application/json",
            b'{"version":3,"properties":{"\\u00fc":"\\u2713"}}',
        ),
        (None, 200, None, b""),
        (
            Reply(b"\x00arrow", "application/vnd.apache.arrow.file"),
            200,
            "application/vnd.apache.arrow.file",
            b"\x00arrow",
        ),
        (Reply("7", "text/plain"), 200, "text/plain; charset=utf-8", b"7"),
        (Reply("{}", "application/json", status=201), 201, "application/json", b"{}"),
    ],
    ids=repr,
)
def test_answers_are_compact_and_name_the_principal(
    result: Any, status: int, media: str | None, body: bytes
) -> None:
    answer = rest_app.respond(result, "etl")
    assert (answer.status_code, answer.body) == (status, body)
    assert answer.headers.get("content-type") == media
    assert answer.headers[rest_app.PRINCIPAL_HEADER] == "etl"


def test_a_starlette_response_result_is_named_and_sent_as_it_is() -> None:
    result = Response(b"ok", status_code=202, media_type="text/plain")
    assert rest_app.respond(result, "etl") is result
    assert result.headers[rest_app.PRINCIPAL_HEADER] == "etl"


def test_a_boolean_member_of_the_body_must_be_a_boolean(rest_lake: RestLake) -> None:
    """The spec's flags are JSON booleans: the string "false" was read as true (a version
    listing came back newest first), and is now 400 naming the member; false and null are no flag."""
    import lance

    from lake_platform_tests.rest.clients import rest_namespace, rows

    ns = rest_namespace(rest_lake.url, rest_lake.tokens["writer"])
    for mode in ("create", "append"):
        lance.write_dataset(rows([1]), namespace_client=ns, table_id=["p", "w", "ns", "t"], mode=mode)
    for path, body in [
        ("/v1/table/p$w$ns$t/version/list", {"descending": "false"}),
        ("/v1/table/p$w$ns$t/describe", {"load_detailed_metadata": "no"}),
        ("/v1/table/p$w$ns$t/describe", {"with_table_uri": 1}),
    ]:
        resp = rest_lake.post(path, body)
        assert (resp.status_code, resp.json()["code"]) == (400, 13), (path, body, resp.text)
        assert next(iter(body)) in resp.json()["detail"]
    for flag in (False, None):
        listed = rest_lake.post("/v1/table/p$w$ns$t/version/list", {"descending": flag})
        assert [v["version"] for v in listed.json()["versions"]] == [1, 2], flag
