"""What the endpoint refuses, each a clean typed error that leaks nothing of the server: malformed
commands and tickets, the write path (updates, ingest, Substrait, transactions), any action but
the ones ListActions names, and a table the registry holds without a schema (listed, but its
schema refused, naming the repair)."""

from __future__ import annotations

import base64

import pyarrow as pa
import pyarrow.flight as fl
import pytest
from google.protobuf import any_pb2

from lake_platform.flight import proto
from lake_platform.naming import TableName
from lake_platform.registry import keys
from lake_platform.registry.records import TableRecord, decode
from lake_platform_tests.flight.conftest import Running, raw_status
from lake_platform_tests.flight.test_security import cmd, no_leak

pytestmark = pytest.mark.filterwarnings("ignore:Cannot disable autocommit")


def raw_any(name: str, payload: bytes = b"") -> bytes:
    wrapper = any_pb2.Any(type_url=f"type.googleapis.com/arrow.flight.protocol.sql.{name}", value=payload)
    return wrapper.SerializeToString()


def test_malformed_commands_and_tickets(running: Running) -> None:
    client, options = running.client()
    bad_descriptors = [
        fl.FlightDescriptor.for_command(b"\xff\xfe garbage"),
        fl.FlightDescriptor.for_command(b""),
        fl.FlightDescriptor.for_path("w", "ns", "t"),
        fl.FlightDescriptor.for_command(
            any_pb2.Any(type_url="type.googleapis.com/evil.Cmd").SerializeToString()
        ),
        fl.FlightDescriptor.for_command(raw_any("CommandGetTables", b"\xff\xff\xff")),
        fl.FlightDescriptor.for_command(raw_any("TicketStatementQuery")),
    ]
    for descriptor in bad_descriptors:
        with pytest.raises(pa.ArrowInvalid) as err:
            client.get_flight_info(descriptor, options)
        no_leak(str(err.value))
    for ticket in [b"", b"garbage", raw_any("TicketStatementQuery", b"\x0a\x05hello")]:
        with pytest.raises((pa.ArrowInvalid, fl.FlightUnauthenticatedError)) as err:
            client.do_get(fl.Ticket(ticket), options).read_all()
        no_leak(str(err.value))
    forged = proto.pack(proto.TicketStatementQuery(statement_handle=b"eyJ" + b"\x00" * 60))
    with pytest.raises(fl.FlightUnauthenticatedError, match="invalid ticket"):
        client.do_get(fl.Ticket(forged), options).read_all()
    header = base64.urlsafe_b64encode(b'{"alg":"dir","enc":"A256GCM","kid":"k1"}').rstrip(b"=")
    forged = proto.pack(proto.TicketStatementQuery(statement_handle=header + b"..AAAAAAAAAAAAAAAA.AAAA.AAAA"))
    with pytest.raises(fl.FlightUnauthenticatedError, match="unknown key id 'k1'"):
        client.do_get(fl.Ticket(forged), options).read_all()


