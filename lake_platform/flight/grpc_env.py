"""gRPC core's process-wide switches for the Flight SQL endpoint's grpcio server.

grpcio reads ``GRPC_EXPERIMENTS`` once, when ``grpc`` is first imported; a server built later
cannot change them. So ``lake serve-flight`` (and the benches' endpoint) call
:func:`prefer_polling_listener` before anything imports ``grpc``.

Why the listener: by default in the pinned grpcio, EventEngine's own threads read a server's
connections and hand what they read to the completion queue that grpcio's Python server
polls: one more thread hop per message in and out. With the experiment off, the thread
already polling the queue reads the socket itself. Measured on the point query through ADBC
(docs/benchmarks.md, "twenty-first round"): up to 5 % less wall time and about 6 % less server
CPU per query, large results and concurrent clients no slower. The data plane (pyarrow's bundled
C++ gRPC) reads the same variable too; the data-plane tests pass with it set.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Container, MutableMapping

#: gRPC core's variable and the value the endpoint starts with unless the operator set one.
VARIABLE = "GRPC_EXPERIMENTS"
POLLING_LISTENER = "-event_engine_listener"


def prefer_polling_listener(
    environ: MutableMapping[str, str] | None = None, imported: Container[str] | None = None
) -> bool:
    """Turn EventEngine's listener off for this process unless ``GRPC_EXPERIMENTS`` is already
    set (an operator's value, even empty, wins: ``GRPC_EXPERIMENTS=`` keeps gRPC's defaults).

    Returns whether the polling listener will be in force: False once ``grpc`` has been
    imported (too late to change), or when the operator's value differs."""
    environ = os.environ if environ is None else environ
    imported = sys.modules if imported is None else imported
    if "grpc" in imported:
        return environ.get(VARIABLE) == POLLING_LISTENER
    environ.setdefault(VARIABLE, POLLING_LISTENER)
    return environ[VARIABLE] == POLLING_LISTENER
