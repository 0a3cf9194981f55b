"""LAKE_LOG_FORMAT=json: one JSON object per line, request lines with id, principal, project and
duration; and no password, token, bearer or ticket in the logs or the audit trail, whatever
the calls did."""

from __future__ import annotations

import base64
import io
import json
import logging
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pyarrow.flight as fl
import pytest

from lake_platform.catalog.catalog import Catalog
from lake_platform.observability.audit import audit_target
from lake_platform.observability.logs import configure_logging
from lake_platform.settings import LakeSettings, load_settings
from lake_platform_tests.doubles import StaticAuthenticator
from lake_platform_tests.flight.conftest import (
    ALICE,
    PASSWORDS,
    SERVICE,
    build_catalog,
    plan,
    query,
    start_server,
)

PASSWORD = "Pl4nted-Passw0rd-7f3a91"
WRONG = "Wr0ng-Planted-Guess-11aa0e"
TOKEN = "planted-service-token-5d9c0b7e11f2"


@pytest.fixture
def json_logs() -> Iterator[io.StringIO]:
    out = io.StringIO()
    configure_logging("DEBUG", "json", stream=out, force=True)
    try:
        yield out
    finally:
        root = logging.getLogger()
        for handler in [h for h in root.handlers if getattr(h, "_lake", False)]:
            root.removeHandler(handler)
        root.setLevel(logging.WARNING)


@pytest.fixture
def lake(tmp_path: Path) -> Iterator[tuple[LakeSettings, Catalog]]:
    settings, catalog = build_catalog(tmp_path / "home")
    try:
        yield settings, catalog
    finally:
        catalog.close()


def test_json_lines_carry_the_request_and_no_secret(
    lake: tuple[LakeSettings, Catalog], json_logs: io.StringIO
) -> None:
    settings, catalog = lake
    auth = StaticAuthenticator(users={"alice": (PASSWORD, ALICE)}, tokens={TOKEN: SERVICE})
    server = start_server(settings, catalog, authenticator=auth)
    secrets_seen: list[bytes] = [PASSWORD.encode(), WRONG.encode(), TOKEN.encode()]
    try:
        uri = f"grpc://127.0.0.1:{server.port}"
        client = fl.connect(uri)
        with pytest.raises(fl.FlightUnauthenticatedError):
            client.authenticate_basic_token("alice", WRONG)
        header = client.authenticate_basic_token("alice", PASSWORD)
        secrets_seen.append(header[1])  # b"Bearer <token>"
        secrets_seen.append(header[1].split(b" ", 1)[1])
        options = fl.FlightCallOptions(headers=[header])
        info = plan(client, options, "SELECT id FROM w.ns.t WHERE id < 4")
        ticket = info.endpoints[0].ticket.ticket
        secrets_seen += [
            ticket,
            base64.b64encode(ticket),
            base64.urlsafe_b64encode(ticket),
            ticket.hex().encode(),
        ]
        assert client.do_get(info.endpoints[0].ticket, options).read_all().num_rows == 4
        with pytest.raises(KeyError):
            plan(client, options, "SELECT * FROM w.ns.nope")
        service = fl.FlightCallOptions(headers=[(b"authorization", b"Bearer " + TOKEN.encode())])
        assert query(client, service, "SELECT 1 AS one").num_rows == 1
        bad = fl.FlightCallOptions(headers=[(b"authorization", b"Bearer " + TOKEN.encode() + b"x")])
        with pytest.raises(fl.FlightUnauthenticatedError):
            plan(client, bad, "SELECT 1")
    finally:
        server.stop(grace=0)

    text = json_logs.getvalue()
    lines = [json.loads(line) for line in text.splitlines() if line.strip()]  # every line is JSON
    requests = [r for r in lines if r["logger"] == "lake.request"]
    assert {r["method"] for r in requests} >= {"Handshake", "GetFlightInfo", "DoGet"}
    handshakes = [r for r in requests if r["method"] == "Handshake"]
    assert [(r["status"], r.get("principal")) for r in handshakes] == [
        ("UNAUTHENTICATED", None),
        ("OK", "alice"),
    ]
    doget = next(r for r in requests if r["method"] == "DoGet")
    assert doget["principal"] == "alice" and doget["project"] == "p" and doget["status"] == "OK"
    assert doget["duration_ms"] > 0 and len(doget["request_id"]) == 16
    failed = next(r for r in requests if r["status"] == "NOT_FOUND")
    assert failed["method"] == "GetFlightInfo" and failed["principal"] == "alice"
    assert any(r["status"] == "UNAUTHENTICATED" for r in requests)
    assert len({r["request_id"] for r in requests}) == len(requests)
    audit = Path(audit_target(settings)).read_bytes()
    assert b"SELECT id FROM w.ns.t WHERE id < 4" in audit
    for secret in secrets_seen:
        assert secret not in text.encode(), secret
        assert secret not in audit, secret