def test_write_path_commands_are_unimplemented(running: Running) -> None:
    client, options = running.client()
    for name, why in (
        # A Substrait plan may well only read: what to send instead, not "read-only".
        ("CommandStatementSubstraitPlan", "Substrait plans are not supported: send SQL"),
        ("CommandStatementIngest", "bulk ingestion is not supported: this endpoint is read-only"),
        ("CommandStatementUpdate", "updates are not supported: this endpoint is read-only"),
    ):
        with pytest.raises(pa.ArrowNotImplementedError, match=why) as err:
            client.get_flight_info(fl.FlightDescriptor.for_command(raw_any(name)), options)
        no_leak(str(err.value))
    descriptor = fl.FlightDescriptor.for_command(
        proto.pack(proto.CommandStatementUpdate(query="DELETE FROM w.ns.t"))
    )
    writer, _ = client.do_put(descriptor, pa.schema([("a", pa.int64())]), options)
    with pytest.raises(pa.ArrowNotImplementedError):
        writer.close()
    # A client that waits for the answer before it ends its stream (flightsql-dbapi's
    # execute_update) is refused at once, from the descriptor: nothing waits for the rest.
    descriptor = fl.FlightDescriptor.for_command(proto.pack(proto.CommandStatementUpdate(query="DELETE")))
    waiting = fl.FlightCallOptions(headers=options.headers, timeout=20)
    writer, reader = client.do_put(descriptor, pa.schema([("a", pa.int64())]), waiting)
    assert reader.read() is None  # the call ended (pyarrow reports its status at close)
    with pytest.raises(pa.ArrowNotImplementedError, match="updates are not supported"):
        writer.close()  # not DEADLINE_EXCEEDED: the refusal came without the stream's end
    for action in ("BeginTransaction", "EndTransaction", "BeginSavepoint"):
        with pytest.raises(pa.ArrowNotImplementedError, match="transactions"):
            list(client.do_action(fl.Action(action, b""), options))
    import adbc_driver_manager

    with running.adbc() as conn, conn.cursor() as cur, pytest.raises(adbc_driver_manager.Error):
        cur.adbc_ingest("evil", pa.table({"a": [1]}), mode="create")


def test_list_actions_names_exactly_the_actions_do_action_serves(running: Running) -> None:
    client, options = running.client()
    listed = {a.type: a.description for a in client.list_actions(options)}
    assert list(listed) == [
        "CreatePreparedStatement",
        "ClosePreparedStatement",
        "CancelFlightInfo",
        "CancelQuery",
        "SetSessionOptions",
        "GetSessionOptions",
        "CloseSession",
        "health",
    ]
    assert all(listed.values())
    for kind in listed:  # each reaches its handler: an empty body is malformed there, never an unknown action
        try:
            list(client.do_action(fl.Action(kind, b""), options))
        except pa.ArrowException as exc:
            assert "unknown action" not in str(exc) and "not supported" not in str(exc), (kind, exc)
    for kind, refusal in (
        ("CreatePreparedSubstraitPlan", "Substrait plans are not supported"),
        ("EndSavepoint", "transactions are not supported"),
        ("Nope", "unknown action 'Nope'"),
    ):
        with pytest.raises(pa.ArrowNotImplementedError, match=refusal):
            list(client.do_action(fl.Action(kind, b""), options))


def test_table_without_schema_is_listed_but_has_no_schema(running: Running) -> None:
    store = running.catalog.store
    key = keys.table(TableName.parse("p.w.ns.sub.u"))
    item = store.get(key)
    assert item is not None
    record = decode(TableRecord, item.value, key)
    changed = store.compare_and_swap(
        key, item.revision, record.model_copy(update={"schema_ipc_b64": ""}).encode()
    )
    try:
        running.server.snapshots.refresh()
        client, options = running.client()
        listed = client.do_get(
            client.get_flight_info(cmd(proto.CommandGetTables()), options).endpoints[0].ticket, options
        ).read_all()
        assert "u" in listed.column("table_name").to_pylist()
        info = client.get_flight_info(cmd(proto.CommandGetTables(include_schema=True)), options)
        with pytest.raises(pa.ArrowException, match="has no recorded schema") as err:
            client.do_get(info.endpoints[0].ticket, options).read_all()
        no_leak(str(err.value))
        assert "[InvalidTableState, code 19]" in str(err.value)
        code, details = raw_status(running.server, info.endpoints[0].ticket)
        assert code == "FAILED_PRECONDITION" and "p.w.ns.sub.u" not in details and "w.ns.sub.u" in details
        assert "lake table repair --schema" in details
        import adbc_driver_manager

        with running.adbc() as conn, pytest.raises(adbc_driver_manager.Error) as adbc_err:
            conn.adbc_get_objects(depth="all").read_all()
        assert "has no recorded schema" in str(adbc_err.value)
    finally:
        store.compare_and_swap(key, changed.revision, item.value)
        running.server.snapshots.refresh()
