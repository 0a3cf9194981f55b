"""A kept plan's tickets (issue 14): the claims every ticket of a plan shares are checked once
(``Tickets.statement_claims``) and each ticket is then sealed whole with its own id and times
(``Tickets.seal_claims``), opening to exactly what one-step sealing (``seal_statement``) seals.
Prepared-statement handles: their owner, expiry and purpose.
"""

from __future__ import annotations

import secrets
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lake_platform.auth.tokens import Identity, Sealer
from lake_platform.errors import InvalidInput, PermissionDenied, Unauthenticated
from lake_platform.flight.tickets import TicketLimits, Tickets
from lake_platform.query.part import Part
from lake_platform.query.snapshot import TableRef

KEY = secrets.token_bytes(32)
ALICE = Identity("alice", "user", "p", "reader")
NOW = TableRef("p.w.ns.t", "lance", "/x/t-1.lance", "inc1", 3, "_versions/3.manifest", 10, "e1", 5)
V1 = TableRef("p.w.ns.t", "lance", "/x/t-1.lance", "inc1", 1, "_versions/1.manifest", at="v1")
OTHER = TableRef("p.w.ns.u", "lance", "/x/u-1.lance", "inc2", 7, "_versions/7.manifest")
URLSAFE = set("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_")


class Clock:
    """A settable clock, so both ways of sealing seal at the same millisecond."""

    def __init__(self) -> None:
        self.t = 1_764_556_800.123

    def __call__(self) -> float:
        return self.t


def tickets(clock: Clock | None = None, **limits: Any) -> Tickets:
    sealer = Sealer([("k0", secrets.token_bytes(32)), ("k1", KEY)], clock=clock or Clock())
    return Tickets(sealer, TicketLimits(**limits), lifetime=600, prepared_lifetime=600)


@settings(max_examples=150, deadline=None)
@given(sql=st.text(min_size=1, max_size=200), ticket_id=st.text(min_size=1, max_size=64))
def test_kept_claims_open_as_one_step_sealing_seals_them(sql: str, ticket_id: str) -> None:
    """Any SQL (quotes, backslashes, control characters, non-ASCII) and any ticket id: a kept
    plan's ticket opens to the claims one-step sealing seals."""
    clock = Clock()
    t = tickets(clock)
    claims = t.statement_claims(ALICE, sql, None, (NOW, V1))
    kept, expires, same_id = t.seal_claims(claims, ticket_id)
    slow, slow_expires = t.seal_statement(ALICE, sql, None, (NOW, V1), ticket_id=ticket_id)
    opened = t.open_statement(kept, ALICE)
    assert opened == t.open_statement(slow, ALICE) and expires == slow_expires
    assert opened.ticket_id == same_id == ticket_id and opened.sql == sql and opened.snapshots == (NOW, V1)
    assert expires == opened.expires_at_ms / 1000 == round(clock.t * 1000) / 1000 + 600


def test_parameters_and_parts_are_kept_too() -> None:
    t = tickets()
    params = pa.record_batch({"x": pa.array([1, 2], pa.int64()), "s": pa.array(['"é\\', None])})
    part = Part("p.w.ns.u", ((0, 3), (7, 7)))
    claims = t.statement_claims(ALICE, "SELECT ?", params, (OTHER, NOW), part=part)
    kept, _, _ = t.seal_claims(claims, "q1")
    slow, _ = t.seal_statement(ALICE, "SELECT ?", params, (OTHER, NOW), part=part, ticket_id="q1")
    opened = t.open_statement(kept, ALICE)
    assert opened == t.open_statement(slow, ALICE)
    assert opened.part == part and opened.params is not None and opened.params.equals(params)


