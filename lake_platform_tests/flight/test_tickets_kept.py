"""A kept plan's tickets (issue 14, pinning overhead): the claims that do not change between
calls are checked and sealed once (``Tickets.statement_claims``: the envelope's encrypted part)
and each ticket writes only its head, its id and times, and a MAC (``Sealer.seal_encoded``).
A kept ticket must open to exactly the claims one-step sealing seals; the hand-made protobuf
around a ticket must be what protobuf and pyarrow write.
"""

from __future__ import annotations

import json
import secrets
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lake_platform.auth.tokens import Identity, Sealer
from lake_platform.errors import InvalidInput, PermissionDenied
from lake_platform.flight.tickets import TicketLimits, Tickets, params_to_text
from lake_platform.query.part import Part
from lake_platform.query.snapshot import TableRef

KEY = secrets.token_bytes(32)
ALICE = Identity("alice", "user", "p", "reader")
NOW = TableRef("p.w.ns.t", "lance", "/x/t-1.lance", "inc1", 3, "_versions/3.manifest", 10, "e1", 5)
V1 = TableRef("p.w.ns.t", "lance", "/x/t-1.lance", "inc1", 1, "_versions/1.manifest", at="v1")
OTHER = TableRef("p.w.ns.u", "lance", "/x/u-1.lance", "inc2", 7, "_versions/7.manifest")


class Clock:
    """A settable clock, so the slow and the fast path seal at the same millisecond."""

    def __init__(self) -> None:
        self.t = 1_764_556_800.123

    def __call__(self) -> float:
        return self.t


def tickets(clock: Clock | None = None, **limits: Any) -> Tickets:
    sealer = Sealer([("k0", secrets.token_bytes(32)), ("k1", KEY)], clock=clock or Clock())
    return Tickets(sealer, TicketLimits(**limits), lifetime=600, prepared_lifetime=600)


def parts(t: Tickets, blob: bytes) -> tuple[bytes, bytes, bytes]:
    """A ticket's sealed part (its length and all), its kept claims decrypted (the test's own
    AES-GCM, not the opener) and its head."""
    kid = t.sealer.sealing_kid
    header = blob[: 2 + len(kid)]
    at = len(header)
    sealed = blob[at + 4 : at + 4 + int.from_bytes(blob[at : at + 4], "big")]
    aad = b"lake-flight/ticket\0" + header
    kept = t.sealer._keys[kid]["ticket"].decrypt(sealed[:12], sealed[12:], aad)
    return blob[: at + 4 + len(sealed)], kept, blob[at + 4 + len(sealed) : -16]


def one_step(
    t: Tickets, identity: Identity, sql: str, params: Any, refs: Any, ticket_id: str, **part: Any
) -> bytes:
    """What sealing wrote before claims were kept: one dict, canonical JSON, one seal."""
    claims = {
        **identity.claims(),
        "sql": sql,
        "prm": params_to_text(params),
        "snp": [r.to_json() for r in sorted(refs, key=lambda r: r.written)],
        "id": ticket_id,
    }
    if part:
        claims["prt"] = part["part"].to_json()
    return t.sealer.seal("ticket", claims, t.lifetime)


@settings(max_examples=150, deadline=None)
@given(sql=st.text(min_size=1, max_size=200), ticket_id=st.text(min_size=1, max_size=64))
def test_kept_claims_open_as_one_step_sealing_seals_them(sql: str, ticket_id: str) -> None:
    """Any SQL (quotes, backslashes, control characters, non-ASCII) and any ticket id: a kept
    plan's ticket opens to the claims one-step sealing seals; its head holds the id and times
    only, and every ticket of the claims shares their one sealed part."""
    clock = Clock()
    t = tickets(clock)
    claims = t.statement_claims(ALICE, sql, None, (NOW, V1))
    fast, expires = t.seal_claims(claims, ticket_id)
    again, _ = t.seal_claims(claims)
    slow = one_step(t, ALICE, sql, None, (NOW, V1), ticket_id)
    opened = t.open_statement(fast, ALICE)
    assert opened == t.open_statement(slow, ALICE)
    assert opened.ticket_id == ticket_id and opened.sql == sql and opened.snapshots == (NOW, V1)
    assert expires == opened.expires_at_ms / 1000 == round(clock.t * 1000) / 1000 + 600
    sealed, kept, head = parts(t, fast)
    assert json.loads(head) == {"exp": opened.expires_at_ms, "iat": opened.issued_at_ms, "id": ticket_id}
    assert "id" not in json.loads(kept) and json.loads(kept)["sql"] == sql
    assert parts(t, again)[0] == sealed and parts(t, slow)[0] != sealed  # sealed once per claims


