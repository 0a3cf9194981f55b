"""The transport's tests' handler (``Scripted``: answers the test sets) and authentication (one
user, alice), served on a free loopback port (test_transport.py, test_transport_errors.py)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pyarrow as pa
import pyarrow.flight as fl

from lake_platform.auth.service import AuthService, Throttle
from lake_platform.auth.tokens import Identity, Sealer
from lake_platform.flight.transport import Call, FlightTransport
from lake_platform_tests.doubles import StaticAuthenticator

ALICE = Identity("alice", "user", "p", "reader")
DICTS = pa.table(
    {
        "tag": pa.array(["a", "b", "a", None, "c"]).dictionary_encode(),
        "nested": pa.array(
            [{"k": v} for v in ["x", "y", "x", "z", "y"]],
            pa.struct([pa.field("k", pa.dictionary(pa.int32(), pa.string()))]),
        ),
        "n": pa.array([1, 2, 3, 4, 5], pa.int64()),
    }
)


class Scripted:
    """A FlightHandler whose answers the test sets: ``fail`` raises from every call."""

    def __init__(self) -> None:
        self.fail: BaseException | None = None
        self.table = DICTS
        self.results = [b"one", b"two"]
        self.calls: list[Call] = []

    def _maybe_fail(self, call: Call) -> None:
        self.calls.append(call)
        if self.fail is not None:
            raise self.fail

    def get_flight_info(self, call: Call, descriptor: fl.FlightDescriptor) -> fl.FlightInfo:
        self._maybe_fail(call)
        return fl.FlightInfo(self.table.schema, descriptor, [fl.FlightEndpoint(b"t", [])], -1, -1)

    def get_schema(self, call: Call, descriptor: fl.FlightDescriptor) -> pa.Schema:
        self._maybe_fail(call)
        return self.table.schema

    def do_get(self, call: Call, ticket: fl.Ticket) -> tuple[pa.Schema, Iterator[pa.RecordBatch]]:
        self._maybe_fail(call)
        return self.table.schema, iter(self.table.to_batches(max_chunksize=2))

    def do_put(self, call: Call, descriptor: fl.FlightDescriptor, batches: Iterator[pa.RecordBatch]) -> bytes:
        self._maybe_fail(call)
        return str(sum(b.num_rows for b in batches)).encode()

    def do_action(self, call: Call, action: fl.Action) -> list[bytes]:
        self._maybe_fail(call)
        return list(self.results)

    def list_actions(self) -> list[tuple[str, str]]:
        return [("health", "report health")]


def alice_auth(sealer: Sealer) -> AuthService:
    """Authentication with one user, alice (password "pw"), over ``sealer``."""
    return AuthService(
        StaticAuthenticator(users={"alice": ("pw", ALICE)}),
        sealer,
        token_ttl=60,
        service_token_cache=5,
        throttle=Throttle(100, 1),
    )


def loopback_transport(handler: Any, auth: AuthService, **options: Any) -> FlightTransport:
    """A FlightTransport without TLS on a free loopback port (``options`` change any of that),
    receiving messages up to 1 MiB."""
    where: dict[str, Any] = {"host": "127.0.0.1", "port": 0, "tls": None, "max_receive_bytes": 1 << 20}
    return FlightTransport(handler, auth, **(where | options))


@contextmanager
def scripted_transport() -> Iterator[tuple[FlightTransport, Scripted]]:
    """A started transport serving a ``Scripted`` handler; stopped afterwards."""
    handler = Scripted()
    transport = loopback_transport(
        handler, alice_auth(Sealer(None)), worker_threads=8, max_put_bytes=64 << 10
    )
    transport.start()
    transport.set_serving(True)
    try:
        yield transport, handler
    finally:
        transport.stop(grace=0)


def bearer(transport: FlightTransport) -> list[tuple[str, str]]:
    key, value = fl.connect(f"grpc://127.0.0.1:{transport.port}").authenticate_basic_token("alice", "pw")
    return [(key.decode().lower(), value.decode())]


@contextmanager
def scripted_client(
    transport: FlightTransport, handler: Scripted
) -> Iterator[tuple[fl.FlightClient, fl.FlightCallOptions]]:
    """A pyarrow client signed in as alice, ``handler`` back to its first answers."""
    handler.fail = None
    handler.table = DICTS
    handler.results = [b"one", b"two"]
    client = fl.connect(f"grpc://127.0.0.1:{transport.port}")
    try:
        yield client, fl.FlightCallOptions(headers=[client.authenticate_basic_token("alice", "pw")])
    finally:
        client.close()