def test_each_ticket_gets_a_new_id_and_times() -> None:
    clock = Clock()
    t = tickets(clock)
    claims = t.statement_claims(ALICE, "SELECT 1", None, (NOW,))
    first = t.open_statement(t.seal_claims(claims)[0], ALICE)
    clock.t += 2.5
    blob, _, second_id = t.seal_claims(claims)
    second = t.open_statement(blob, ALICE)
    assert first.ticket_id != second.ticket_id == second_id
    assert all(len(x.ticket_id) == 16 and set(x.ticket_id) <= URLSAFE for x in (first, second))
    assert second.issued_at_ms - first.issued_at_ms == 2500
    assert second.expires_at_ms == second.issued_at_ms + 600_000


def test_kept_claims_are_checked_once_as_sealing_checked_them() -> None:
    """The checks one-step sealing makes (bounds, canonical pins, the part's table) refuse the
    claims before any is kept."""
    t = tickets(max_tables=1, max_sql_bytes=16)
    with pytest.raises(InvalidInput, match="LAKE_FLIGHT_MAX_TICKET_TABLES"):
        t.statement_claims(ALICE, "SELECT 1", None, (NOW, OTHER))
    with pytest.raises(InvalidInput, match="LAKE_FLIGHT_MAX_SQL_BYTES"):
        t.statement_claims(ALICE, "SELECT 1 + 1 + 1 + 1", None, (NOW,))
    with pytest.raises(InvalidInput, match="a part must be of a table the query reads"):
        t.statement_claims(ALICE, "SELECT 1", None, (NOW,), part=Part("p.w.ns.u", ((0, 0),)))
    with pytest.raises(InvalidInput, match="invalid table snapshots"):  # another project's table
        t.statement_claims(Identity("bob", "user", "q", "reader"), "SELECT 1", None, (NOW,))


def test_kept_claims_carry_their_own_identity_only() -> None:
    t = tickets()
    blob, _, _ = t.seal_claims(t.statement_claims(ALICE, "SELECT 1", None, (NOW,)))
    with pytest.raises(PermissionDenied):
        t.open_statement(blob, Identity("alice", "user", "p", "admin"))


def test_the_sealer_sets_the_times_itself() -> None:
    sealer = Sealer([("k1", KEY)])
    for claims in ({"sql": "x", "exp": 1}, {"iat": 1}):
        with pytest.raises(ValueError, match="may not set"):
            sealer.seal("ticket", claims, 60)


def test_oversized_kept_claims_are_refused_when_sealed() -> None:
    sealer = Sealer([("k1", KEY)], max_bytes=512)
    t = Tickets(sealer, TicketLimits(), lifetime=60, prepared_lifetime=60)
    claims = t.statement_claims(ALICE, "SELECT '" + "x" * 600 + "'", None, (NOW,))
    with pytest.raises(InvalidInput, match="LAKE_FLIGHT_MAX_TICKET_BYTES"):
        t.seal_claims(claims)


def test_a_prepared_handle_opens_for_its_owner_until_it_expires() -> None:
    clock = Clock()
    t = tickets(clock)
    params = pa.record_batch({"k": pa.array([7], pa.int64())})
    sql = "SELECT * FROM w.ns.t WHERE k = ?"
    handle = t.seal_prepared(ALICE, sql, params)
    got_sql, bound = t.open_prepared(handle, ALICE)
    assert got_sql == sql and bound is not None and bound.equals(params)
    with pytest.raises(PermissionDenied):
        t.open_prepared(handle, Identity("bob", "user", "p", "reader"))
    altered = bytearray(handle)
    altered[-3] ^= 1
    with pytest.raises(Unauthenticated):
        t.open_prepared(bytes(altered), ALICE)
    ticket, _ = t.seal_statement(ALICE, sql, params, (NOW,))
    with pytest.raises(Unauthenticated, match="invalid prepared statement handle"):
        t.open_prepared(ticket, ALICE)  # a ticket is no handle ...
    with pytest.raises(Unauthenticated, match="invalid ticket"):
        t.open_statement(handle, ALICE)  # ... nor a handle a ticket
    clock.t += 601
    with pytest.raises(InvalidInput, match="expired; prepare it again"):
        t.open_prepared(handle, ALICE)
