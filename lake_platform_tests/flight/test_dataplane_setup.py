"""How the data plane (LAKE_FLIGHT_DATA_LISTEN) is set up: two replicas spread a split result
over their data planes (pyarrow and ADBC clients), TLS serves the endpoint's certificate, it is
off by default (endpoints carry no location), and a busy port or bad settings are typed errors.
What it serves and refuses: test_dataplane.py."""

from __future__ import annotations

import socket
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow.flight as fl
import pytest

from lake_platform.catalog.catalog import Catalog
from lake_platform.errors import ServiceUnavailable, SettingsError
from lake_platform.settings import LakeSettings
from lake_platform.settings.flight import flight_settings
from lake_platform_tests.flight.conftest import (
    PASSWORDS,
    SPLIT,
    build_split_catalog,
    built_lake,
    fetch,
    login,
    plan,
    serving,
)
from lake_platform_tests.flight.helpers import self_signed
from lake_platform_tests.flight.test_dataplane import BIG, KEYS, at_locations, on_the_endpoint, rows, served
from lake_platform_tests.servers import free_ports


@pytest.fixture(scope="module")
def lake(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[LakeSettings, Catalog]]:
    yield from built_lake(tmp_path_factory, build_split_catalog, "dataplane-setup")


def test_split_results_spread_over_the_replicas_data_planes(lake: tuple[LakeSettings, Catalog]) -> None:
    import adbc_driver_flightsql.dbapi as fsql

    port_a, port_b, data_a, data_b = free_ports(4)
    uri_a, uri_b = f"grpc://127.0.0.1:{port_a}", f"grpc://127.0.0.1:{port_b}"
    duri_a, duri_b = f"grpc://127.0.0.1:{data_a}", f"grpc://127.0.0.1:{data_b}"
    common = {**SPLIT, "keys": KEYS}
    with (
        serving(
            *lake, port=port_a, advertise=uri_a, peers=uri_b, data_listen=f"127.0.0.1:{data_a}",
            data_peers=duri_b, **common,
        ) as a,
        serving(
            *lake, port=port_b, advertise=uri_b, peers=uri_a, data_listen=f"127.0.0.1:{data_b}",
            data_peers=duri_a, **common,
        ) as b,
    ):  # fmt: skip
        client, options = login(uri_a)
        info = plan(client, options, BIG)
        assert all(len(e.locations) == 2 for e in info.endpoints)
        firsts = Counter(e.locations[0].uri.decode() for e in info.endpoints)
        assert firsts == Counter({duri_a: 2, duri_b: 2})
        got = at_locations(info, options)
        assert len(a.parts) == 2 and len(b.parts) == 2  # each replica's data plane served its two
        expected = on_the_endpoint(client, options, info)
        assert rows(got) == rows(expected)
        kwargs = {"username": "alice", "password": PASSWORDS["alice"]}
        before = served()
        with fsql.connect(uri_a, db_kwargs=kwargs, autocommit=True) as conn, conn.cursor() as cur:
            cur.execute(BIG)
            assert rows(cur.fetch_arrow_table()) == rows(expected)
        assert served() == before + 4  # every part from a data plane


def test_tls_serves_the_same_certificate(lake: tuple[LakeSettings, Catalog], tmp_path: Path) -> None:
    cert, key = self_signed(tmp_path)
    tls = {"tls_cert_file": cert, "tls_key_file": key, "host": "localhost"}
    with serving(*lake, data_listen="localhost:0", **tls) as server:
        assert server.data_plane is not None
        client = fl.connect(f"grpc+tls://localhost:{server.port}", tls_root_certs=cert.read_bytes())
        options = fl.FlightCallOptions(headers=[client.authenticate_basic_token("alice", PASSWORDS["alice"])])
        info = plan(client, options, "SELECT count(*) AS n FROM w.ns.t")
        where = info.endpoints[0].locations[0].uri.decode()
        assert where == f"grpc+tls://localhost:{server.data_plane.port}"
        data = fl.connect(where, tls_root_certs=cert.read_bytes())
        assert data.do_get(info.endpoints[0].ticket, options).read_all().to_pylist() == [{"n": 1000}]


def test_off_by_default_endpoints_carry_no_location(lake: tuple[LakeSettings, Catalog]) -> None:
    with serving(*lake, **SPLIT) as server:
        assert server.data_plane is None
        client, options = login(f"grpc://127.0.0.1:{server.port}")
        for sql in (BIG, "SELECT * FROM w.ns.big WHERE id = 4"):
            info = plan(client, options, sql)
            assert all(e.locations == [] for e in info.endpoints)
            fetch(client, options, info)


def test_a_busy_port_is_a_typed_error_at_start(lake: tuple[LakeSettings, Catalog]) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        with pytest.raises(ServiceUnavailable, match="LAKE_FLIGHT_DATA_LISTEN"):
            with serving(*lake, data_listen=f"127.0.0.1:{port}"):
                pass


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"data_listen": "localhost"}, "LAKE_FLIGHT_DATA_LISTEN: 'localhost' is not host:port"),
        ({"data_listen": "::1:5000"}, "IPv6 host in brackets"),
        ({"data_listen": "bad host:5000"}, "not a host name"),
        ({"data_listen": "10.0.0.1:5000"}, "without TLS needs LAKE_FLIGHT_ALLOW_INSECURE"),
        ({"data_listen": "0.0.0.0:5000", "allow_insecure": True}, "LAKE_FLIGHT_DATA_ADVERTISE: data_listen"),
        ({"data_listen": "127.0.0.1:0", "data_advertise": "http://x:1"}, "is not grpc://host:port"),
        ({"data_listen": "127.0.0.1:0", "data_advertise": "grpc+tls://x:1"}, "must use grpc://"),
        ({"data_advertise": "grpc://x:1"}, "set data_listen too"),
        (
            {"data_listen": "127.0.0.1:0", "advertise": "grpc://a:1", "peers": "grpc://b:1"},
            "LAKE_FLIGHT_DATA_PEERS: with peers",
        ),
        ({"data_listen": "127.0.0.1:50051", "port": 50051}, "is the Flight SQL port"),
    ],
)
def test_bad_settings_are_typed_errors(settings: dict[str, Any], message: str) -> None:
    with pytest.raises(SettingsError, match=message):
        flight_settings(**settings)
