"""ASGI plumbing the REST app's observation (``rest/observe.py``) is written with: the ASGI
callable types, and a ``send`` wrapper remembering the response's status."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
App = Callable[[Scope, Receive, Send], Awaitable[None]]


class StatusRecorder:
    """Wraps an ASGI ``send``, remembering the response's status: 500 until the app answers, so
    an app that raises before answering counts as an error."""

    def __init__(self, send: Send) -> None:
        self.send = send
        self.status = 500

    async def __call__(self, message: Message) -> None:
        if message.get("type") == "http.response.start":
            self.status = int(message["status"])
        await self.send(message)