def test_parameters_and_parts_are_kept_too() -> None:
    t = tickets()
    params = pa.record_batch({"x": pa.array([1, 2], pa.int64()), "s": pa.array(['"é\\', None])})
    part = Part("p.w.ns.u", ((0, 3), (7, 7)))
    claims = t.statement_claims(ALICE, "SELECT ?", params, (OTHER, NOW), part=part)
    fast, _ = t.seal_claims(claims, "q1")
    slow = one_step(t, ALICE, "SELECT ?", params, (OTHER, NOW), "q1", part=part)
    opened = t.open_statement(fast, ALICE)
    assert opened == t.open_statement(slow, ALICE)
    assert opened.part == part and opened.params is not None and opened.params.equals(params)


def test_each_ticket_gets_a_new_id_and_times() -> None:
    clock = Clock()
    t = tickets(clock)
    claims = t.statement_claims(ALICE, "SELECT 1", None, (NOW,))
    first = t.open_statement(t.seal_claims(claims)[0], ALICE)
    clock.t += 2.5
    second = t.open_statement(t.seal_claims(claims)[0], ALICE)
    assert first.ticket_id != second.ticket_id
    assert all(len(x.ticket_id) == 16 and int(x.ticket_id, 16) >= 0 for x in (first, second))
    assert second.issued_at_ms - first.issued_at_ms == 2500
    assert second.expires_at_ms == second.issued_at_ms + 600_000


def test_kept_claims_are_checked_once_as_sealing_checked_them() -> None:
    """The checks one-step sealing made (bounds, canonical pins, the part's table) refuse the
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
    blob, _ = t.seal_claims(t.statement_claims(ALICE, "SELECT 1", None, (NOW,)))
    with pytest.raises(PermissionDenied):
        t.open_statement(blob, Identity("alice", "user", "p", "admin"))


def test_the_sealer_refuses_what_it_could_not_splice() -> None:
    sealer = Sealer([("k1", KEY)])
    with pytest.raises(ValueError, match="sort after iat"):
        sealer.encode("ticket", {"sql": "x"}, heads=("exp",))
    with pytest.raises(ValueError, match="may not set"):
        sealer.encode("ticket", {"sql": "x", "id": "y"}, heads=("id",))
    with pytest.raises(ValueError, match="may not set"):
        sealer.encode("ticket", {"sql": "x", "exp": 1}, heads=("id",))
    with pytest.raises(ValueError, match="lowercase"):
        sealer.encode("ticket", {"sql": "x"}, heads=('i"d',))
    encoded = sealer.encode("ticket", {"sql": "x"}, heads=("id",))
    with pytest.raises(ValueError):
        sealer.seal_encoded(encoded, ("a", "b"), 60)  # not one value per head
    with pytest.raises(ValueError):
        sealer.seal_encoded(encoded, (7,), 60)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="another key"):
        Sealer([("k2", KEY)]).seal_encoded(encoded, ("a",), 60)
    blob, _ = sealer.seal_encoded(encoded, (None,), 60)
    claims = sealer.open("ticket", blob)
    assert claims["sql"] == "x" and len(claims["id"]) == 16
    assert json.loads(json.dumps(claims)) == claims


def test_oversized_kept_claims_are_refused_when_sealed() -> None:
    sealer = Sealer([("k1", KEY)], max_bytes=512)
    t = Tickets(sealer, TicketLimits(), lifetime=60, prepared_lifetime=60)
    claims = t.statement_claims(ALICE, "SELECT '" + "x" * 600 + "'", None, (NOW,))
    with pytest.raises(InvalidInput, match="LAKE_FLIGHT_MAX_TICKET_BYTES"):
        t.seal_claims(claims)
    with pytest.raises(InvalidInput, match="LAKE_FLIGHT_MAX_TICKET_BYTES"):
        t.seal_new(claims)


def elsewhere_with(clock: Clock) -> Tickets:
    """Another replica: the same sealing key, nothing remembered."""
    return Tickets(Sealer([("k1", KEY)], clock=clock), TicketLimits(), lifetime=600, prepared_lifetime=600)


def counting_opens(monkeypatch: pytest.MonkeyPatch, *replicas: Tickets) -> list[bytes]:
    """The envelopes the replicas' sealers open from now on, in order."""
    opens: list[bytes] = []
    for t in replicas:

        def counted(purpose: str, blob: bytes, real: Any = t.sealer.open, **kwargs: Any) -> dict[str, Any]:
            opens.append(blob)
            return real(purpose, blob, **kwargs)

        monkeypatch.setattr(t.sealer, "open", counted)
    return opens


