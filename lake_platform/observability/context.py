"""The request being served on this thread: id, surface, method, and (once authenticated) the
principal and project. Log records and audit records read it; nothing else depends on it."""

from __future__ import annotations

import secrets
from contextvars import ContextVar, Token
from dataclasses import dataclass, field


@dataclass
class RequestInfo:
    surface: str
    method: str
    request_id: str = field(default_factory=lambda: secrets.token_hex(8))
    principal: str | None = None
    project: str | None = None


_current: ContextVar[RequestInfo | None] = ContextVar("lake_request", default=None)


def begin(surface: str, method: str) -> tuple[RequestInfo, Token[RequestInfo | None]]:
    info = RequestInfo(surface, method)
    return info, _current.set(info)


def end(token: Token[RequestInfo | None]) -> None:
    _current.reset(token)


def current() -> RequestInfo | None:
    return _current.get()


def identify(principal: str, project: str | None) -> None:
    """Called once the request is authenticated (no-op outside a request)."""
    info = _current.get()
    if info is not None:
        info.principal, info.project = principal, project
