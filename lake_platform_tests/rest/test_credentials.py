"""The S3 keys DescribeTable and DeclareTable hand out (``LAKE_REST_STORAGE_CREDENTIALS``), against
SeaweedFS with two identities: one that may write, one that may only read and list."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import lance
import pytest

from lake_platform.errors import SettingsError
from lake_platform.rest.credentials import SECRET_KEYS
from lake_platform.rest.server import RestService
from lake_platform_tests.rest.clients import rest_namespace, rows
from lake_platform_tests.rest.conftest import RestLake, rest_settings, start_rest_lake
from lake_platform_tests.s3_server import S3Endpoint

T = ["p", "w", "ns", "events"]
DESCRIBE = "/v1/table/p$w$ns$events/describe"


@pytest.fixture
def reader_keys(s3: S3Endpoint) -> tuple[str, str]:
    if not s3.read_access_key_id:
        pytest.skip("an external S3 endpoint without a read-only identity")
    return s3.read_access_key_id, s3.read_secret_access_key


def keys_file(path: Path, s3: S3Endpoint, reader_keys: tuple[str, str]) -> Path:
    path.write_text(
        json.dumps(
            {
                "projects": {
                    "p": {
                        "read": {"access_key_id": reader_keys[0], "secret_access_key": reader_keys[1]},
                        "write": {
                            "access_key_id": s3.access_key_id,
                            "secret_access_key": s3.secret_access_key,
                        },
                    }
                }
            }
        )
    )
    return path


@contextmanager
def s3_rest_lake(tmp_path: Path, s3: S3Endpoint, s3_prefix: str, **overrides: Any) -> Iterator[RestLake]:
    yield from start_rest_lake(
        tmp_path, warehouse_root=f"s3://{s3.bucket}/{s3_prefix}", **s3.lake_settings(), **overrides
    )


def vended(lake: RestLake, who: str) -> dict[str, str]:
    resp = lake.post(DESCRIBE, {"id": T}, who=who)
    assert resp.status_code == 200, resp.text
    return resp.json().get("storage_options") or {}


@pytest.fixture
def file_lake(
    tmp_path: Path, s3: S3Endpoint, s3_prefix: str, reader_keys: tuple[str, str]
) -> Iterator[RestLake]:
    """A REST server handing out the key pairs of a credentials file (project p only)."""
    path = keys_file(tmp_path / "keys.json", s3, reader_keys)
    with s3_rest_lake(
        tmp_path, s3, s3_prefix, rest_storage_credentials="file", rest_credentials_file=path
    ) as lake:
        yield lake


def test_file_mode_hands_readers_a_read_only_pair_and_writers_theirs(
    file_lake: RestLake, s3: S3Endpoint, reader_keys: tuple[str, str]
) -> None:
    lake = file_lake
    writer = rest_namespace(lake.url, lake.tokens["writer"])
    # The writer commits through the registry with the write pair DeclareTable handed it.
    assert lance.write_dataset(rows([1, 2]), namespace_client=writer, table_id=T, mode="create").version == 1
    assert lance.write_dataset(rows([3]), namespace_client=writer, table_id=T, mode="append").version == 2
    assert vended(lake, "writer")["aws_access_key_id"] == s3.access_key_id
    for_reader = vended(lake, "reader")
    assert for_reader["aws_access_key_id"] == reader_keys[0]
    assert for_reader["aws_secret_access_key"] == reader_keys[1]
    assert for_reader["aws_endpoint"] == s3.endpoint  # the rest of the options as the server's
    # The reader reads through its pair...
    reader = rest_namespace(lake.url, lake.tokens["reader"])
    assert lance.dataset(namespace_client=reader, table_id=T).count_rows() == 3
    # ...and cannot write around the registry with it.
    location = lake.catalog.reads.open_table("p.w.ns.events").record.location
    with pytest.raises(OSError, match="(?i)denied|forbidden|403"):
        lance.write_dataset(rows([9]), location, mode="append", storage_options=for_reader)
    assert lake.catalog.reads.open_table("p.w.ns.events").count_rows() == 3


def test_by_default_no_keys_are_handed_out(tmp_path: Path, s3: S3Endpoint, s3_prefix: str) -> None:
    with s3_rest_lake(tmp_path, s3, s3_prefix) as lake:  # LAKE_REST_STORAGE_CREDENTIALS=none
        lake.catalog.tables.create_table("p.w.ns.events", rows([1]))
        for who in ("writer", "reader", "admin"):
            options = vended(lake, who)
            assert not SECRET_KEYS & options.keys()
            assert options["aws_endpoint"] == s3.endpoint


def test_server_mode_hands_out_the_servers_keys_and_warns_at_start(
    tmp_path: Path, s3: S3Endpoint, s3_prefix: str, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, "lake_platform.rest.credentials"):
        with s3_rest_lake(tmp_path, s3, s3_prefix, rest_storage_credentials="server") as lake:
            warned = [r for r in caplog.records if r.levelno == logging.WARNING]
            assert any("LAKE_REST_STORAGE_CREDENTIALS=server" in r.getMessage() for r in warned)
            lake.catalog.tables.create_table("p.w.ns.events", rows([1]))
            assert vended(lake, "reader")["aws_secret_access_key"] == s3.secret_access_key


def test_a_project_missing_from_the_file_gets_no_keys(file_lake: RestLake) -> None:
    file_lake.catalog.tables.create_table("q.w.ns.events", rows([1]))
    resp = file_lake.post("/v1/table/q$w$ns$events/describe", {"id": ["q", "w", "ns", "events"]}, who="other")
    assert resp.status_code == 200, resp.text
    assert not SECRET_KEYS & (resp.json().get("storage_options") or {}).keys()


@pytest.mark.parametrize(
    ("content", "says"),
    [
        ("{not json", "not JSON"),
        ('{"projects": {"p": {"read": {"access_key_id": "a"}}}}', "secret_access_key"),
        ('{"projects": {"p": {"admin": {}}}}', "p.admin"),
        ('{"projects": {"Not A Name": {}}}', "is not a project name"),
        ('{"tenants": {}}', "projects"),
    ],
)
def test_a_bad_credentials_file_stops_the_start(tmp_path: Path, content: str, says: str) -> None:
    path = tmp_path / "keys.json"
    path.write_text(content)
    settings = rest_settings(tmp_path / "home", rest_storage_credentials="file", rest_credentials_file=path)
    with pytest.raises(SettingsError, match=says):
        RestService(settings)
    assert not (tmp_path / "home" / "registry.db").exists()  # nothing was opened, let alone written


def test_a_missing_credentials_file_stops_the_start(tmp_path: Path) -> None:
    settings = rest_settings(
        tmp_path / "home", rest_storage_credentials="file", rest_credentials_file=tmp_path / "nope.json"
    )
    with pytest.raises(SettingsError, match="cannot read it"):
        RestService(settings)


def test_file_mode_needs_the_file_and_the_file_needs_file_mode(tmp_path: Path) -> None:
    with pytest.raises(SettingsError, match="LAKE_REST_CREDENTIALS_FILE"):
        rest_settings(tmp_path / "home", rest_storage_credentials="file")
    with pytest.raises(SettingsError, match="LAKE_REST_CREDENTIALS_FILE"):
        rest_settings(tmp_path / "home", rest_credentials_file=tmp_path / "keys.json")
