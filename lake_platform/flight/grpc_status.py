"""The one thing the endpoint needs that grpcio's public API cannot do: end a running call
from another thread with an exact status.

The query time limit must end a DoGet even while its handler's thread is blocked in grpcio's
send to a client that stopped reading (no exception can reach that thread). grpcio's public
``ServicerContext.cancel()`` ends the call, but always as CANCELLED; a client must see
DEADLINE_EXCEEDED, the status every other path of the time limit answers. gRPC core can
cancel a call with any status (``grpc_call_cancel_with_status``), and grpcio's server context
holds that core call as ``context._rpc_event.call``, whose ``cancel(code, details)`` calls it.

That private attribute is used here and nowhere else. ``test_grpc_status`` checks, against
the installed grpcio, that a client sees the status given: it fails loudly if an upgrade
changes it. Should a grpcio in production lack it, the call is still ended (public
``cancel()``, CANCELLED) and a warning says why.
"""

from __future__ import annotations

import logging

import grpc

log = logging.getLogger(__name__)


def end_with_status(context: grpc.ServicerContext, code: grpc.StatusCode, details: str) -> None:
    """End the call of ``context`` now with ``code`` and ``details``, from any thread."""
    try:
        core_call = context._rpc_event.call  # type: ignore[attr-defined]  # see the module's notes
        cancel = core_call.cancel
    except AttributeError:
        log.warning(
            "this grpcio cannot end a call with a status of its own: ending it CANCELLED instead of %s",
            code.name,
        )
        context.cancel()
        return
    cancel(code.value[0], details)


__all__ = ["end_with_status"]
