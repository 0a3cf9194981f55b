"""Faults injected into a DynamoDB store's requests through botocore's public event hooks
(``before-send``): an error answer made here in DynamoDB's JSON form, and a request applied by
the (moto) server whose answer the test then replaces, as a lost response is."""

from __future__ import annotations

import json
import urllib.request
from collections.abc import Iterator
from typing import Any

from botocore.awsrequest import AWSPreparedRequest, AWSResponse


class _Body:
    def __init__(self, body: bytes) -> None:
        self.body = body

    def stream(self, **_: Any) -> Iterator[bytes]:
        yield self.body


def error_response(request: AWSPreparedRequest, status: int, error_type: str, **fields: Any) -> AWSResponse:
    """DynamoDB's answer ``error_type`` (e.g. InternalServerError) to ``request``, unsent."""
    body = json.dumps(
        {"__type": f"com.amazonaws.dynamodb.v20120810#{error_type}", "message": "injected", **fields}
    )
    headers = {"Content-Type": "application/x-amz-json-1.0"}
    return AWSResponse(request.url, status, headers, _Body(body.encode()))


def apply(request: AWSPreparedRequest) -> None:
    """Send ``request`` to the server for real (it is applied); its answer is dropped."""
    forward = urllib.request.Request(request.url, data=request.body, headers=dict(request.headers))
    urllib.request.build_opener(urllib.request.ProxyHandler({})).open(forward, timeout=10).read()
