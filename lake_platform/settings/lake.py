"""The platform's own settings: ``LakeSettings`` reads ``LAKE_*`` variables and a ``.env`` file.

Every default is the embedded one (a ``.lake`` folder, a SQLite registry, a local warehouse), so
the platform runs with no configuration at all. A bad value fails at start with a
:class:`~lake_platform.errors.SettingsError` naming the variable.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, ValidationError, model_validator
from pydantic_settings import SettingsConfigDict

from lake_platform.errors import SettingsError
from lake_platform.settings.keywords import KeywordStrictSettings

ENV_PREFIX = "LAKE_"


class LakeSettings(KeywordStrictSettings):
    model_config = SettingsConfigDict(
        env_prefix=ENV_PREFIX, env_file=".env", extra="ignore", validate_default=True, frozen=True
    )

    home: Path = Field(Path(".lake"), description="Embedded home: registry, warehouse, Dagster state.")
    registry_url: str = Field(
        "",
        description="sqlite:///PATH or dynamodb://TABLE?region=..&endpoint_url=..; "
        "default sqlite:///<home>/registry.db",
    )
    warehouse_root: str = Field(
        "", description="Default storage root for new warehouses; default <home>/warehouse."
    )
    warehouse_roots: str = Field(
        "",
        description="Comma-separated folders (absolute) and s3://bucket[/prefix] roots under which "
        "warehouses may live; default warehouse_root alone.",
    )
    actor: str = Field("local-admin", min_length=1, max_length=200, description="Who the CLI acts as.")

    # Per-table write lease (invariant 3).
    lease_ttl_seconds: float = Field(30.0, gt=0, le=3600)
    lease_safety_margin_seconds: float = Field(5.0, gt=0)
    lease_io_timeout_seconds: float = Field(2.0, gt=0)
    lease_wait_seconds: float = Field(120.0, ge=0, description="How long a writer waits for a busy lease.")
    small_append_bytes: int = Field(
        8 << 20, ge=0, description="Bytes an append may keep in memory to try it without acquiring the lease."
    )

    # S3 storage options used for s3:// warehouse roots.
    s3_endpoint: str = ""
    s3_region: str = ""
    s3_access_key_id: str = ""
    s3_secret_access_key: str = ""
    s3_allow_http: bool = False

    # Orchestration (Dagster).
    inbox: str = Field(
        "", description="Where producers land files (folder or s3://bucket/prefix); default <home>/inbox."
    )
    inbox_settle_seconds: float = Field(
        1.0,
        ge=0,
        le=3600,
        description="How long a landed file must be left unchanged before the inbox sensor takes it "
        "(a producer still copying it in, slowly onto a network folder, would be ingested half-written).",
    )
    ui_port: int = Field(
        3000, ge=1, le=65535, description="Dagster UI port for `lake up` (bound to 127.0.0.1)."
    )

    # Shared with the Flight endpoint: versions younger than this are never cleaned up.
    ticket_lifetime_seconds: float = Field(3600.0, gt=0)
    #: The longest a reader's cached catalog snapshot may keep serving a superseded version as
    #: current (Flight's LAKE_FLIGHT_SNAPSHOT_MAX_STALE_SECONDS must not exceed it). Version
    #: cleanup keeps a version this long beyond the ticket lifetime after it was superseded.
    reader_max_stale_seconds: float = Field(120.0, ge=0)

    # Spooled query results (Flight SQL and REST QueryTable): where, how big, how long kept.
    results_root: str = Field(
        "",
        description="Where heavy query results are spooled (folder or s3://bucket/prefix); default "
        "<home>/results, outside every warehouse (an s3:// warehouse root s3://b/p: s3://b/p-results, "
        "beside it, so replicas share it).",
    )
    results_ttl_seconds: float = Field(
        3600.0, gt=0, le=7 * 86400, description="How long a spooled result may be read; then it is reclaimed."
    )
    results_max_bytes: int = Field(
        10 << 30,
        ge=0,
        description="Largest spooled result in bytes; one growing past it stops with ResultTooLarge and "
        "is deleted (0: no cap).",
    )
    results_sweep_seconds: float = Field(
        300.0,
        ge=0,
        le=86400,
        description="How often each Flight SQL and REST server deletes expired spooled results itself "
        "(0: never; `lake results expire` and the Dagster asset still do).",
    )

    # The Lance Namespace REST server (`lake serve-rest`, also started by `lake up`).
    rest_host: str = Field(
        "127.0.0.1",
        description="REST server bind address; a non-loopback bind needs TLS or rest_allow_insecure.",
    )
    rest_port: int = Field(2333, ge=0, le=65535, description="REST server port (Lance's default, 2333).")
    rest_tls_cert_file: Path | None = Field(
        None, description="PEM certificate chain; with the key enables TLS."
    )
    rest_tls_key_file: Path | None = Field(None, description="PEM private key for rest_tls_cert_file.")
    rest_allow_insecure: bool = Field(
        False, description="Allow a plaintext REST bind on a non-loopback address."
    )
    rest_max_body_bytes: int = Field(
        64 << 20,
        ge=1024,
        description="Largest request body (JSON or Arrow); larger ones are refused with 413.",
    )
    rest_max_json_bytes: int = Field(
        8 << 20,
        ge=1024,
        description="Largest JSON request body (every operation but the Arrow ones); larger ones are "
        "refused with 413. Parsing JSON costs several times its size in memory.",
    )
    rest_body_timeout_seconds: float = Field(
        60.0,
        gt=0,
        le=3600,
        description="Longest time to receive a request's whole body; a slower one is refused with 408 "
        "and its connection closed.",
    )
    rest_header_timeout_seconds: float = Field(
        10.0,
        gt=0,
        le=3600,
        description="Longest time to receive a request's headers (from the connection's opening, or "
        "from the first byte of the next request on a keep-alive connection); a slower connection "
        "is closed.",
    )
    rest_max_connections: int = Field(
        1000,
        ge=2,
        le=1_000_000,
        description="Open connections (and running requests) the REST server accepts; a request beyond "
        "is answered 503 (uvicorn's limit_concurrency).",
    )
    rest_keep_alive_seconds: int = Field(
        5,
        ge=1,
        le=3600,
        description="How long an idle keep-alive connection stays open after its last answer.",
    )
    rest_max_json_depth: int = Field(
        64,
        ge=4,
        le=512,
        description="Deepest nesting of arrays and objects a JSON request body may have; deeper is 400.",
    )
    rest_id_delimiter: str = Field(
        "$",
        min_length=1,
        max_length=8,
        description="Joins id segments in REST paths (?delimiter= overrides).",
    )
    rest_inline_max_rows: int = Field(
        100_000, ge=0, description="QueryTable answers inline up to this many rows; beyond, a result handle."
    )
    rest_inline_max_bytes: int = Field(
        32 << 20, ge=0, description="QueryTable answers inline up to this many Arrow bytes; beyond, a handle."
    )
    rest_storage_credentials: Literal["none", "scoped", "server", "file"] = Field(
        "none",
        description="What DescribeTable/DeclareTable hand clients for S3: none (no keys: clients bring "
        "their own), scoped (per table, short-lived STS keys assumed from rest_sts_role_arn: read-only "
        "for readers, no manifest writes for writers), server (the server's own keys, to every "
        "principal: a warning at start), or file (per project, from rest_credentials_file).",
    )
    rest_credentials_file: Path | None = Field(
        None,
        description="JSON file of the S3 key pairs handed out per project (rest_storage_credentials=file).",
    )
    rest_sts_role_arn: str = Field(
        "",
        description="The IAM role scoped credentials are assumed from (rest_storage_credentials=scoped); "
        "its own policy must allow at least what a writer gets.",
    )
    rest_sts_endpoint: str = Field(
        "",
        description="STS endpoint for scoped credentials; default s3_endpoint when that is set and not "
        "an amazonaws.com host (SeaweedFS, MinIO, Ceph serve STS there), else AWS's regional STS.",
    )
    rest_sts_duration_seconds: int = Field(
        900,
        ge=900,
        le=43200,
        description="Lifetime of scoped credentials (AssumeRole's range; at most the role's maximum).",
    )

    log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = "INFO"
    log_format: Literal["text", "json"] = Field(
        "text",
        description="text, or json: one JSON object per line (request id, principal, project, duration).",
    )

    # Observability of the serving surfaces (docs/operations.md).
    metrics_port: int | None = Field(
        None,
        ge=0,
        le=65535,
        description="Serve Prometheus /metrics on this port (0: any free port); unset: no metrics endpoint.",
    )
    metrics_host: str = Field("127.0.0.1", description="Address the metrics endpoint binds.")
    audit_log: str = Field(
        "",
        description="Where the query audit trail goes: a JSONL file path, '-' for stdout, 'off'; "
        "default <home>/audit/queries.jsonl.",
    )

    @model_validator(mode="after")
    def _derive_and_check(self) -> LakeSettings:
        home = self.home.expanduser()
        object.__setattr__(self, "home", home)
        if not self.registry_url:
            object.__setattr__(self, "registry_url", f"sqlite:///{(home / 'registry.db').as_posix()}")
        if not self.warehouse_root:
            object.__setattr__(self, "warehouse_root", (home / "warehouse").as_posix())
        if not self.results_root:
            object.__setattr__(self, "results_root", _default_results_root(home, self.warehouse_root))
        if self.warehouse_roots.strip():
            _check_warehouse_roots(self.warehouse_roots)
        else:
            object.__setattr__(self, "warehouse_roots", self.warehouse_root)
        if not self.registry_url.startswith(("sqlite:///", "dynamodb://")):
            raise ValueError(
                f"registry_url: unsupported scheme in {self.registry_url!r} "
                "(expected sqlite:///PATH or dynamodb://TABLE)"
            )
        if self.registry_url == "sqlite:///":
            raise ValueError("registry_url: sqlite:/// needs a PATH (sqlite:///PATH: the registry's file)")
        if self.registry_url.startswith("sqlite:///") and any(c in self.registry_url for c in "?#"):
            raise ValueError(
                f"registry_url: {self.registry_url!r}: sqlite:///PATH takes no query or fragment "
                "(the registry opens PATH as written: ? and # would become part of the file's name)"
            )
        if self.inbox and (why := inbox_location_problem(self.inbox)):
            raise ValueError(f"inbox: {why}")
        if self.s3_endpoint and not _is_http_url(self.s3_endpoint):
            raise ValueError(
                f"s3_endpoint: expected http://HOST[:PORT] or https://..., got {self.s3_endpoint!r}"
            )
        if (self.rest_tls_cert_file is None) != (self.rest_tls_key_file is None):
            raise ValueError(
                "rest_tls_cert_file: set both rest_tls_cert_file and rest_tls_key_file, or neither"
            )
        if (self.rest_storage_credentials == "file") != (self.rest_credentials_file is not None):
            raise ValueError("rest_credentials_file: set it exactly when rest_storage_credentials is 'file'")
        if (self.rest_storage_credentials == "scoped") != bool(self.rest_sts_role_arn):
            raise ValueError("rest_sts_role_arn: set it exactly when rest_storage_credentials is 'scoped'")
        if self.rest_sts_endpoint and self.rest_storage_credentials != "scoped":
            raise ValueError("rest_sts_endpoint: only used when rest_storage_credentials is 'scoped'")
        if any(c.isalnum() or c == "_" or c.isspace() or c == "/" for c in self.rest_id_delimiter):
            raise ValueError("rest_id_delimiter: must not contain letters, digits, '_', '/' or spaces")
        if any(not c.isprintable() for c in self.actor):
            # The commit log records it as who did what; a line break or escape code in it forges
            # or hides lines wherever the log is shown as text.
            raise ValueError("actor: no control characters (line breaks, tabs, escape codes)")
        if self.lease_safety_margin_seconds >= self.lease_ttl_seconds:
            raise ValueError("lease_safety_margin_seconds: must be below lease_ttl_seconds")
        # Lease I/O must give up before the margin is used up, or a slow write could land late.
        if self.lease_io_timeout_seconds >= self.lease_safety_margin_seconds:
            raise ValueError("lease_io_timeout_seconds: must be below lease_safety_margin_seconds")
        return self

    def inbox_location(self) -> str:
        """The inbox: ``inbox`` (``LAKE_INBOX``), else ``<home>/inbox``."""
        return self.inbox or (Path(self.home).expanduser().resolve() / "inbox").as_posix()

    def storage_options(self, root: str) -> dict[str, str]:
        """Lance/object_store options for a storage root (empty for local folders)."""
        if not root.startswith("s3://"):
            return {}
        opts: dict[str, str] = {}
        if self.s3_endpoint:
            opts["aws_endpoint"] = self.s3_endpoint
        if self.s3_region:
            opts["aws_region"] = self.s3_region
        if self.s3_access_key_id:
            opts["aws_access_key_id"] = self.s3_access_key_id
        if self.s3_secret_access_key:
            opts["aws_secret_access_key"] = self.s3_secret_access_key
        if self.s3_allow_http:
            opts["allow_http"] = "true"
        return opts


def _default_results_root(home: Path, warehouse_root: str) -> str:
    """Outside every warehouse: a reader's results must not fill the data's disk. An s3://
    warehouse root with a prefix gets its sibling prefix, so replicas keep sharing the area."""
    bucket, _, prefix = warehouse_root.removeprefix("s3://").rstrip("/").partition("/")
    if warehouse_root.startswith("s3://") and prefix:
        return f"s3://{bucket}/{prefix}-results"
    return (home / "results").as_posix()


#: An S3 bucket name as AWS and SeaweedFS accept it: 3-63 lower-case letters, digits, dots and
#: dashes, a letter or digit at each end. The one rule for every s3:// location the platform takes.
S3_BUCKET = re.compile(r"[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]")


def inbox_location_problem(location: str) -> str | None:
    """Why ``location`` cannot be an inbox (None when it can): an S3 location with no valid
    bucket, or another scheme, would fail every sensor tick with the storage client's error."""
    bucket = location.removeprefix("s3://").split("/", 1)[0] if location.startswith("s3://") else None
    scheme = "://" in location and not location.startswith(("s3://", "file://"))
    if scheme or (bucket is not None and not S3_BUCKET.fullmatch(bucket)):
        return (
            "the inbox location is a local folder or s3://bucket/prefix (a bucket name of 3-63 "
            f"lower-case letters, digits, dots and dashes), not {location!r}"
        )
    return None


