"""The app's dispatch: the commit path's routes are matched first, and pure registry reads run on
the event loop only over a SQLite registry (never over DynamoDB, where a read is a network call);
and an answer goes out exactly as Starlette's ``Response`` would send it."""

from __future__ import annotations

import asyncio
import json
import threading
from typing import Any

import pytest
from starlette.responses import Response

from lake_platform.rest import app as rest_app
from lake_platform.rest.request import Reply
from lake_platform.rest.workers import THREAD_PREFIX
from lake_platform_tests.rest.conftest import RestLake


def test_the_commit_path_routes_come_first(rest_lake: RestLake) -> None:
    names = [route.name for route in rest_app.routes(rest_lake.service)]
    assert names[:4] == list(rest_app.HOT_OPERATIONS)
    assert len(names) == len(set(names))  # every route once


def test_pure_reads_run_inline_on_sqlite_only(rest_lake: RestLake, monkeypatch: Any) -> None:
    assert rest_app.inline_reads(rest_lake.service)
    seen: dict[str, str] = {}
    real = rest_lake.service.authenticate

    def spy(headers: Any) -> Any:
        seen[headers.get("x-op", "")] = threading.current_thread().name
        return real(headers)

    monkeypatch.setattr(rest_lake.service, "authenticate", spy)
    describe = rest_lake.post("/v1/table/p$w$ns$t/describe", {}, headers={"x-op": "describe"})
    assert describe.status_code == 404  # no such table: the same answer inline
    versions = rest_lake.post("/v1/table/p$w$ns$t/version/list", {}, headers={"x-op": "versions"})
    assert versions.status_code == 404
    commit = rest_lake.post(
        "/v1/table/p$w$ns$t/version/create", {"version": 1, "manifest_path": "x"}, headers={"x-op": "commit"}
    )
    assert commit.status_code in (400, 404)
    other = rest_lake.post("/v1/table/q$w$ns$t/describe", {}, headers={"x-op": "other"})
    assert (other.status_code, other.json()["code"]) == (404, 4)  # tenancy holds inline too
    # the server's own (event loop) thread
    assert seen["describe"] == seen["versions"] == seen["other"] == "rest-server"
    assert seen["commit"] != "rest-server"  # takes the lease (may wait): a worker thread
    assert seen["commit"].startswith(THREAD_PREFIX)  # of the service's own pool (rest/workers.py)


def test_a_dynamodb_registry_never_runs_handlers_inline() -> None:
    class Store:
        url = "dynamodb://lake"

    class Catalog:
        store = Store()

    class Service:
        catalog = Catalog()

    assert not rest_app.inline_reads(Service())  # type: ignore[arg-type]


def sent(response: Any) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = []

    async def receive() -> Any:
        return {"type": "http.disconnect"}

    async def send(message: Any) -> None:
        messages.append(message)

    asyncio.run(response({"type": "http"}, receive, send))
    return messages


def starlette_answer(result: Any, principal: str) -> Response:
    """What respond() built before rest_app.Answer: a Starlette Response."""
    named = {rest_app.PRINCIPAL_HEADER: principal}
    if isinstance(result, Reply):
        return Response(
            result.content, status_code=result.status, media_type=result.media_type, headers=named
        )
    if result is None:
        return Response(b"", status_code=200, headers=named)
    return Response(json.dumps(result, separators=(",", ":")), media_type="application/json", headers=named)


@pytest.mark.parametrize(
    "result",
    [
        {"version": 3, "location": "s3://b/p/t", "properties": {"ünïcode": "✓"}},
        [1, 2],
        None,
        Reply(b"\x00\x01arrow", "application/vnd.apache.arrow.stream"),
        Reply("plain", "text/plain"),
        Reply("csv", "text/csv; Charset=latin-1"),
        Reply(b"", "application/json", status=204),
        Reply(b"x", "application/json", status=304),
        Reply("{}", "application/json", status=201),
    ],
    ids=repr,
)
@pytest.mark.parametrize("principal", ["etl", "zoë"])
def test_answers_go_out_exactly_as_starlettes_response(result: Any, principal: str) -> None:
    ours = rest_app.respond(result, principal)
    assert isinstance(ours, rest_app.Answer)
    assert sent(ours) == sent(starlette_answer(result, principal))


def test_a_principal_not_latin1_fails_as_with_starlette() -> None:
    with pytest.raises(UnicodeEncodeError):
        starlette_answer({}, "名前")
    with pytest.raises(UnicodeEncodeError):
        rest_app.respond({}, "名前")


def test_a_starlette_response_result_is_named_and_sent_as_it_is() -> None:
    result = Response(b"ok", status_code=202, media_type="text/plain")
    assert rest_app.respond(result, "etl") is result
    start, body = sent(result)
    assert (start["status"], body["body"]) == (202, b"ok")
    assert (b"x-lake-principal", b"etl") in start["headers"]