def test_text_is_the_default_format(tmp_path: Path) -> None:
    assert load_settings(home=tmp_path).log_format == "text"
    out = io.StringIO()
    configure_logging("INFO", "text", stream=out, force=True)
    try:
        logging.getLogger("lake.test").info("hello")
    finally:
        root = logging.getLogger()
        for handler in [h for h in root.handlers if getattr(h, "_lake", False)]:
            root.removeHandler(handler)
    assert out.getvalue() == "INFO lake.test: hello\n"


def test_bad_log_format_is_a_settings_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from click.testing import CliRunner

    from lake_platform.cli import cli

    monkeypatch.setenv("LAKE_HOME", str(tmp_path))
    monkeypatch.setenv("LAKE_LOG_FORMAT", "xml")
    result = CliRunner().invoke(cli, ["project", "list"])
    assert result.exit_code != 0 and "LAKE_LOG_FORMAT" in result.output and "Traceback" not in result.output


@pytest.mark.parametrize(
    ("level", "shown"),
    [
        ("INFO", ["INFO lake.test: ours", "INFO lake_platform.up: ours", "WARNING alembic.runtime: theirs"]),
        (
            "DEBUG",
            [
                "INFO lake.test: ours",
                "INFO lake_platform.up: ours",
                "INFO alembic.runtime: theirs",
                "WARNING alembic.runtime: theirs",
            ],
        ),
        ("WARNING", ["WARNING alembic.runtime: theirs"]),
    ],
)
def test_other_libraries_log_at_warning_unless_debug_is_asked_for(level: str, shown: list[str]) -> None:
    """Our loggers log at the configured level; a library's INFO lines (Dagster's migrations
    through alembic, a page of them at `lake up`) only at DEBUG."""
    out = io.StringIO()
    configure_logging(level, "text", stream=out, force=True)
    try:
        logging.getLogger("lake.test").info("ours")
        logging.getLogger("lake_platform.up").info("ours")
        logging.getLogger("alembic.runtime").info("theirs")
        logging.getLogger("alembic.runtime").warning("theirs")
    finally:
        root = logging.getLogger()
        for handler in [h for h in root.handlers if getattr(h, "_lake", False)]:
            root.removeHandler(handler)
        root.setLevel(logging.WARNING)
    assert out.getvalue().splitlines() == shown


def test_a_tenants_query_cannot_forge_or_hide_lines_of_the_text_log(
    lake: tuple[LakeSettings, Catalog],
) -> None:
    """A failed query's error was logged with DataFusion's message, which quotes the client's
    literals: a line break in one wrote a line of the tenant's choosing into the operator's log
    (``INFO forged...``), and a carriage return or an escape code hid what came before it on a
    terminal. These two are bad input now (not logged); what is still logged (an error the
    platform cannot type) is one line in the text format, its control characters escaped; an
    exception's traceback follows on lines that start with spaces."""
    settings, catalog = lake
    out = io.StringIO()
    configure_logging("INFO", "text", stream=out, force=True)
    server = start_server(settings, catalog)
    try:
        client = fl.connect(f"grpc://127.0.0.1:{server.port}")
        options = fl.FlightCallOptions(headers=[client.authenticate_basic_token("alice", PASSWORDS["alice"])])
        for sql in (
            "SELECT to_timestamp('x\nINFO lake.request: forged-1\r\x1b[2K')",
            "SELECT regexp_like('a', '[\nWARNING lake.audit: forged-2')",
        ):
            with pytest.raises((fl.FlightError, pa.ArrowInvalid)):  # refused as bad input
                query(client, options, sql)
        # What a failure the platform cannot type logs: the query's error, quoting the client.
        logging.getLogger("lake_platform.query.errors").warning(
            "query failed: %s", "to_timestamp('x\nINFO lake.request: forged-0\r\x1b[2K')"
        )
        logging.getLogger("lake.test").error("boom", exc_info=ValueError("x\nERROR lake.test: forged-3"))
    finally:
        server.stop(grace=0)
        root = logging.getLogger()
        for handler in [h for h in root.handlers if getattr(h, "_lake", False)]:
            root.removeHandler(handler)
        root.setLevel(logging.WARNING)
    text = out.getvalue()
    assert "forged-0" in text and "forged-3" in text  # logged, escaped
    records = [line for line in text.split("\n") if line and not line.startswith(" ")]
    assert all(line.split(" ", 1)[0] in ("INFO", "WARNING", "ERROR") for line in records), text
    assert not [line for line in records if "forged" in line.split(": ", 1)[0]], text
    assert "\r" not in text and "\x1b" not in text, repr(text)
