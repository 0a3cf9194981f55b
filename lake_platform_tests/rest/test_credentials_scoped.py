"""Scoped storage credentials (``LAKE_REST_STORAGE_CREDENTIALS=scoped``) against SeaweedFS with
STS on loopback: the store itself refuses what a table's scope does not allow, and one client's
DescribeTable calls cost one STS call per lifetime of its keys."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import boto3
import lance
import pytest
from botocore.config import Config
from botocore.exceptions import ClientError

from lake_platform.catalog.principals import Principal
from lake_platform.rest.credentials_scoped import (
    ScopedCredentials,
    session_name,
    sts_endpoint,
)
from lake_platform.settings import load_settings
from lake_platform_tests.rest.clients import rest_namespace, rows
from lake_platform_tests.rest.conftest import RestLake, start_rest_lake
from lake_platform_tests.s3_server import S3Endpoint, start_seaweedfs

T = ["p", "w", "ns", "events"]
OTHER = ["p", "w", "ns", "other"]


@pytest.fixture(scope="module")
def sts_s3(tmp_path_factory: pytest.TempPathFactory) -> Iterator[S3Endpoint]:
    """A SeaweedFS of its own that serves STS (the session's shared one does not)."""
    endpoint = start_seaweedfs(tmp_path_factory.mktemp("seaweed-sts"), sts=True)
    try:
        yield endpoint
    finally:
        endpoint.stop()


@contextmanager
def lake_on(tmp_path: Path, s3: S3Endpoint, **overrides: Any) -> Iterator[RestLake]:
    settings: dict[str, Any] = {
        "rest_storage_credentials": "scoped",
        "rest_sts_role_arn": s3.sts_role_arn,
        **overrides,
    }
    yield from start_rest_lake(
        tmp_path, warehouse_root=f"s3://{s3.bucket}/{s3.new_prefix()}", **s3.lake_settings(), **settings
    )


@pytest.fixture
def scoped_lake(tmp_path: Path, sts_s3: S3Endpoint) -> Iterator[RestLake]:
    with lake_on(tmp_path, sts_s3) as lake:
        yield lake


def describe(lake: RestLake, who: str, table: list[str] = T) -> dict[str, str]:
    resp = lake.post(f"/v1/table/{'$'.join(table)}/describe", {"id": table}, who=who)
    assert resp.status_code == 200, resp.text
    return resp.json()["storage_options"]


def s3_with(s3: S3Endpoint, options: dict[str, str], *, session_token: str | None = None) -> Any:
    """A boto3 S3 client signing with vended options (one attempt: a refusal is the answer)."""
    return boto3.client(
        "s3",
        endpoint_url=s3.endpoint,
        region_name=s3.region,
        aws_access_key_id=options["aws_access_key_id"],
        aws_secret_access_key=options["aws_secret_access_key"],
        aws_session_token=session_token or options["aws_session_token"],
        config=Config(retries={"max_attempts": 1}),
    )


def refused(call: Any, **kwargs: Any) -> str:
    """The error code the store answers ``call`` with (the test fails if it is allowed)."""
    with pytest.raises(ClientError) as info:
        call(**kwargs)
    assert info.value.response["ResponseMetadata"]["HTTPStatusCode"] == 403
    return str(info.value.response["Error"]["Code"])


def table_prefix(lake: RestLake, name: str) -> str:
    location = lake.catalog.reads.open_table(name).record.location
    return location.removeprefix("s3://").split("/", 1)[1].rstrip("/")


def test_lance_clients_work_within_their_scope(scoped_lake: RestLake, sts_s3: S3Endpoint) -> None:
    lake = scoped_lake
    writer = rest_namespace(lake.url, lake.tokens["writer"])
    # A stock client creates and appends with the keys DeclareTable/DescribeTable vend: data
    # files and its staging manifest are within a writer's scope, and the registry publishes.
    assert lance.write_dataset(rows([1, 2]), namespace_client=writer, table_id=T, mode="create").version == 1
    assert lance.write_dataset(rows([3]), namespace_client=writer, table_id=T, mode="append").version == 2
    reader = rest_namespace(lake.url, lake.tokens["reader"])
    assert lance.dataset(namespace_client=reader, table_id=T).count_rows() == 3
    before = time.time() * 1000
    options = describe(lake, "reader")
    assert options["aws_endpoint"] == sts_s3.endpoint  # the rest of the options as the server's
    assert options["aws_access_key_id"] != sts_s3.access_key_id and options["aws_session_token"]
    # The spec's expiry key, 15 minutes (the default) from when the keys were made.
    assert before + 890_000 <= int(options["expires_at_millis"]) <= time.time() * 1000 + 900_000
    assert options["refresh_offset_millis"] == "60000"  # Lance renews a minute before that


def test_the_store_refuses_what_a_scope_does_not_allow(scoped_lake: RestLake, sts_s3: S3Endpoint) -> None:
    lake = scoped_lake
    lake.catalog.tables.create_table("p.w.ns.events", rows([1]))
    lake.catalog.tables.create_table("p.w.ns.other", rows([2]))
    events, other = table_prefix(lake, "p.w.ns.events"), table_prefix(lake, "p.w.ns.other")
    bucket = sts_s3.bucket
    reader = s3_with(sts_s3, describe(lake, "reader"))
    writer = s3_with(sts_s3, describe(lake, "writer"))

    # A reader reads and lists its table, and writes nothing.
    listed = reader.list_objects_v2(Bucket=bucket, Prefix=f"{events}/_versions/")["Contents"]
    manifests = [o for o in listed if o["Key"].endswith(".manifest")]
    assert manifests, listed
    assert reader.get_object(Bucket=bucket, Key=manifests[0]["Key"])["Body"].read()
    assert (
        refused(reader.put_object, Bucket=bucket, Key=f"{events}/data/x.lance", Body=b"x") == "AccessDenied"
    )
    assert refused(reader.delete_object, Bucket=bucket, Key=manifests[0]["Key"]) == "AccessDenied"

    # A writer writes data and staging manifests, never a published manifest or a tag.
    writer.put_object(Bucket=bucket, Key=f"{events}/data/x.lance", Body=b"x")
    writer.put_object(Bucket=bucket, Key=f"{events}/_versions/9.manifest-1234", Body=b"x")
    for key in ("_versions/9.manifest", "_versions/18446744073709551614.manifest", "_latest.manifest"):
        assert refused(writer.put_object, Bucket=bucket, Key=f"{events}/{key}", Body=b"m") == "AccessDenied"
    assert refused(writer.delete_object, Bucket=bucket, Key=manifests[0]["Key"]) == "AccessDenied"
    assert refused(writer.put_object, Bucket=bucket, Key=f"{events}/_refs/tags/t.json", Body=b"{}")
    assert lake.catalog.reads.open_table("p.w.ns.events").count_rows() == 1

    # Neither reaches another table's prefix, even of the same project.
    for client in (reader, writer):
        refused(client.list_objects_v2, Bucket=bucket, Prefix=f"{other}/")
        listing = sts_s3.keys_under(other)
        refused(client.get_object, Bucket=bucket, Key=listing[0])
        refused(client.put_object, Bucket=bucket, Key=f"{other}/data/x.lance", Body=b"x")
        refused(client.list_objects_v2, Bucket=bucket, Prefix=events.rsplit("/", 1)[0] + "/")


def resigned(token: str, key: bytes, **changes: Any) -> str:
    """The session token with claims changed, signed again with the store's signing key."""
    header, payload, _ = token.split(".")
    claims = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    body = base64.urlsafe_b64encode(json.dumps({**claims, **changes}).encode()).rstrip(b"=").decode()
    mac = hmac.new(key, f"{header}.{body}".encode(), hashlib.sha256).digest()
    return f"{header}.{body}.{base64.urlsafe_b64encode(mac).rstrip(b'=').decode()}"


def test_the_store_refuses_an_expired_credential(scoped_lake: RestLake, sts_s3: S3Endpoint) -> None:
    # AssumeRole's shortest lifetime is 15 minutes; rather than wait for it, the same session
    # token with its expiry moved into the past (re-signed with the store's key) stands in.
    scoped_lake.catalog.tables.create_table("p.w.ns.events", rows([1]))
    key = sts_s3.keys_under(table_prefix(scoped_lake, "p.w.ns.events"))[0]
    options = describe(scoped_lake, "reader")
    token, signing_key = options["aws_session_token"], sts_s3.sts_signing_key
    still_valid = s3_with(sts_s3, options, session_token=resigned(token, signing_key))
    assert still_valid.get_object(Bucket=sts_s3.bucket, Key=key)["Body"].read()  # re-signing alone is fine
    expired = s3_with(sts_s3, options, session_token=resigned(token, signing_key, exp=int(time.time()) - 1))
    refused(expired.get_object, Bucket=sts_s3.bucket, Key=key)


def count_sts_calls(credentials: ScopedCredentials) -> list[str]:
    """Every AssumeRole request the client sends (retries included), as it sends them."""
    sent: list[str] = []
    credentials.client.meta.events.register(
        "before-send.sts.AssumeRole", lambda request, **_: sent.append(request.url)
    )
    return sent


def test_a_clients_describe_calls_cost_one_sts_call(scoped_lake: RestLake) -> None:
    scoped_lake.catalog.tables.create_table("p.w.ns.events", rows([1]))
    scoped = scoped_lake.service.credentials.scoped
    assert scoped is not None
    sent = count_sts_calls(scoped)
    answers = [describe(scoped_lake, "reader") for _ in range(100)]
    assert len(sent) == 1
    assert len({a["aws_session_token"] for a in answers}) == 1
    # Another principal, or the same one on another table, gets keys of its own.
    describe(scoped_lake, "writer")
    scoped_lake.catalog.tables.create_table("p.w.ns.other", rows([1]))
    describe(scoped_lake, "reader", OTHER)
    assert len(sent) == 3


def test_cached_keys_are_renewed_shortly_before_they_expire(tmp_path: Path, sts_s3: S3Endpoint) -> None:
    now = [time.time()]
    settings = load_settings(
        home=tmp_path,
        **sts_s3.lake_settings(),
        rest_storage_credentials="scoped",
        rest_sts_role_arn=sts_s3.sts_role_arn,
    )
    scoped = ScopedCredentials(settings, clock=lambda: now[0])
    sent = count_sts_calls(scoped)
    who = Principal(name="etl", kind="token", project="p", role="writer")
    location = f"s3://{sts_s3.bucket}/{sts_s3.new_prefix()}/t.lance"
    first = scoped.keys_for(who, location, write=True)
    expires = int(first["expires_at_millis"]) / 1000
    # 900 s keys are renewed once less than a fifth of their lifetime (180 s) remains.
    now[0] = expires - 181
    assert scoped.keys_for(who, location, write=True) == first and len(sent) == 1
    now[0] = expires - 179
    renewed = scoped.keys_for(who, location, write=True)
    assert len(sent) == 2 and renewed["aws_session_token"] != first["aws_session_token"]


def test_an_sts_refusal_is_503_with_no_keys(tmp_path: Path, sts_s3: S3Endpoint) -> None:
    nobody = "arn:aws:iam::000000000000:role/NotTrusted"
    with lake_on(tmp_path, sts_s3, rest_sts_role_arn=nobody) as lake:
        lake.catalog.tables.create_table("p.w.ns.events", rows([1]))
        resp = lake.post("/v1/table/p$w$ns$events/describe", {"id": T}, who="reader")
        assert resp.status_code == 503, resp.text
        assert "scoped storage credentials are unavailable" in resp.text
        assert nobody not in resp.text and sts_s3.access_key_id not in resp.text  # the reason is logged


@pytest.mark.parametrize(
    ("overrides", "expected"),
    [
        ({"s3_endpoint": "http://127.0.0.1:8333"}, "http://127.0.0.1:8333"),  # SeaweedFS, MinIO: the S3 port
        ({"s3_endpoint": "https://s3.eu-west-1.amazonaws.com"}, None),  # AWS: its regional STS
        ({}, None),
        ({"s3_endpoint": "https://s3.amazonaws.com", "rest_sts_endpoint": "https://sts.x"}, "https://sts.x"),
    ],
)
def test_the_sts_endpoint_defaults_to_the_one_an_operator_expects(
    tmp_path: Path, overrides: dict[str, str], expected: str | None
) -> None:
    settings = load_settings(
        home=tmp_path,
        rest_storage_credentials="scoped",
        rest_sts_role_arn="arn:aws:iam::1:role/r",
        **overrides,
    )
    assert sts_endpoint(settings) == expected


def test_the_session_name_says_who_within_stss_alphabet() -> None:
    assert session_name(Principal(name="ana maría/x", kind="user", project="p", role="reader")) == (
        "lake-user-ana-mar-a-x"
    )
    assert len(session_name(Principal(name="n" * 200, kind="token", project="p", role="writer"))) == 64
