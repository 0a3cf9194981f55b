"""Statement tickets and prepared-statement handles: what their sealed claims hold, and the
checks they pass before sealing and again after opening.

A statement ticket's claims (inside the sealed token of ``tokens``, which adds ``iat`` and
``exp``)::

    sub, knd, prj, rol   the identity it was issued to (DoGet requires the caller to be exactly it)
    uid                  (a user with a record id only) the user record it was issued under
    sql                  the query text as planned
    prm                  the bound parameter row (base64 Arrow IPC stream) or null
    snp                  the table snapshots planned against, sorted by written name, unique:
                         {n: project.warehouse.ns.table, e: engine, l: location, i: incarnation,
                          v: version, m: manifest path, s: manifest size, t: e-tag, c: committed at}
                         and, for a time-travel read (``"t@v12"``, ``"t@tag:eod"``), a: the
                         selector as written (the written name is n@a; v is what it resolved to)
    id                   a random ticket id (for CancelFlightInfo only; no server keeps tickets);
                         the endpoints of one query share it, so one cancel stops them all
    prt                  (optional) the part of one pinned table this endpoint reads:
                         {n: a name in snp, r: [[first, last], ...] fragment ids} (query.part)

A kept plan checks the claims its tickets share once (:meth:`Tickets.statement_claims`);
each ticket (:meth:`Tickets.seal_claims`) is then sealed whole with its id and times.

A prepared-statement handle's claims are the identity (with ``uid`` as above), ``sql`` and
``prm``. Both are canonical (exactly these keys, exact types; snapshots in written-name order
with no duplicate written name, and no incarnation twice among the current-version pins) and
bounded (SQL bytes, snapshot count, parameter bytes; the token's size is bounded by the sealer).
A claim set that breaks a rule is refused after opening too, e.g. one sealed by a replica
configured with larger limits.
"""

from __future__ import annotations

import base64
import binascii
import secrets
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import pairwise
from typing import Any, NamedTuple

import pyarrow as pa

from lake_platform.auth.tokens import ENVELOPE_CLAIMS, Expired, Identity, Sealer, check_owner, claim_names
from lake_platform.errors import InvalidInput, Unauthenticated
from lake_platform.query.part import Part
from lake_platform.query.snapshot import TableRef

_IDENTITY = ("sub", "knd", "prj", "rol")
_STATEMENT_KEYS = frozenset({*_IDENTITY, "sql", "prm", "snp", "id"}) | ENVELOPE_CLAIMS
_PART_KEYS = _STATEMENT_KEYS | {"prt"}
_PREPARED_KEYS = frozenset({*_IDENTITY, "sql", "prm"}) | ENVELOPE_CLAIMS


def new_ticket_id() -> str:
    """A new ticket (query) id: 16 random URL-safe characters. Unique, not secret: an id is
    only ever taken from an opened ticket (CancelFlightInfo and early starts go by the ticket)."""
    return secrets.token_urlsafe(12)


@dataclass(frozen=True)
class TicketLimits:
    max_sql_bytes: int = 256 * 1024
    max_tables: int = 64
    max_param_bytes: int = 1 << 20


@dataclass(frozen=True)
class StatementTicket:
    identity: Identity
    sql: str
    params: pa.RecordBatch | None
    snapshots: tuple[TableRef, ...]
    ticket_id: str
    issued_at_ms: int
    expires_at_ms: int
    part: Part | None = None  # the fragments this endpoint reads (None: the whole snapshot)


class StatementClaims(NamedTuple):
    """What every ticket of one statement (or of one part of it) carries, checked
    (:meth:`Tickets.statement_claims`); :meth:`Tickets.seal_claims` seals tickets of it."""

    claims: dict[str, Any]  # a ticket's claims but its id (and the times the sealer adds)


