"""The endpoints of a statement's FlightInfo: one sealed ticket per part of the pinned snapshot,
each named at the replicas that may serve it.

Only a call that asks for several endpoints (``many``: the call header ``x-lake-endpoints:
many``, or the server setting ``LAKE_FLIGHT_ENDPOINTS=many``) has a result split: clients that
read only the first endpoint (flightsql-dbapi, older JDBC drivers) would otherwise get part of
the answer without an error. Then a query ``query.split`` can split (a scan, filter or
projection of one table, big enough) gets one endpoint per part: every ticket pins the same
snapshots, carries the same claims and query id (one CancelFlightInfo stops them all), and adds
the fragments and row offsets its part reads. ADBC reads the endpoints in parallel; any replica
can serve any of them. Anything else gets one endpoint with no location (the client reuses its
connection): a point query pays nothing for splitting but a look at the table's size.

Locations: with ``LAKE_FLIGHT_ADVERTISE`` (and ``LAKE_FLIGHT_PEERS``) set, endpoint ``i`` of a
split result lists every replica, starting at a different one per endpoint (round robin from
a random offset per query), so parts are read from several servers at once and a client that
tries locations in order (ADBC does) falls over to the next replica. With the data plane on
(``dataplane``; ``use_data_plane``) the locations are the replicas' data planes instead, and an
unsplit result names them too, this replica's first.
"""

from __future__ import annotations

import secrets
import threading
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NamedTuple

import pyarrow as pa
import pyarrow.flight as fl

from lake_platform.auth.tokens import Identity
from lake_platform.flight import framing, proto
from lake_platform.flight.tickets import StatementClaims, Tickets, new_ticket_id
from lake_platform.query.planner import PlannedQuery
from lake_platform.query.snapshot import TableRef
from lake_platform.query.split import Sizing, ordered, split


class Answer(NamedTuple):
    """What GetFlightInfo answers a statement with."""

    endpoints: list[fl.FlightEndpoint]
    ordered: bool
    schema: pa.Schema
    ticket_id: str | None = None  # the one endpoint's ticket id (None: a split result)

    def info(self, descriptor: fl.FlightDescriptor) -> fl.FlightInfo:
        return fl.FlightInfo(self.schema, descriptor, self.endpoints, -1, -1, self.ordered)


@dataclass(frozen=True)
class _Kept:
    """What every answer of one plan to one principal shares, worked out on its first call and
    kept for the plan (``Endpoints``, while the plan lives): a kept plan (``query.plans``) is answered
    again and again, and its SQL and pinned snapshots never change (a new version is a new
    plan). Reused only for exactly the principal, ``tickets``, sizing and refs it was made
    for, and never made with bound parameters (a plan with them is not kept either)."""

    tickets: Tickets
    sizing: Sizing
    identity: Identity
    refs: tuple[TableRef, ...]
    claims: tuple[StatementClaims, ...]  # one per part
    split: bool
    ordered: bool
    schema: pa.Schema
    many: bool  # made for a call that asked for several endpoints


class Endpoints:
    """Builds a statement's endpoints (thread-safe: settings, and what each plan's answers
    share)."""

    def __init__(
        self,
        tickets: Tickets,
        sizes: Callable[[TableRef], Any],
        sizing: Sizing,
        replicas: list[str],
    ) -> None:
        """``sizes``: a ref's fragment sizes (``split.FragmentSizes``); ``replicas``: the URIs
        to spread split results over (empty: no locations)."""
        self._tickets = tickets
        self._sizes = sizes
        self.sizing = sizing
        self.replicas = replicas
        #: Whether unsplit results name locations too (the data plane: ``use_data_plane``).
        self.every_result = False
        #: What each plan's answers share, forgotten with the plan (a kept plan lives on).
        self._kept_for: weakref.WeakKeyDictionary[PlannedQuery, _Kept] = weakref.WeakKeyDictionary()
        self._lock = threading.Lock()

    def use_data_plane(self, uris: list[str]) -> None:
        """Name the data planes ``uris`` (this replica's first) on every statement endpoint:
        split results spread over them, an unsplit one names this replica's first (where its
        plan is kept)."""
        self.replicas = uris
        self.every_result = True

    @property
    def unsplit_located(self) -> bool:
        """Whether an unsplit result's endpoint names locations (the data planes): its DoGet
        then comes over the data plane, not the connection that planned it."""
        return self.every_result and bool(self.replicas)

    def answer(
        self, identity: Identity, planned: PlannedQuery, params: pa.RecordBatch | None, many: bool = False
    ) -> Answer:
        """The endpoints of ``planned``: several only when ``many`` (the call asked) and the
        query splits."""
        with self._lock:
            kept = self._kept_for.get(planned)
        if (
            kept is None
            or params is not None
            or kept.refs is not planned.refs
            or kept.sizing is not self.sizing
            or kept.tickets is not self._tickets
            or kept.many is not many
            or (kept.identity is not identity and kept.identity != identity)
        ):
            kept = self._kept(identity, planned, params, many)
        if not kept.split:
            handle, expires, ticket_id = self._tickets.seal_claims(kept.claims[0])
            where = self.locations(0) if self.unsplit_located else ()
            return Answer([_endpoint(handle, expires, where)], kept.ordered, kept.schema, ticket_id)
        query_id = new_ticket_id()
        offset = secrets.randbelow(len(self.replicas)) if self.replicas else 0
        endpoints = []
        for i, part in enumerate(kept.claims):
            handle, expires, _ = self._tickets.seal_claims(part, query_id)
            endpoints.append(_endpoint(handle, expires, self.locations(offset + i)))
        return Answer(endpoints, False, kept.schema)

    def unsplit(self, planned: PlannedQuery, many: bool = False) -> bool:
        """Whether ``planned`` is answered with one endpoint (one ticket)."""
        return self._parts(planned, many) is None

    def _parts(self, planned: PlannedQuery, many: bool) -> Any:
        """``split``'s parts of ``planned`` (None: unsplit, and always unless ``many``)."""
        return split(planned, self._sizes, self.sizing) if many else None

    def _kept(
        self, identity: Identity, planned: PlannedQuery, params: pa.RecordBatch | None, many: bool
    ) -> _Kept:
        """Split the plan (if ``many``), check its tickets' claims (InvalidInput if they break a
        rule), and keep all that with the plan unless it has bound parameters."""
        parts = self._parts(planned, many)
        sql, refs = planned.sql, planned.refs
        if parts is None:
            claims = (self._tickets.statement_claims(identity, sql, params, refs),)
        else:
            claims = tuple(
                self._tickets.statement_claims(identity, sql, params, refs, part=part) for part in parts
            )
        kept = _Kept(
            tickets=self._tickets,
            sizing=self.sizing,
            identity=identity,
            refs=refs,
            claims=claims,
            split=parts is not None,
            ordered=parts is None and ordered(planned),
            schema=planned.schema,
            many=many,
        )
        if params is None:
            with self._lock:
                self._kept_for[planned] = kept
        return kept

    def locations(self, start: int) -> list[str]:
        """Every replica, starting at ``start`` (modulo their count)."""
        n = len(self.replicas)
        return [self.replicas[(start + k) % n] for k in range(n)]


def _endpoint(handle: bytes, expires: float, locations: Any) -> fl.FlightEndpoint:
    ticket = proto.pack(proto.TicketStatementQuery(statement_handle=handle))
    return framing.endpoint(ticket, int(expires), locations)


__all__ = ["Answer", "Endpoints"]