def test_a_prepared_handle_is_remembered(monkeypatch: pytest.MonkeyPatch) -> None:
    """A prepared query run again sends the same handle: the replica that sealed it remembers
    it from sealing, another opens it once; either then reads it from memory by its exact
    bytes, with its expiry and owner checked on every call. Remembered or opened, it gives the
    same; an altered byte opens afresh (and fails), and the cache stays within its bounds."""
    from lake_platform.errors import Unauthenticated
    from lake_platform.flight import tickets as tickets_module

    clock = Clock()
    here, elsewhere = tickets(clock), elsewhere_with(clock)
    params = pa.record_batch({"k": pa.array([7], pa.int64())})
    sql = "SELECT * FROM w.ns.t WHERE k = ?"
    handle = here.seal_prepared(ALICE, sql, params)
    opens = counting_opens(monkeypatch, here, elsewhere)
    for t, opened in ((here, []), (elsewhere, [handle])):
        opens.clear()
        for _ in range(3):
            got_sql, bound = t.open_prepared(handle, ALICE)
            assert got_sql == sql and bound is not None and bound.equals(params)
        assert opens == opened
    mine, theirs = here._prepared.peek(handle), elsewhere._prepared.peek(handle)
    assert mine is not None and theirs is not None and mine[0] == theirs[0]  # the claims, as opened
    with pytest.raises(PermissionDenied):
        here.open_prepared(handle, Identity("bob", "user", "p", "reader"))
    altered = bytearray(handle)
    altered[-1] ^= 1
    with pytest.raises(Unauthenticated):
        here.open_prepared(bytes(altered), ALICE)
    clock.t += 601
    with pytest.raises(InvalidInput, match="expired"):
        here.open_prepared(handle, ALICE)
    clock.t -= 601

    # Bounded: the least recently used handle goes first; one above the size bound is never kept.
    monkeypatch.setattr(tickets_module, "PREPARED_CACHE_SIZE", 2)
    small = tickets(clock)
    first, second = (small.seal_prepared(ALICE, f"SELECT {i}", None) for i in range(2))
    small.open_prepared(first, ALICE)  # now the more recent of the two
    third = small.seal_prepared(ALICE, "SELECT 3", None)
    assert len(small._prepared) == 2 and small._prepared.peek(second) is None
    assert small._prepared.peek(first) is not None and small._prepared.peek(third) is not None
    long = small.seal_prepared(ALICE, "SELECT '" + "x" * tickets_module.PREPARED_CACHE_MAX_BYTES + "'", None)
    small.open_prepared(long, ALICE)
    assert len(small._prepared) == 2 and small._prepared.peek(long) is None


