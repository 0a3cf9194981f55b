"""Helpers shared by the Flight and query test modules (none of which imports another): a slow
UDF to watch a producer with, the server's running-stream count, a registry that counts its
reads and can fail like a backend outage."""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, Self

import pyarrow as pa
import pyarrow.flight as fl
from datafusion import udf

from lake_platform.errors import ServiceUnavailable
from lake_platform.flight.server import FlightSqlServer
from lake_platform.registry.store import Item, MetaStore, Op
from lake_platform_tests.registry.wrapping import WrappedStore

#: A query whose producer runs ``slow`` once per batch of ``p.w.ns.multi`` (5 batches).
SLOW_SQL = "SELECT slow(id) AS id FROM w.ns.multi"


class SlowUdf:
    """Registers ``slow(x)``, which sleeps per batch: a producer we can watch."""

    def __init__(self, server: FlightSqlServer, delay: float) -> None:
        self.calls: list[float] = []
        self.delay = delay
        self._server = server

    def __enter__(self) -> Self:
        def slow(values: pa.Array) -> pa.Array:
            self.calls.append(time.monotonic())
            time.sleep(self.delay)
            return values

        self._server.engine.register_function(udf(slow, [pa.int64()], pa.int64(), "volatile", name="slow"))
        # One batch per fragment is Lance's scan; a cached snapshot's in-memory batches are
        # coalesced into one, and the UDF would run once.
        cache = self._server.engine.cache
        self._budget, cache.budget_bytes = cache.budget_bytes, 0
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.engine.deregister_function("slow")
        self._server.engine.cache.budget_bytes = self._budget


def tagged_rows(n: int, start: int = 0, tag: str = "v") -> pa.RecordBatchReader:
    """``n`` rows with ids from ``start``, each tagged ``tag``: which write a row came from."""
    ids = list(range(start, start + n))
    return pa.table({"id": pa.array(ids, pa.int64()), "tag": pa.array([tag] * n)}).to_reader()


def streams_of(server: FlightSqlServer) -> int:
    return server.streams.running()


class CountingStore(WrappedStore):
    """Wraps a MetaStore, counting reads (requests: a multi-get is one); can be switched to fail
    like a backend outage."""

    def __init__(self, inner: MetaStore) -> None:
        super().__init__(inner)
        self.gets = 0
        self.scans = 0
        self.failing = False

    def _check(self) -> None:
        if self.failing:
            raise ServiceUnavailable("registry backend unreachable")

    def get(self, key: str) -> Item | None:
        self.gets += 1
        self._check()
        return self.inner.get(key)

    def get_many(self, keys: Sequence[str]) -> list[Item | None]:
        self.gets += 1  # one request, as the backends answer it
        self._check()
        return self.inner.get_many(keys)

    def scan_prefix(
        self, prefix: str, *, start_after: str | None = None, limit: int | None = None
    ) -> Iterator[Item]:
        self.scans += 1
        self._check()
        return self.inner.scan_prefix(prefix, start_after=start_after, limit=limit)

    def scan_range(
        self, start: str, stop: str, *, start_after: str | None = None, limit: int | None = None
    ) -> Iterator[Item]:
        self.scans += 1
        self._check()
        return self.inner.scan_range(start, stop, start_after=start_after, limit=limit)

    def transact(self, ops: Sequence[Op]) -> list[Item | None]:
        self._check()
        return self.inner.transact(ops)

    @property
    def reads(self) -> int:
        return self.gets + self.scans


def self_signed(tmp: Path) -> tuple[Path, Path]:
    import datetime as dt

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")])
    now = dt.datetime.now(dt.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=1))
        .not_valid_after(now + dt.timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName([x509.DNSName("localhost")]), critical=False)
        .sign(key, hashes.SHA256())
    )
    cert_file, key_file = tmp / "cert.pem", tmp / "key.pem"
    cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_file.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
    )
    return cert_file, key_file


class CookieJar(fl.ClientMiddlewareFactory):
    """Keeps the last cookie a server set, as ``name=value`` (pyarrow's public middleware API)."""

    def __init__(self) -> None:
        self.set_cookie: str | None = None

    def start_call(self, info: Any) -> fl.ClientMiddleware:
        factory = self

        class _Middleware(fl.ClientMiddleware):
            def received_headers(self, headers: dict[str, list[str]]) -> None:
                for value in headers.get("set-cookie", []):
                    factory.set_cookie = value.split(";")[0]

        return _Middleware()