def _is_http_url(text: str) -> bool:
    from urllib.parse import urlsplit

    try:
        parts = urlsplit(text)
        parts.port  # noqa: B018 - a port beyond 65535 or not a number raises here
    except ValueError:
        return False
    return parts.scheme in ("http", "https") and bool(parts.hostname)


def _check_warehouse_roots(value: str) -> None:
    for root in (r.strip() for r in value.split(",")):
        body = root.removeprefix("s3://")
        absolute = body.split("/", 1)[0] != "" if root.startswith("s3://") else root.startswith("/")
        if not absolute or ".." in body.split("/"):
            raise ValueError(
                f"warehouse_roots: {root!r} is not an absolute folder or s3://bucket[/prefix] (without '..')"
            )


def load_settings(**overrides: Any) -> LakeSettings:
    """Read settings from the environment and ``.env``; raise SettingsError naming the variable."""
    try:
        return LakeSettings(**overrides)
    except ValidationError as exc:
        raise settings_error(exc, ENV_PREFIX) from None


def settings_error(exc: ValidationError, env_prefix: str) -> SettingsError:
    """One SettingsError naming each bad variable (``<env_prefix><FIELD>``) and what is wrong."""
    problems = []
    for err in exc.errors():
        loc = [str(p) for p in err.get("loc", ()) if p]
        msg = str(err.get("msg", "invalid value")).removeprefix("Value error, ")
        field = loc[0] if loc else ""
        if not field and ": " in msg:
            # Model-level checks name their field at the front of the message.
            field, msg = msg.split(": ", 1)
        name = f"{env_prefix}{field.upper()}" if field else "settings"
        problems.append(f"{name}: {msg}")
    return SettingsError("bad setting: " + "; ".join(problems))
