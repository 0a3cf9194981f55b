"""Settings of the serving endpoints (``LAKE_FLIGHT_*``): the Flight SQL server, and what the REST
server shares with it (sealing keys, logins, the snapshot refresh, the query engine's limits,
which ``query.limits.limits_from`` reads from here).
"""

from __future__ import annotations

import ipaddress
import re
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, ValidationError, model_validator
from pydantic_settings import SettingsConfigDict

from lake_platform.settings.keywords import KeywordStrictSettings
from lake_platform.settings.lake import LakeSettings, settings_error

ENV_PREFIX = "LAKE_FLIGHT_"
#: A key id: short, printable, and safe to show in an error message.
KEY_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,31}$")
#: The key id the single ``secret_key`` setting seals under.
DEFAULT_KEY_ID = "default"
#: A replica's public URI.
LOCATION = re.compile(r"^grpc(\+tls)?://(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9._-]+):[0-9]{1,5}$")
#: Wall-clock limit of planning, and of streaming, one query (seconds). Without one, a query that
#: never ends (a cross join, generate_series to 1e12) holds an admission slot as long as its
#: client stays connected, and max_concurrent_queries of them lock everyone else out. Five minutes
#: is far beyond an interactive query and what a BI tool waits by default (ADBC and JDBC set no
#: deadline), yet bounds a lock-out to minutes; longer exports set a larger value.
DEFAULT_QUERY_TIMEOUT = 300.0
#: A day: a larger query timeout is almost surely milliseconds written as seconds.
MAX_QUERY_TIMEOUT = 86400.0


