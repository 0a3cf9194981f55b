"""Sealed tickets and prepared-statement handles are decoded strictly (issue 11, defect 8).

The sealed blob is authenticated, but its protobuf wrappers (an Any around a
TicketStatementQuery or a CommandPreparedStatementQuery) were parsed leniently: protobuf skips
unknown fields, so bytes appended to a ticket (``1801`` is field 3 = 1, ``2200`` field 4 = b"")
were served. The documented promise is that any change is refused: unknown fields, repeated
fields and trailing bytes, in the outer Any as in the inner message.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from typing import Any

import pyarrow as pa
import pyarrow.flight as fl
import pytest

from lake_platform.errors import Unauthenticated
from lake_platform.flight import proto
from lake_platform_tests.flight.conftest import Running, fetch, login, plan, varint

#: The tails the issue reports as served.
ISSUE_TAILS = (bytes.fromhex("1801"), bytes.fromhex("2200"))
SWEEP = 3000
SEED = 20261130
COUNT_SQL = "SELECT count(*) AS n FROM w.ns.t"
#: How pyarrow's client raises a refused call (the type depends on the call, not the status).
REFUSED = (fl.FlightError, pa.ArrowException, OSError)
BAD_HANDLE = r"unauthenticated error, with message: invalid prepared statement handle \[Unauthenticated"


def random_tails(count: int, seed: int = SEED) -> Iterator[bytes]:
    rng = random.Random(seed)  # noqa: S311 - a reproducible sweep, not a secret
    for _ in range(count):
        yield bytes(rng.getrandbits(8) for _ in range(rng.randint(1, 8)))


@pytest.fixture(scope="module")
def conn(running: Running) -> tuple[fl.FlightClient, fl.FlightCallOptions]:
    return login(running.uri)


@pytest.fixture(scope="module")
def ticket(conn: tuple[fl.FlightClient, fl.FlightCallOptions]) -> bytes:
    client, options = conn
    return plan(client, options, COUNT_SQL).endpoints[0].ticket.ticket


@pytest.fixture(scope="module")
def prepared(conn: tuple[fl.FlightClient, fl.FlightCallOptions]) -> bytes:
    """A prepared-statement handle (the sealed blob itself)."""
    client, options = conn
    request = proto.ActionCreatePreparedStatementRequest(query=COUNT_SQL)
    [result] = list(client.do_action(fl.Action("CreatePreparedStatement", proto.pack(request)), options))
    return proto.parse(
        proto.ActionCreatePreparedStatementResult, proto.unpack_any(result.body.to_pybytes())[1]
    ).prepared_statement_handle


def refused(client: fl.FlightClient, options: fl.FlightCallOptions, ticket: bytes) -> BaseException | None:
    """The error DoGet answers ``ticket`` with, or None if it was served."""
    try:
        client.do_get(fl.Ticket(ticket), options).read_all()
    except (fl.FlightUnauthenticatedError, pa.ArrowInvalid) as exc:
        text = str(exc)
        assert "Traceback" not in text and ".py" not in text, text
        return exc
    return None


def inner_tail(ticket: bytes, tail: bytes) -> bytes:
    """``ticket`` with ``tail`` appended to the TicketStatementQuery inside a canonical Any."""
    _, payload = proto.unpack_any(ticket)
    wrapper = proto.any_pb2.Any(
        type_url=proto.TYPE_URL_PREFIX + f"{proto.SQL_PACKAGE}.TicketStatementQuery", value=payload + tail
    )
    return wrapper.SerializeToString()


def test_the_issues_tails_are_refused_as_an_invalid_ticket(conn: Any, ticket: bytes) -> None:
    client, options = conn
    assert fetch(client, options, fl.Ticket(ticket)).to_pylist() == [{"n": 1000}]
    for tail in ISSUE_TAILS:
        for tampered in (ticket + tail, inner_tail(ticket, tail)):
            with pytest.raises(fl.FlightUnauthenticatedError, match=r"invalid ticket \[Unauthenticated"):
                client.do_get(fl.Ticket(tampered), options).read_all()
    assert fetch(client, options, fl.Ticket(ticket)).to_pylist() == [{"n": 1000}]


@pytest.mark.slow
def test_a_seeded_sweep_of_random_tails_is_all_refused(conn: Any, ticket: bytes) -> None:
    client, options = conn
    served = [tail.hex() for tail in random_tails(SWEEP) if refused(client, options, ticket + tail) is None]
    assert served == [], f"{len(served)} of {SWEEP} tails were served, e.g. {served[:5]}"
    served = [
        tail.hex()
        for tail in random_tails(SWEEP // 10, SEED + 1)
        if refused(client, options, inner_tail(ticket, tail)) is None
    ]
    assert served == [], f"{len(served)} tails inside the TicketStatementQuery were served, e.g. {served[:5]}"
    assert fetch(client, options, fl.Ticket(ticket)).to_pylist() == [{"n": 1000}]


def test_a_repeated_field_is_refused_even_when_it_repeats_the_same_value(conn: Any, ticket: bytes) -> None:
    """Protobuf keeps the last of a repeated scalar field: the same handle twice parses to the
    same message, but it is not the bytes this server issued."""
    client, options = conn
    wrapper = proto.any_pb2.Any()
    wrapper.ParseFromString(ticket)
    value_again = b"\x12" + varint(len(wrapper.value)) + wrapper.value
    with pytest.raises(fl.FlightUnauthenticatedError, match="invalid ticket"):
        client.do_get(fl.Ticket(ticket + value_again), options).read_all()


def test_prepared_handle_wrappers_with_a_tail_are_refused(conn: Any, prepared: bytes) -> None:
    client, options = conn
    command = proto.pack(proto.CommandPreparedStatementQuery(prepared_statement_handle=prepared))
    assert fetch(
        client, options, client.get_flight_info(fl.FlightDescriptor.for_command(command), options)
    ).to_pylist() == [{"n": 1000}]
    close = proto.pack(proto.ActionClosePreparedStatementRequest(prepared_statement_handle=prepared))
    calls = {
        "GetFlightInfo": lambda tail: client.get_flight_info(
            fl.FlightDescriptor.for_command(command + tail), options
        ),
        "GetSchema": lambda tail: client.get_schema(fl.FlightDescriptor.for_command(command + tail), options),
        "ClosePreparedStatement": lambda tail: list(
            client.do_action(fl.Action("ClosePreparedStatement", close + tail), options)
        ),
        "DoPut": lambda tail: bind(client, options, command + tail),
    }
    for call in calls.values():
        for tail in ISSUE_TAILS:
            # pyarrow reports some calls' statuses as a plain OSError.
            with pytest.raises(REFUSED, match=BAD_HANDLE):
                call(tail)
        for tail in random_tails(100, SEED + 2):
            # A tail that breaks the Any itself is a malformed command (INVALID_ARGUMENT).
            with pytest.raises(REFUSED, match=BAD_HANDLE + "|malformed Flight SQL command"):
                call(tail)
    assert fetch(
        client, options, client.get_flight_info(fl.FlightDescriptor.for_command(command), options)
    ).to_pylist() == [{"n": 1000}]


def bind(client: fl.FlightClient, options: fl.FlightCallOptions, command: bytes) -> None:
    writer, reader = client.do_put(fl.FlightDescriptor.for_command(command), pa.schema([]), options)
    try:
        writer.done_writing()
        reader.read()
    finally:
        writer.close()


def test_strict_decoding_on_its_own() -> None:
    message = proto.TicketStatementQuery(statement_handle=b"\x02sealed")
    data = proto.pack(message)
    assert (
        proto.unpack_sealed(data, proto.TicketStatementQuery, "statement_handle", "ticket") == b"\x02sealed"
    )
    for bad in (
        data + ISSUE_TAILS[0],
        data + ISSUE_TAILS[1],
        data[:-1],
        b"",
        inner_tail(data, b"\x08\x01"),
        proto.pack(proto.CommandPreparedStatementQuery(prepared_statement_handle=b"\x02sealed")),
    ):
        with pytest.raises(Unauthenticated, match="^invalid ticket$"):
            proto.unpack_sealed(bad, proto.TicketStatementQuery, "statement_handle", "ticket")