class Tickets:
    """Seals and opens statement tickets and prepared-statement handles."""

    def __init__(
        self, sealer: Sealer, limits: TicketLimits, *, lifetime: float, prepared_lifetime: float
    ) -> None:
        self.sealer = sealer
        self.limits = limits
        self.lifetime = lifetime
        self.prepared_lifetime = prepared_lifetime

    # -- statement tickets ------------------------------------------------------------------

    def seal_statement(
        self,
        identity: Identity,
        sql: str,
        params: pa.RecordBatch | None,
        snapshots: Sequence[TableRef],
        *,
        part: Part | None = None,
        ticket_id: str | None = None,
    ) -> tuple[bytes, float]:
        """The ticket's bytes (the handle inside TicketStatementQuery) and its expiry (seconds).

        ``part``: the endpoint reads only these fragments of one pinned table; ``ticket_id``:
        the query's id when it has several endpoints (default: a new one)."""
        claims = self.statement_claims(identity, sql, params, snapshots, part=part)
        blob, expires, _ = self.seal_claims(claims, ticket_id)
        return blob, expires

    def statement_claims(
        self,
        identity: Identity,
        sql: str,
        params: pa.RecordBatch | None,
        snapshots: Sequence[TableRef],
        *,
        part: Part | None = None,
    ) -> StatementClaims:
        """Check the claims every ticket of this statement (or part) carries: InvalidInput if
        they break a rule (see the module's docstring)."""
        ordered = tuple(sorted(snapshots, key=lambda r: r.written))
        claims: dict[str, Any] = {
            **identity.claims(),
            "sql": sql,
            "prm": params_to_text(params),
            "snp": [r.to_json() for r in ordered],
        }
        self._check_bounds(sql, claims["prm"], "ticket", True)
        self._check_snapshots(ordered, identity.project, True)
        if part is not None:
            if part.table not in {r.name for r in ordered}:
                raise InvalidInput("a part must be of a table the query reads")
            claims["prt"] = part.to_json()
        return StatementClaims(claims)

    def seal_claims(self, claims: StatementClaims, ticket_id: str | None = None) -> tuple[bytes, float, str]:
        """A ticket of ``claims`` with id ``ticket_id`` (default: a new one), its expiry
        (seconds) and its id."""
        ticket_id = ticket_id or new_ticket_id()
        blob, exp = self.sealer.seal_until("ticket", {**claims.claims, "id": ticket_id}, self.lifetime)
        return blob, exp / 1000, ticket_id

    def open_statement(self, blob: bytes, caller: Identity | None) -> StatementTicket:
        """Open, validate and bound a ticket; ``caller`` must be exactly its identity (None:
        skip that check, for tools)."""
        try:
            claims = self.sealer.open("ticket", blob, what="ticket")
        except Expired:
            raise InvalidInput(_TICKET_EXPIRED) from None
        keys = claim_names(claims)
        if keys != _STATEMENT_KEYS and keys != _PART_KEYS:
            raise Unauthenticated("invalid ticket")
        if caller is not None:
            check_owner(claims, caller, "ticket")
        self._check_common(claims, "ticket", False)
        if (
            not isinstance(claims["id"], str)
            or not 1 <= len(claims["id"]) <= 64
            or not isinstance(claims["snp"], list)
        ):
            raise Unauthenticated("invalid ticket")
        if len(claims["snp"]) > self.limits.max_tables:  # before parsing them
            self._check_snapshots((), claims["prj"], False, count=len(claims["snp"]))
        try:
            snapshots = tuple(TableRef.from_json(r) for r in claims["snp"])
        except ValueError:
            raise Unauthenticated("invalid ticket") from None
        self._check_snapshots(snapshots, claims["prj"], False)
        part = None
        if "prt" in claims:
            try:
                part = Part.from_json(claims["prt"])
            except ValueError:
                raise Unauthenticated("invalid ticket") from None
            if part.table not in {r.name for r in snapshots}:
                raise Unauthenticated("invalid ticket")
        return StatementTicket(
            identity=Identity.from_claims(claims),
            sql=claims["sql"],
            params=params_from_text(claims["prm"], self.limits.max_param_bytes),
            snapshots=snapshots,
            ticket_id=claims["id"],
            issued_at_ms=claims["iat"],
            expires_at_ms=claims["exp"],
            part=part,
        )

    def _check_snapshots(
        self, snapshots: Sequence[TableRef], project: str, sealing: bool, *, count: int | None = None
    ) -> None:
        """At most ``max_tables``, in written-name order, no written name twice, no incarnation
        twice among the current-version pins (time-travel pins read other versions of a table a
        query may also read as it is now), all in ``project``."""
        count = len(snapshots) if count is None else count
        if count > self.limits.max_tables:
            raise InvalidInput(
                _limit(
                    "the query reads" if sealing else "the ticket pins",
                    f"{count} tables",
                    "LAKE_FLIGHT_MAX_TICKET_TABLES",
                    self.limits.max_tables,
                    sealing,
                )
            )
        if count <= 1:
            if count and not snapshots[0].name.startswith(project + "."):
                raise (
                    Unauthenticated("invalid ticket")
                    if not sealing
                    else InvalidInput("invalid table snapshots")
                )
            return
        names = [r.written for r in snapshots]
        current = [r.incarnation for r in snapshots if r.at is None]
        if (
            any(a >= b for a, b in pairwise(names))
            or len(set(current)) != len(current)
            or any(not n.startswith(project + ".") for n in names)
        ):
            # Not canonical (unsorted, duplicated) or another project's table.
            raise (
                Unauthenticated("invalid ticket") if not sealing else InvalidInput("invalid table snapshots")
            )

    # -- prepared-statement handles ------------------------------------------------------

    def seal_prepared(self, identity: Identity, sql: str, params: pa.RecordBatch | None) -> bytes:
        """A handle of ``sql`` and ``params`` for ``identity``."""
        claims = {**identity.claims(), "sql": sql, "prm": params_to_text(params)}
        self._check_common(claims, "prepared statement", True)
        return self.sealer.seal("prepared", claims, self.prepared_lifetime)

    def open_prepared(self, blob: bytes, caller: Identity) -> tuple[str, pa.RecordBatch | None]:
        """The SQL and bound parameters of a handle sealed for ``caller``."""
        what = "prepared statement handle"
        try:
            claims = self.sealer.open("prepared", blob, what=what)
        except Expired:
            raise InvalidInput(_PREPARED_EXPIRED) from None
        if claim_names(claims) != _PREPARED_KEYS:
            raise Unauthenticated(f"invalid {what}")
        check_owner(claims, caller, "prepared statement")
        self._check_common(claims, "prepared statement", False)
        return claims["sql"], params_from_text(claims["prm"], self.limits.max_param_bytes)

    # -- shared ---------------------------------------------------------------------------

    def _check_common(self, claims: dict[str, Any], what: str, sealing: bool) -> None:
        if any(not isinstance(claims.get(k), str) or not claims[k] for k in _IDENTITY):
            raise Unauthenticated(f"invalid {what}")
        sql, prm = claims.get("sql"), claims.get("prm")
        if not isinstance(sql, str) or (prm is not None and not isinstance(prm, str)):
            raise Unauthenticated(f"invalid {what}")
        self._check_bounds(sql, prm, what, sealing)

    def _check_bounds(self, sql: str, prm: str | None, what: str, sealing: bool) -> None:
        size = len(sql.encode("utf-8", "surrogatepass"))
        if size > self.limits.max_sql_bytes:
            raise InvalidInput(
                _limit(
                    f"the {what}'s SQL is" if not sealing else "the query is",
                    f"{size} bytes",
                    "LAKE_FLIGHT_MAX_SQL_BYTES",
                    self.limits.max_sql_bytes,
                    sealing,
                )
            )
        if prm is not None:
            size = len(prm) * 3 // 4
            if size > self.limits.max_param_bytes:
                raise InvalidInput(
                    _limit(
                        "the bound parameters are",
                        f"{size} bytes",
                        "LAKE_FLIGHT_MAX_PARAM_BYTES",
                        self.limits.max_param_bytes,
                        sealing,
                    )
                )