def test_a_tickets_sealed_part_is_remembered(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every ticket of a kept plan carries the same sealed part (the claims, encrypted once).
    A replica that encoded it, or opened a ticket of it, opens the plan's next tickets from
    memory: the MAC, head, expiry and owner checked, and exactly what opening the bytes gives
    (on another replica: a Tickets with the same key)."""
    from lake_platform.errors import Unauthenticated
    from lake_platform.flight import tickets as tickets_module

    clock = Clock()
    t, elsewhere = tickets(clock), elsewhere_with(clock)
    opens = counting_opens(monkeypatch, t, elsewhere)
    part = Part("p.w.ns.t", ((0, 3),))
    for claims in (
        t.statement_claims(ALICE, "SELECT * FROM w.ns.t", None, (NOW, OTHER)),
        t.statement_claims(ALICE, "SELECT 1 FROM w.ns.t", None, (NOW,), part=part),
    ):
        opens.clear()
        blob, expires, ticket_id = t.seal_new(claims)
        remembered = t.open_statement(blob, ALICE)
        assert opens == [] and remembered == elsewhere.open_statement(blob, ALICE) and opens == [blob]
        assert remembered.expires_at_ms / 1000 == expires and remembered.ticket_id == ticket_id
        assert t.open_statement(blob, None) == remembered  # a retried DoGet: from memory again
        clock.t += 1
        later, _, later_id = t.seal_new(claims)
        assert elsewhere.open_statement(later, ALICE) == t.open_statement(later, ALICE)
        assert opens == [blob] and later_id != ticket_id  # the other replica remembered it too
        clock.t -= 1

    claims = t.statement_claims(ALICE, "SELECT 2", None, (NOW,))
    blob = t.seal_new(claims)[0]
    with pytest.raises(PermissionDenied):
        t.open_statement(blob, Identity("bob", "user", "p", "reader"))
    digit = blob.index(b'"id":"', len(t.sealer.sealed_part(blob) or b"")) + 6
    for altered in (
        blob[:digit] + (b"g" if blob[digit : digit + 1] != b"g" else b"h") + blob[digit + 1 :],  # the id
        blob[:-1] + bytes([blob[-1] ^ 1]),  # the MAC
    ):
        with pytest.raises(Unauthenticated, match="invalid ticket"):
            t.open_statement(altered, ALICE)
    clock.t += 601
    with pytest.raises(InvalidInput, match="the ticket has expired"):
        t.open_statement(blob, ALICE)
    clock.t -= 601
    opens.clear()
    params = pa.record_batch({"x": pa.array([1], pa.int64())})
    bound = t.seal_claims(t.statement_claims(ALICE, "SELECT ?", params, (NOW,)))[0]
    assert t.open_statement(bound, ALICE).params is not None and opens == [bound]  # not remembered
    assert t.open_statement(bound, ALICE).params is not None and opens == [bound, bound]

    monkeypatch.setattr(tickets_module, "SEALED_CACHE_SIZE", 2)
    small = tickets(clock)
    plans = [small.statement_claims(ALICE, f"SELECT {i}", None, (NOW,)) for i in range(3)]
    assert len(small._sealed) == 2 and small._sealed.peek(plans[0].encoded.prefix) is None
    small_opens = counting_opens(monkeypatch, small)
    evicted = small.seal_new(plans[0])[0]
    assert small.open_statement(evicted, ALICE).sql == "SELECT 0" and small_opens == [evicted]
    assert small._sealed.peek(plans[0].encoded.prefix) is not None  # remembered again at opening


def test_seal_new_writes_what_seal_encoded_writes() -> None:
    """The one-step hot path and the general splicing agree byte for byte."""
    clock = Clock()
    t = tickets(clock)
    claims = t.statement_claims(ALICE, 'SELECT "é" FROM w.ns.t', None, (NOW, V1))
    blob, expires, ticket_id = t.seal_new(claims)
    assert (blob, expires) == t.seal_claims(claims, ticket_id)
    with pytest.raises(ValueError, match="another key"):
        Sealer([("k2", KEY)], clock=clock).seal_new_id(claims.encoded, 60)
    with pytest.raises(ValueError, match="other per-envelope claims"):
        t.sealer.seal_new_id(t.sealer.encode("ticket", {"sql": "x"}, heads=("id", "run")), 60)
