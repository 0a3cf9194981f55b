"""The endpoints of a statement's FlightInfo: one sealed ticket per part of the pinned snapshot,
each named at the replicas that may serve it.

A query ``query.split`` can split (a scan, filter or projection of one table, big enough) gets
one endpoint per part: every ticket pins the same snapshots, carries the same claims and query
id (one CancelFlightInfo stops them all), and adds the fragment ranges its part reads. ADBC
reads the endpoints in parallel; any replica can serve any of them. Anything else gets one
endpoint with no location (the client reuses its connection), exactly as before: a point query
pays nothing for splitting but a look at the table's fragment count.

Locations: with ``LAKE_FLIGHT_ADVERTISE`` (and ``LAKE_FLIGHT_PEERS``) set, endpoint ``i`` of a
split result lists every replica, starting at a different one per endpoint (round robin from
a random offset per query), so parts are read from several servers at once and a client that
tries locations in order (ADBC does) falls over to the next replica. With the data plane on
(``dataplane``; ``use_data_plane``) the locations are the replicas' data planes instead, and an
unsplit result names them too, this replica's first.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.flight as fl

from lake_platform.flight import framing
from lake_platform.flight.tickets import StatementClaims, Tickets, new_ticket_id
from lake_platform.flight.tokens import Identity
from lake_platform.query.planner import PlannedQuery
from lake_platform.query.snapshot import TableRef
from lake_platform.query.split import Sizing, ordered, split


@dataclass(frozen=True)
class Answer:
    """What GetFlightInfo answers a statement with."""

    endpoints: list[bytes]  # FlightEndpoints, in wire form (``framing.endpoint_bytes``)
    ordered: bool
    schema: bytes  # the result's schema as an IPC message

    def info(self, descriptor: fl.FlightDescriptor) -> fl.FlightInfo:
        return framing.flight_info(self.schema, descriptor.serialize(), self.endpoints, self.ordered)


class Endpoints:
    """Builds a statement's endpoints (thread-safe: no state but settings)."""

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

    def use_data_plane(self, uris: list[str]) -> None:
        """Name the data planes ``uris`` (this replica's first) on every statement endpoint:
        split results spread over them, an unsplit one names this replica's first (where its
        plan is kept)."""
        self.replicas = uris
        self.every_result = True

    def answer(self, identity: Identity, planned: PlannedQuery, params: pa.RecordBatch | None) -> Answer:
        # Worked out once per plan: a plan kept for reuse (``query.plans``) answers the same.
        key = ("parts", self.sizing)
        if key not in planned.derived:
            planned.derived[key] = split(planned, self._sizes, self.sizing)
        parts = planned.derived[key]
        if "schema" not in planned.derived:
            planned.derived["schema"] = planned.schema.serialize().to_pybytes()
        claims = self._claims(identity, planned, params, parts)
        if parts is None:
            handle, expires = self._tickets.seal_claims(claims[0])
            if "ordered" not in planned.derived:
                planned.derived["ordered"] = ordered(planned)
            where = self.locations(0) if self.every_result and self.replicas else ()
            return Answer(
                [_endpoint(handle, expires, where)], planned.derived["ordered"], planned.derived["schema"]
            )
        query_id = new_ticket_id()
        offset = secrets.randbelow(len(self.replicas)) if self.replicas else 0
        endpoints = []
        for i, part in enumerate(claims):
            handle, expires = self._tickets.seal_claims(part, query_id)
            endpoints.append(_endpoint(handle, expires, self.locations(offset + i)))
        return Answer(endpoints, False, planned.derived["schema"])

    def _claims(
        self, identity: Identity, planned: PlannedQuery, params: pa.RecordBatch | None, parts: Any
    ) -> tuple[StatementClaims, ...]:
        """The checked, encoded claims of the statement's tickets (one per part), kept with the
        plan for the next call of the same principal: a kept plan (``query.plans``) is answered
        again and again, and its SQL and pinned snapshots never change (a new version is a new
        plan). Kept only for exactly this principal, these ``tickets`` and these refs, and never
        with bound parameters (a plan with them is not kept either)."""
        key = ("tickets", self.sizing)
        kept = planned.derived.get(key)
        if (
            kept is not None
            and params is None
            and kept[0] is self._tickets
            and kept[1] == identity
            and kept[2] is planned.refs
            and kept[3] == planned.sql
        ):
            return kept[4]
        if parts is None:
            claims = (self._tickets.statement_claims(identity, planned.sql, params, planned.refs),)
        else:
            claims = tuple(
                self._tickets.statement_claims(identity, planned.sql, params, planned.refs, part=part)
                for part in parts
            )
        if params is None:
            planned.derived[key] = (self._tickets, identity, planned.refs, planned.sql, claims)
        return claims

    def locations(self, start: int) -> list[str]:
        """Every replica, starting at ``start`` (modulo their count)."""
        n = len(self.replicas)
        return [self.replicas[(start + k) % n] for k in range(n)]


def _endpoint(handle: bytes, expires: float, locations: Any) -> bytes:
    return framing.endpoint_bytes(framing.statement_ticket(handle), int(expires), locations)


__all__ = ["Answer", "Endpoints"]