_PREPARED_EXPIRED = "the prepared statement has expired; prepare it again"
_TICKET_EXPIRED = "the ticket has expired; run the query again"


def _limit(subject: str, amount: str, setting: str, limit: int, sealing: bool) -> str:
    where = "" if sealing else " (it was issued by a server with larger limits; plan the query here again)"
    return f"{subject} {amount}, above this server's {setting}={limit}{where}"


def params_to_text(params: pa.RecordBatch | None) -> str | None:
    if params is None:
        return None
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, params.schema) as w:
        w.write_batch(params)
    return base64.b64encode(sink.getvalue().to_pybytes()).decode()


def params_from_text(text: Any, max_bytes: int | None = None) -> pa.RecordBatch | None:
    if text is None:
        return None
    if not isinstance(text, str):
        raise InvalidInput("malformed bound parameters")
    try:
        raw = base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        raise InvalidInput("malformed bound parameters") from None
    if max_bytes is not None and len(raw) > max_bytes:
        raise InvalidInput(
            f"the bound parameters are {len(raw)} bytes, above LAKE_FLIGHT_MAX_PARAM_BYTES={max_bytes}"
        )
    try:
        table = pa.ipc.open_stream(pa.py_buffer(raw)).read_all()
    except Exception:  # noqa: BLE001
        raise InvalidInput("malformed bound parameters") from None
    return table.combine_chunks().to_batches()[0] if table.num_rows else None
