"""A real Flight SQL server on a free loopback port over a real catalog with two tenants.

Project ``p`` (user alice, service token ``SVC_TOKEN``) and project ``q`` (user bob) both have a
warehouse ``w`` with namespace ``ns``; ``p`` also has ``ns.sub``. Tables:

- ``p.w.ns.t``: 1000 rows (id int64, s string, x float64)
- ``p.w.ns.sub.u``: 3 rows
- ``p.w.ns.multi``: 5 fragments of 100 rows (several batches)
- ``q.w.ns.t``: 2 rows, and ``q.w.ns.secret``: 1 row (bob's)

The module-scoped server uses an in-memory authenticator, so these tests do not depend on the
principals in the registry; ``test_principals`` runs the server with the catalog's own.
"""

from __future__ import annotations

import base64
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import pyarrow as pa
import pyarrow.flight as fl
import pytest

from lake_platform.auth.tokens import Identity
from lake_platform.catalog.catalog import Catalog
from lake_platform.flight.server import FlightSqlServer
from lake_platform.settings import LakeSettings, load_settings
from lake_platform.settings.flight import flight_settings
from lake_platform_tests.doubles import StaticAuthenticator

PASSWORDS = {"alice": "alice-password", "bob": "bob-password"}
SVC_TOKEN = "svc-token-for-project-p-0123456789"
ALICE = Identity("alice", "user", "p", "reader")
BOB = Identity("bob", "user", "q", "reader")
SERVICE = Identity("etl", "token", "p", "reader")


def t_rows(n: int, start: int = 0) -> pa.Table:
    ids = list(range(start, start + n))
    return pa.table(
        {
            "id": pa.array(ids, pa.int64()),
            "s": pa.array([f"row-{i}" for i in ids]),
            "x": pa.array([i / 2 for i in ids], pa.float64()),
        }
    )


def build_split_catalog(home: Path, **overrides: Any) -> tuple[LakeSettings, Catalog]:
    """``build_catalog`` plus ``p.w.ns.big``: 8 fragments of 500 rows, deleted rows in the
    first two (the table the multi-endpoint tests split)."""
    settings, catalog = build_catalog(home, **overrides)
    catalog.tables.create_table("p.w.ns.big", t_rows(500).to_reader())
    for k in range(1, 8):
        catalog.tables.append("p.w.ns.big", t_rows(500, start=500 * k).to_reader())
    catalog.tables.delete_rows("p.w.ns.big", "id % 7 = 0 AND id < 1000")
    return settings, catalog


def build_catalog(home: Path, **overrides: Any) -> tuple[LakeSettings, Catalog]:
    settings = load_settings(home=home, **overrides)
    catalog = Catalog(settings)
    for project in ("p", "q"):
        catalog.containers.create_project(project)
        catalog.containers.create_warehouse(f"{project}.w")
        catalog.containers.create_namespace(f"{project}.w.ns")
    catalog.containers.create_namespace("p.w.ns.sub")
    catalog.tables.create_table("p.w.ns.t", t_rows(1000).to_reader())
    catalog.tables.create_table("p.w.ns.sub.u", pa.table({"id": pa.array([1, 2, 3], pa.int64())}).to_reader())
    catalog.tables.create_table("p.w.ns.multi", t_rows(100).to_reader())
    for k in range(1, 5):
        catalog.tables.append("p.w.ns.multi", t_rows(100, start=100 * k).to_reader())
    catalog.tables.create_table("q.w.ns.t", pa.table({"id": pa.array([-1, -2], pa.int64())}).to_reader())
    catalog.tables.create_table("q.w.ns.secret", pa.table({"code": pa.array(["bob-only"])}).to_reader())
    return settings, catalog


def static_authenticator() -> StaticAuthenticator:
    return StaticAuthenticator(
        users={"alice": (PASSWORDS["alice"], ALICE), "bob": (PASSWORDS["bob"], BOB)},
        tokens={SVC_TOKEN: SERVICE},
    )


@dataclass
class Running:
    server: FlightSqlServer
    settings: LakeSettings
    catalog: Catalog

    @property
    def uri(self) -> str:
        return f"grpc://127.0.0.1:{self.server.port}"

    def adbc(self, user: str = "alice", password: str | None = None, **db_kwargs: str) -> Any:
        import adbc_driver_flightsql.dbapi as fsql

        kwargs = {"username": user, "password": password if password is not None else PASSWORDS[user]}
        kwargs.update(db_kwargs)
        return fsql.connect(self.uri, db_kwargs=kwargs, autocommit=True)

    def adbc_bearer(self, token: str) -> Any:
        """Connect with a static Bearer (a service token): no Handshake."""
        import adbc_driver_flightsql.dbapi as fsql

        return fsql.connect(
            self.uri, db_kwargs={"adbc.flight.sql.authorization_header": f"Bearer {token}"}, autocommit=True
        )

    def client(
        self, user: str = "alice", password: str | None = None
    ) -> tuple[fl.FlightClient, fl.FlightCallOptions]:
        """A raw pyarrow Flight client with the Bearer from a Basic Handshake."""
        client = fl.connect(self.uri)
        pw = password if password is not None else PASSWORDS[user]
        header = client.authenticate_basic_token(user, pw)
        return client, fl.FlightCallOptions(headers=[header])


