"""Typed errors to gRPC statuses, with a short message and never a traceback or a path.

Every :class:`~lake_platform.errors.LakeError` names its gRPC status (``grpc_status``); the
transport answers with exactly that code. The message ends with the platform's error name and
stable code, e.g. ``[InvalidTableState, code 19]``, so a client can tell two errors of one status
apart without parsing prose. Anything else is a bug: it is logged with its traceback on the
server and answered INTERNAL with a generic message.
"""

from __future__ import annotations

import logging

import grpc

from lake_platform.errors import Internal, LakeError

log = logging.getLogger(__name__)


def status_of(exc: BaseException) -> tuple[grpc.StatusCode, str]:
    """The gRPC status code and message to answer ``exc`` with."""
    if not isinstance(exc, LakeError):
        log.error("unexpected error in the Flight server", exc_info=exc)
        exc = Internal("internal error; see the server log")
    return grpc.StatusCode[exc.grpc_status], f"{exc.message} [{type(exc).__name__}, code {int(exc.code)}]"
