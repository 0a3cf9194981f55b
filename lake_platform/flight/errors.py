"""Typed errors to gRPC statuses, with a short message and never a traceback or a path.

pyarrow turns Flight exception classes into clean statuses (UNAUTHENTICATED, PERMISSION_DENIED,
UNAVAILABLE, CANCELLED, DEADLINE_EXCEEDED, INTERNAL). INVALID_ARGUMENT, NOT_FOUND and
UNIMPLEMENTED exist only through ValueError, KeyError and NotImplementedError, whose status
detail pyarrow fills with ``traceback.format_exception(...)``; the classes below make that
formatting fail, so pyarrow falls back to the bare type name ("Python exception: NotFound").
Statuses pyarrow cannot produce at all go out as the nearest one it can: RESOURCE_EXHAUSTED and
ABORTED (retry later) as UNAVAILABLE, FAILED_PRECONDITION and ALREADY_EXISTS as INTERNAL. The
message always ends with the platform's error name and stable code, e.g. ``[InvalidTableState,
code 19]``. (A ``google.rpc.Status`` in ``grpc-status-details-bin`` cannot carry the exact code
either: grpc-go, so ADBC, rejects details whose code differs from the status.)
"""

from __future__ import annotations

import logging
from typing import Any

import pyarrow.flight as fl

from lake_platform.errors import Internal, LakeError, Unauthenticated

log = logging.getLogger(__name__)

class _NoTraceback:
    """Formatting a traceback of this exception fails, so none reaches the wire."""

    @property
    def __cause__(self) -> Any:  # type: ignore[override]
        raise RuntimeError("not formatted")

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


class InvalidArgument(_NoTraceback, ValueError):
    pass


class NotFound(_NoTraceback, KeyError):
    pass


class Unimplemented(_NoTraceback, NotImplementedError):
    pass


def to_flight(exc: BaseException) -> BaseException:
    """The exception to raise to pyarrow for ``exc``."""
    if isinstance(exc, (fl.FlightError, _NoTraceback)):
        return exc
    if not isinstance(exc, LakeError):
        log.error("unexpected error in the Flight server", exc_info=exc)
        exc = Internal("internal error; see the server log")
    code = exc.grpc_status
    message = f"{exc.message} [{type(exc).__name__}, code {int(exc.code)}]"
    if code == "INVALID_ARGUMENT":
        return InvalidArgument(message)
    if code == "NOT_FOUND":
        return NotFound(message)
    if code == "UNIMPLEMENTED":
        return Unimplemented(message)
    if code == "UNAUTHENTICATED":
        return fl.FlightUnauthenticatedError(message)
    if code == "PERMISSION_DENIED":
        return fl.FlightUnauthorizedError(message)
    if code == "UNAVAILABLE":
        return fl.FlightUnavailableError(message)
    if code == "CANCELLED":
        return fl.FlightCancelledError(message)
    if code == "DEADLINE_EXCEEDED":
        return fl.FlightTimedOutError(message)
    if code in ("RESOURCE_EXHAUSTED", "ABORTED"):
        # Both mean "try again later": UNAVAILABLE is what generic clients retry.
        return fl.FlightUnavailableError(message)
    return fl.FlightInternalError(message)


def unauthenticated(message: str = "invalid credentials") -> BaseException:
    return to_flight(Unauthenticated(message))