def start_server(
    settings: LakeSettings,
    catalog: Catalog,
    *,
    authenticator: Any = None,
    store: Any = None,
    clock: Any = None,
    snapshots: Any = None,
    early_first_batch: float | None = None,
    **flight: Any,
) -> FlightSqlServer:
    """``clock``: wall-clock seconds for ticket issue and expiry (default ``time.time``);
    ``early_first_batch``: the server's (default ``streams.EARLY_FIRST_BATCH``)."""
    options: dict[str, Any] = {"port": 0, "snapshot_ttl_seconds": 0.2, "memory_limit_bytes": 256 << 20}
    options.update(flight)
    extra: dict[str, Any] = {"clock": clock} if clock is not None else {}
    if snapshots is not None:
        extra["snapshots"] = snapshots
    if early_first_batch is not None:
        extra["early_first_batch"] = early_first_batch
    server = FlightSqlServer(
        settings,
        flight_settings(**options),
        store=store or catalog.store,
        authenticator=authenticator or static_authenticator(),
        **extra,
    )
    return server.start()


@contextmanager
def serving(settings: LakeSettings, catalog: Catalog, **kwargs: Any) -> Iterator[FlightSqlServer]:
    """``start_server`` for the length of a ``with`` block (stopped without grace afterwards)."""
    server = start_server(settings, catalog, **kwargs)
    try:
        yield server
    finally:
        server.stop(grace=0)


#: Flight settings that split results of ``build_split_catalog``'s tables into endpoints.
SPLIT = {"endpoint_target_rows": 1000, "max_endpoints": 4, "endpoints": "many"}


def built_lake(
    tmp_path_factory: pytest.TempPathFactory,
    build: Callable[[Path], tuple[LakeSettings, Catalog]],
    name: str,
) -> Iterator[tuple[LakeSettings, Catalog]]:
    """A module's lake fixture: ``build`` on a fresh home, closed after the module."""
    settings, catalog = build(tmp_path_factory.mktemp(name) / "home")
    try:
        yield settings, catalog
    finally:
        catalog.close()


@pytest.fixture(scope="module")
def lake(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[LakeSettings, Catalog]]:
    yield from built_lake(tmp_path_factory, build_catalog, "flight")


@pytest.fixture(scope="module")
def running(lake: tuple[LakeSettings, Catalog]) -> Iterator[Running]:
    settings, catalog = lake
    server = start_server(settings, catalog)
    try:
        yield Running(server, settings, catalog)
    finally:
        server.stop(grace=1)


def basic(user: str, password: str) -> bytes:
    return b"Basic " + base64.b64encode(f"{user}:{password}".encode())


# == helpers shared by the ticket, pinning, replica and limit tests ===============================


def login(uri: str, user: str = "alice") -> tuple[fl.FlightClient, fl.FlightCallOptions]:
    client = fl.connect(uri)
    return client, fl.FlightCallOptions(headers=[client.authenticate_basic_token(user, PASSWORDS[user])])


def plan(client: fl.FlightClient, options: fl.FlightCallOptions, sql: str) -> fl.FlightInfo:
    from lake_platform.flight import proto

    return client.get_flight_info(
        fl.FlightDescriptor.for_command(proto.pack(proto.CommandStatementQuery(query=sql))), options
    )


def fetch(client: fl.FlightClient, options: fl.FlightCallOptions, info_or_ticket: Any) -> pa.Table:
    ticket = (
        info_or_ticket.endpoints[0].ticket if isinstance(info_or_ticket, fl.FlightInfo) else info_or_ticket
    )
    return client.do_get(ticket, options).read_all()


def query(client: fl.FlightClient, options: fl.FlightCallOptions, sql: str) -> pa.Table:
    """Plan ``sql`` and fetch its whole result."""
    return fetch(client, options, plan(client, options, sql))


def wait_until(condition: Any, timeout: float = 10.0, step: float = 0.05) -> bool:
    import time

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if condition():
                return True
        except Exception:  # noqa: BLE001, S110 - not yet
            pass
        time.sleep(step)
    return bool(condition())


def raw_status(server: Any, ticket: fl.Ticket) -> tuple[str, str]:
    """The gRPC status code a generic (non-Arrow) client sees for DoGet."""
    key, value = fl.connect(f"grpc://127.0.0.1:{server.port}").authenticate_basic_token(
        "alice", PASSWORDS["alice"]
    )
    channel = grpc.insecure_channel(f"127.0.0.1:{server.port}")
    call = channel.unary_stream("/arrow.flight.protocol.FlightService/DoGet")
    headers = [(key.decode().lower(), value.decode())]
    message = b"\x0a" + varint(len(ticket.ticket)) + ticket.ticket
    try:
        for _ in call(message, metadata=headers):
            pass
    except grpc.RpcError as exc:
        return exc.code().name, exc.details()
    finally:
        channel.close()
    return "OK", ""


def varint(n: int) -> bytes:
    """Protobuf's base-128 varint: for tests that write a message's bytes themselves."""
    out = bytearray()
    while True:
        byte = n & 0x7F
        n >>= 7
        out.append(byte | (0x80 if n else 0))
        if not n:
            return bytes(out)