class FlightSettings(KeywordStrictSettings):
    model_config = SettingsConfigDict(
        env_prefix=ENV_PREFIX, env_file=".env", extra="ignore", validate_default=True, frozen=True
    )

    host: str = Field(
        "127.0.0.1", description="Address to bind; a non-loopback bind needs TLS or allow_insecure."
    )
    port: int = Field(50051, ge=0, le=65535, description="Port to bind (0 picks a free one).")
    tls_cert_file: Path | None = Field(
        None, description="PEM certificate chain; with tls_key_file enables TLS."
    )
    tls_key_file: Path | None = Field(None, description="PEM private key for tls_cert_file.")
    allow_insecure: bool = Field(False, description="Allow a plaintext bind on a non-loopback address.")
    secret_key: str = Field(
        "",
        description="One key sealing bearer tokens, tickets and prepared handles (>= 32 bytes, hex or text), "
        f"key id {DEFAULT_KEY_ID!r}; every replica must share it. Empty (and no keys): the key file "
        "<home>/flight-keys on the embedded SQLite registry, else a random key per process.",
    )
    keys: str = Field(
        "",
        description="Sealing keys with ids, 'kid1:hex,kid2:hex', oldest first: the last one seals, every one "
        "opens (rotate by appending a key, then retiring the oldest). secret_key, if also set, is the "
        "oldest key.",
    )
    token_ttl_seconds: float = Field(
        3600.0, gt=0, le=7 * 86400, description="Lifetime of a Handshake bearer token."
    )
    service_token_cache_seconds: float = Field(
        30.0,
        ge=0,
        le=3600,
        description="How long a verified service token is trusted before it is checked again.",
    )
    snapshot_ttl_seconds: float = Field(5.0, gt=0, le=3600, description="Catalog snapshot refresh interval.")
    operator_project: str = Field(
        "",
        description="The project whose principals the health action shows the server's figures "
        "(every tenant's); empty: none, they are on /metrics (others see liveness and their own project).",
    )
    snapshot_max_stale_seconds: float = Field(
        120.0,
        gt=0,
        description="Serve the last good snapshot this long while refreshes fail, then UNAVAILABLE.",
    )
    memory_limit_bytes: int = Field(
        1 << 30,
        ge=16 << 20,
        description="DataFusion memory pool of the process, shared by all running queries "
        "(fair; sorts, joins and aggregates spill beyond their share).",
    )
    spill_dir: Path | None = Field(None, description="Where DataFusion spills; default <home>/spill.")
    spill_compression: Literal["uncompressed", "lz4_frame", "zstd"] = Field(
        "lz4_frame",
        description="Compression of DataFusion's spill files. lz4_frame costs no measurable time and "
        "lowers a spilling sort's peak memory (measured 1.46 -> 0.96 GB on a 1.3 GB sort).",
    )
    batch_size: int = Field(8192, ge=128, le=1 << 20, description="DataFusion batch size (rows).")
    target_partitions: int = Field(0, ge=0, le=256, description="DataFusion parallelism; 0 = number of CPUs.")
    max_concurrent_queries: int = Field(8, ge=1, le=1024, description="Streams served at once; others wait.")
    worker_threads: int = Field(
        64,
        ge=2,
        le=4096,
        description="RPCs served at once (threads); the next one is refused with "
        "RESOURCE_EXHAUSTED. Must exceed max_concurrent_queries: metadata calls need threads too.",
    )
    admission_wait_seconds: float = Field(30.0, ge=0, description="How long a query waits for a stream slot.")
    early_start_seconds: float = Field(
        1.0,
        ge=0,
        le=60,
        description="GetFlightInfo of a quick single-endpoint statement starts its query on a free "
        "slot (at most half of max_concurrent_queries) once it has answered, so the result is being "
        "computed while the client asks for it; a start no DoGet on this replica claims within "
        "this many seconds is stopped and its slot freed. 0: off (queries start at DoGet).",
    )
    query_timeout_seconds: float = Field(
        DEFAULT_QUERY_TIMEOUT,
        ge=0,
        le=MAX_QUERY_TIMEOUT,
        allow_inf_nan=False,
        description="Wall-clock limit of planning a query (GetFlightInfo, GetSchema, DoGet's re-planning) "
        "and, "
        "separately, of streaming its result once admitted (DoGet); past it the call ends with "
        "DEADLINE_EXCEEDED "
        "and the query's work stops, even when the client stopped reading. 0 = no limit (only when set "
        "explicitly: queries that never end then hold their admission slot for as long as the client stays).",
    )
    max_sql_bytes: int = Field(256 * 1024, ge=1024, le=16 << 20, description="Longest accepted SQL text.")
    max_param_bytes: int = Field(
        1 << 20, ge=0, le=64 << 20, description="Largest bound parameter row (Arrow bytes)."
    )
    max_ticket_tables: int = Field(64, ge=1, le=4096, description="Most table snapshots one ticket may pin.")
    max_ticket_bytes: int = Field(
        2 << 20, ge=4096, le=64 << 20, description="Largest sealed ticket or prepared-statement handle."
    )
    max_result_bytes: int = Field(
        0, ge=0, description="Largest result one query may stream (Arrow bytes); 0 = no limit."
    )
    max_value_bytes: int = Field(
        64 << 20, ge=1 << 20, le=1 << 30, description="Most repeat/lpad/rpad may build for one batch (bytes)."
    )
    max_join_pairs: int = Field(
        10**8, ge=0, description="Most work of a join without an equality key: pairs x cost; 0 = no limit."
    )
    max_relations: int = Field(
        128, ge=0, description="Most relations one query may combine (joins, unions); 0 = no limit."
    )
    max_message_bytes: int = Field(
        8 << 20,
        ge=1 << 20,
        le=15 << 20,
        description="Split result batches above this size (ADBC's limit is 16 MiB).",
    )
    auth_max_failures: int = Field(5, ge=1, description="Failed logins per user name before a lockout.")
    auth_lockout_seconds: float = Field(30.0, ge=0, description="Lockout after auth_max_failures failures.")
    scan_io_buffer_bytes: int = Field(
        64 << 20,
        ge=1 << 20,
        description="Lance's read-ahead buffer per scan (Lance's own default is 2 GiB, "
        "which lets one fast scan buffer that much ahead of a slow client).",
    )
    scan_batch_rows: int = Field(
        32768,
        ge=0,
        le=1 << 20,
        description="Rows per batch of a Lance scan (sets LANCE_DEFAULT_BATCH_SIZE unless the environment "
        "does); 0: Lance's default (8192). Fewer, larger batches cost less per row in the server and "
        "in clients (measured: a 5M-row SELECT * at 32768 took about 2/3 of the server CPU of 8192); "
        "lower it for very wide rows (a batch is decoded whole; messages stay under max_message_bytes).",
    )
    dataset_cache_size: int = Field(
        256, ge=0, description="Opened table versions kept (versions are immutable)."
    )
    session_pool_size: int = Field(
        16,
        ge=0,
        le=1024,
        description="Idle DataFusion contexts kept for reuse across requests (0: a new one per request).",
    )
    cache_bytes: int | None = Field(
        None,
        ge=0,
        description="The snapshot cache's budget: decoded Arrow bytes of hot table versions held in "
        "memory per replica (default: 1/16 of physical memory, at most half of MEMORY_LIMIT_BYTES; "
        "0 turns the cache off).",
    )
    cache_admit_after: int = Field(
        3,
        ge=1,
        le=1_000_000,
        description="Plannings of one table version before a cache=auto table is loaded into the cache "
        "(cache=hot: at the first; cache=off: never).",
    )
    plan_cache_size: int = Field(
        256,
        ge=0,
        le=1_000_000,
        description="Statements planned by GetFlightInfo kept for this replica's DoGet of their ticket, "
        "which then skips planning again (same principal, SQL, parameters and pinned versions), "
        "and prepared key lookups, re-bound to new values without planning (0: every call plans).",
    )
    result_cache_bytes: int | None = Field(
        None,
        ge=0,
        description="The result cache's budget: bytes of whole results kept per replica, so a re-run of "
        "a deterministic query by the same principal over the same table versions streams them without "
        "running the query (default: 1/16 of MEMORY_LIMIT_BYTES, at most 64 MiB; 0 turns it off).",
    )
    result_cache_entry_bytes: int = Field(
        4 << 20,
        ge=1,
        description="The largest result the result cache keeps (bytes of its batches' buffers); a larger "
        "one streams as always and is not kept.",
    )
    max_endpoints: int = Field(4, ge=1, le=256, description="Most endpoints of a split result; 1: never.")
    endpoints: Literal["one", "many"] = Field(
        "one",
        description="one: every result is one endpoint unless the call asks (x-lake-endpoints: many), so "
        "clients reading only the first endpoint get the whole answer; many: split and spooled results "
        "have several unless the call says x-lake-endpoints: one.",
    )
    endpoint_target_rows: int = Field(1_000_000, ge=1, description="Rows per endpoint of a split result.")
    endpoint_target_bytes: int = Field(256 << 20, ge=1, description="Data bytes per split endpoint.")
    spool: bool = Field(
        True,
        description="Spool heavy results to LAKE_RESULTS_ROOT (checked writable at start); false: never, and "
        "the x-lake-spool header is refused.",
    )
    spool_min_rows: int = Field(
        0,
        ge=0,
        description="Spool a result as big as its tables (see spool.py) past this many table rows; 0: off.",
    )
    spool_min_bytes: int = Field(
        4 << 30,
        ge=0,
        description="Spool a result as big as its tables past this many table data bytes; 0: off.",
    )
    spool_segment_bytes: int = Field(
        64 << 20, ge=1 << 10, description="Arrow bytes per spooled segment (one endpoint each)."
    )
    spool_max_jobs: int = Field(4, ge=1, le=256, description="Results spooled at once by one replica.")
    spool_presign: bool = Field(
        False,
        description="With an s3:// LAKE_RESULTS_ROOT: each segment's endpoint also names a pre-signed HTTPS "
        "URL of its Arrow IPC stream (after the reuse-connection location), valid until the result expires.",
    )
    advertise: str = Field(
        "",
        description="This replica's public URI (grpc://host:port or grpc+tls://host:port), named in the "
        "locations of split results' endpoints. Empty: endpoints carry no location (reuse the connection).",
    )
    peers: str = Field(
        "",
        description="Other replicas' public URIs, comma-separated: a split result's endpoints are spread "
        "over advertise and these (every replica must share the sealing keys and read the same storage).",
    )

    data_listen: str = Field(
        "",
        description="host:port of the data plane: a second, C++ (pyarrow.flight) server in the same process "
        "that serves only DoGet of sealed statement tickets, without the GIL per byte. Endpoints of "
        "statement results then name it (LAKE_FLIGHT_DATA_ADVERTISE). Empty: off (every RPC on one port). "
        "Port 0 picks a free one; a non-loopback host needs TLS or allow_insecure, as host does.",
    )
    data_advertise: str = Field(
        "",
        description="The data plane's public URI (grpc://host:port or grpc+tls://host:port), named in "
        "endpoint locations. Empty: derived from data_listen and the bound port (then data_listen's host "
        "must not be a wildcard address).",
    )
    data_peers: str = Field(
        "",
        description="The other replicas' data-plane URIs, comma-separated: with the data plane on, "
        "endpoints of split results are spread over data_advertise and these (instead of advertise and "
        "peers). Required when peers is set and the data plane is on.",
    )

    @model_validator(mode="after")
    def _check(self) -> FlightSettings:
        if (self.tls_cert_file is None) != (self.tls_key_file is None):
            raise ValueError("tls_cert_file: set both tls_cert_file and tls_key_file, or neither")
        if not self.tls and not self.allow_insecure and not is_loopback(self.host):
            raise ValueError(f"host: binding {self.host!r} without TLS needs LAKE_FLIGHT_ALLOW_INSECURE=true")
        if self.secret_key and len(self.secret_key_bytes) < 32:
            raise ValueError("secret_key: must be at least 32 bytes (64 hex digits)")
        if self.worker_threads <= self.max_concurrent_queries:
            raise ValueError(
                f"worker_threads: must exceed max_concurrent_queries ({self.max_concurrent_queries}), "
                "or metadata calls and logins wait behind running queries"
            )
        self.sealing_keys()  # raises on a malformed LAKE_FLIGHT_KEYS
        self.replicas()  # raises on a malformed LAKE_FLIGHT_ADVERTISE / LAKE_FLIGHT_PEERS
        self._check_data_plane()
        return self

    def _check_data_plane(self) -> None:
        if not self.data_listen.strip():
            for name in ("data_advertise", "data_peers"):
                if getattr(self, name).strip():
                    raise ValueError(f"{name}: set data_listen too (the data plane is off)")
            return
        host, port = self.data_address()
        if not self.tls and not self.allow_insecure and not is_loopback(host):
            raise ValueError(
                f"data_listen: binding {host!r} without TLS needs LAKE_FLIGHT_ALLOW_INSECURE=true"
            )
        if not self.data_advertise.strip() and host.strip("[]") in ("0.0.0.0", "::", ""):
            raise ValueError(
                "data_advertise: data_listen binds a wildcard address; set the URI clients reach it at"
            )
        uris = _uris("data_advertise", self.data_advertise) + _uris("data_peers", self.data_peers)
        if len(_uris("data_advertise", self.data_advertise)) > 1:
            raise ValueError(
                "data_advertise: one URI (this replica's data plane); list the others in data_peers"
            )
        if self.peers.strip() and not self.data_peers.strip():
            raise ValueError(
                "data_peers: with peers and the data plane on, list the peers' data-plane URIs too "
                "(endpoints name data planes only)"
            )
        scheme = "grpc+tls://" if self.tls else "grpc://"
        for uri in uris:
            if not uri.startswith(scheme):
                raise ValueError(f"data_advertise: {uri!r} must use {scheme} (this server's TLS setting)")
        if port == self.port and port != 0:
            raise ValueError(f"data_listen: port {port} is the Flight SQL port (LAKE_FLIGHT_PORT)")

    def data_address(self) -> tuple[str, int]:
        """(host, port) of ``data_listen``; ValueError when it is not host:port."""
        text = self.data_listen.strip()
        host, sep, port = text.rpartition(":")
        if not sep or not host or not port.isdigit() or int(port) > 65535:
            raise ValueError(f"data_listen: {text!r} is not host:port (e.g. 127.0.0.1:50052)")
        if host.startswith("[") != host.endswith("]") or (":" in host and not host.startswith("[")):
            raise ValueError(f"data_listen: {text!r}: write an IPv6 host in brackets, [::1]:50052")
        if not re.fullmatch(r"\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9._-]+", host):
            raise ValueError(f"data_listen: {host!r} is not a host name or address")
        return host, int(port)

    def data_replicas(self, bound_port: int) -> list[str]:
        """The data-plane URIs endpoints name: this replica's (advertised, or derived from the
        bound port) first, then the peers' (no duplicates)."""
        host, _ = self.data_address()
        scheme = "grpc+tls" if self.tls else "grpc"
        own = _uris("data_advertise", self.data_advertise) or [f"{scheme}://{host}:{bound_port}"]
        uris: list[str] = []
        for uri in own + _uris("data_peers", self.data_peers):
            if uri not in uris:
                uris.append(uri)
        return uris

    def replicas(self) -> list[str]:
        """The URIs endpoints are spread over: advertise first, then the peers (no duplicates).
        Empty: locations stay empty."""
        uris: list[str] = []
        for name, text in (("advertise", self.advertise), ("peers", self.peers)):
            for uri in (u.strip() for u in text.split(",")):
                if not uri:
                    continue
                if name == "advertise" and len(uris):
                    raise ValueError("advertise: one URI (this replica's); list the others in peers")
                if not LOCATION.fullmatch(uri):
                    raise ValueError(f"{name}: {uri!r} is not grpc://host:port or grpc+tls://host:port")
                if uri not in uris:
                    uris.append(uri)
        if uris and not self.advertise.strip():
            raise ValueError("peers: set advertise (this replica's URI) too")
        return uris

    @property
    def tls(self) -> bool:
        return self.tls_cert_file is not None

    @property
    def secret_key_bytes(self) -> bytes:
        text = self.secret_key.strip()
        try:
            return bytes.fromhex(text)
        except ValueError:
            return text.encode()

    def sealing_keys(self) -> list[tuple[str, bytes]]:
        """(key id, key) pairs, oldest first; the last one seals. Empty: no key configured."""
        keys: list[tuple[str, bytes]] = []
        if self.secret_key:
            keys.append((DEFAULT_KEY_ID, self.secret_key_bytes))
        for entry in (e.strip() for e in self.keys.split(",")):
            if not entry:
                continue
            kid, sep, material = (p.strip() for p in entry.partition(":"))
            if not sep or not KEY_ID.fullmatch(kid):
                raise ValueError(
                    "keys: each entry is 'kid:hex' with a key id of letters, digits, '.', '_', '-' "
                    "(at most 32)"
                )
            try:
                key = bytes.fromhex(material)
            except ValueError:
                raise ValueError(f"keys: the key of {kid!r} is not hex") from None
            if len(key) < 32:
                raise ValueError(f"keys: the key of {kid!r} must be at least 32 bytes (64 hex digits)")
            if any(kid == known for known, _ in keys):
                raise ValueError(
                    f"keys: key id {kid!r} appears twice (or is {DEFAULT_KEY_ID!r}, the id of secret_key)"
                )
            keys.append((kid, key))
        return keys

    def spill_path(self, lake: LakeSettings) -> Path:
        return (self.spill_dir or lake.home / "spill").expanduser()


def _uris(name: str, text: str) -> list[str]:
    uris = [u.strip() for u in text.split(",") if u.strip()]
    for uri in uris:
        if not LOCATION.fullmatch(uri):
            raise ValueError(f"{name}: {uri!r} is not grpc://host:port or grpc+tls://host:port")
    return uris


def is_loopback(host: str) -> bool:
    if host in ("localhost", "ip6-localhost"):
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def flight_settings(lake: LakeSettings | None = None, **overrides: Any) -> FlightSettings:
    """Read ``LAKE_FLIGHT_*`` (and fields ``flight_*`` of ``lake`` once LakeSettings has them)."""
    values: dict[str, Any] = {}
    if lake is not None:
        for name in FlightSettings.model_fields:
            if f"flight_{name}" in type(lake).model_fields:
                values[name] = getattr(lake, f"flight_{name}")
    values.update(overrides)
    try:
        return FlightSettings(**values)
    except ValidationError as exc:
        raise settings_error(exc, ENV_PREFIX) from None
