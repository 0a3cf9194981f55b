"""Session options (SetSessionOptions, GetSessionOptions, CloseSession): a default catalog and
schema, kept by the client, not by any replica.

Flight SQL keeps a session through a cookie the client sends back on every call (the spec
suggests the name ``arrow_flight_session_id``). Here the cookie's value *is* the session: the
options sealed (``tokens``, purpose ``session``) for the caller who set them, so any replica with
the keys reads them and none stores anything. SetSessionOptions answers with ``set-cookie``;
every later call of that client carries the defaults, which the statement RPCs write into the
SQL text (``query.defaults``) before planning, so prepared handles and tickets carry them too.

Options: ``catalog`` (a warehouse of the caller's project) and ``schema`` (a namespace of the
default catalog, nested levels joined by "."), strings; a valueless option unsets it. ADBC maps
``adbc_current_catalog`` / ``adbc_current_db_schema`` to these two (with its cookie middleware
on: ``adbc.flight.sql.rpc.with_cookie_middleware=true``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

from lake_platform.auth.tokens import Expired, Identity, Sealer, check_owner, claim_names
from lake_platform.errors import InvalidInput, Unauthenticated
from lake_platform.query.defaults import NameDefaults

if TYPE_CHECKING:
    from lake_platform.flight.transport import Call
    from lake_platform.query.snapshot import ProjectView

COOKIE = "arrow_flight_session_id"
OPTIONS = ("catalog", "schema")
#: SetSessionOptionsResult.ErrorValue
INVALID_NAME, INVALID_VALUE = 1, 2
_CLAIMS = frozenset({"sub", "knd", "prj", "rol", "cat", "sch", "iat", "exp"})
_PACKAGE = "arrow.flight.protocol"


def _messages() -> dict[str, Any]:
    """The session messages of Flight.proto (maps and a oneof, which ``proto``'s flat tables do
    not describe), built from a descriptor under the same full names."""
    f = descriptor_pb2.FieldDescriptorProto
    fdp = descriptor_pb2.FileDescriptorProto(name="lake_platform/flight_session.proto", package=_PACKAGE)
    fdp.syntax = "proto3"
    value = fdp.message_type.add(name="SessionOptionValue")
    strings = value.nested_type.add(name="StringListValue")
    strings.field.add(name="values", number=1, type=f.TYPE_STRING, label=f.LABEL_REPEATED)
    value.oneof_decl.add(name="option_value")
    for name, number, kind, type_name in (
        ("string_value", 1, f.TYPE_STRING, None),
        ("bool_value", 2, f.TYPE_BOOL, None),
        ("int64_value", 3, f.TYPE_SFIXED64, None),
        ("double_value", 4, f.TYPE_DOUBLE, None),
        ("string_list_value", 5, f.TYPE_MESSAGE, f".{_PACKAGE}.SessionOptionValue.StringListValue"),
    ):
        field = value.field.add(name=name, number=number, type=kind, label=f.LABEL_OPTIONAL, oneof_index=0)
        if type_name:
            field.type_name = type_name
    error = fdp.message_type.add(name="SetSessionOptionsResult")
    err = error.nested_type.add(name="Error")
    err.field.add(name="value", number=1, type=f.TYPE_INT32, label=f.LABEL_OPTIONAL)
    for owner, entry_value in (
        (fdp.message_type.add(name="SetSessionOptionsRequest"), ".SessionOptionValue"),
        (error, ".SetSessionOptionsResult.Error"),
        (fdp.message_type.add(name="GetSessionOptionsResult"), ".SessionOptionValue"),
    ):
        field_name = "errors" if owner.name == "SetSessionOptionsResult" else "session_options"
        entry = owner.nested_type.add(name=field_name.title().replace("_", "") + "Entry")
        entry.options.map_entry = True
        entry.field.add(name="key", number=1, type=f.TYPE_STRING, label=f.LABEL_OPTIONAL)
        entry.field.add(
            name="value",
            number=2,
            type=f.TYPE_MESSAGE,
            label=f.LABEL_OPTIONAL,
            type_name=f".{_PACKAGE}{entry_value}",
        )
        owner.field.add(
            name=field_name,
            number=1,
            type=f.TYPE_MESSAGE,
            label=f.LABEL_REPEATED,
            type_name=f".{_PACKAGE}.{owner.name}.{entry.name}",
        )
    fdp.message_type.add(name="GetSessionOptionsRequest")
    pool = descriptor_pool.DescriptorPool()
    pool.Add(fdp)
    return {
        m.name: message_factory.GetMessageClass(pool.FindMessageTypeByName(f"{_PACKAGE}.{m.name}"))
        for m in fdp.message_type
    }


_MESSAGES = _messages()
SessionOptionValue = _MESSAGES["SessionOptionValue"]
SetSessionOptionsRequest = _MESSAGES["SetSessionOptionsRequest"]
SetSessionOptionsResult = _MESSAGES["SetSessionOptionsResult"]
GetSessionOptionsRequest = _MESSAGES["GetSessionOptionsRequest"]
GetSessionOptionsResult = _MESSAGES["GetSessionOptionsResult"]


class Sessions:
    """Seals and opens session cookies; ``lifetime``: how long a set session lasts (seconds)."""

    def __init__(self, sealer: Sealer, lifetime: float) -> None:
        self.sealer = sealer
        self.lifetime = lifetime

    def defaults(self, call: Call) -> NameDefaults:
        """The caller's session defaults (none without a session cookie)."""
        blob = cookie(call.header("cookie"))
        if blob is None:
            return NameDefaults()
        try:
            claims = self.sealer.open("session", blob.encode("ascii"), what="session")
        except Expired:
            raise InvalidInput("the session has expired; set its options again") from None
        except UnicodeEncodeError:
            raise Unauthenticated("invalid session") from None
        if claim_names(claims) != _CLAIMS or not all(
            v is None or isinstance(v, str) for v in (claims["cat"], claims["sch"])
        ):
            raise Unauthenticated("invalid session")
        check_owner(claims, call.identity, "session")
        return NameDefaults(claims["cat"], claims["sch"])

    def set_cookie(self, identity: Identity, defaults: NameDefaults) -> str:
        """The ``set-cookie`` value that makes ``defaults`` the caller's session."""
        claims = {**identity.claims(), "cat": defaults.catalog, "sch": defaults.schema}
        blob = self.sealer.seal("session", claims, self.lifetime).decode("ascii")
        return f"{COOKIE}={blob}; Max-Age={int(self.lifetime)}"


def cookie(header: str | None) -> str | None:
    """The session cookie's value in a ``cookie`` header (None: not there)."""
    for part in (header or "").split(";"):
        name, _, value = part.strip().partition("=")
        if name == COOKIE and value:
            return value
    return None


def closed_cookie() -> str:
    """The ``set-cookie`` value that ends the session (the client drops the cookie)."""
    return f"{COOKIE}=; Max-Age=0"


def apply_options(
    current: NameDefaults, options: Any, view: ProjectView
) -> tuple[NameDefaults, dict[str, int]]:
    """``current`` with SetSessionOptions' ``options`` (name -> SessionOptionValue) applied, and
    the errors by option name (an option in error changes nothing)."""
    catalog, schema = current.catalog, current.schema
    errors: dict[str, int] = {}
    values: dict[str, str | None] = {}
    for name in sorted(options):
        value = options[name]
        kind = value.WhichOneof("option_value")
        if name not in OPTIONS:
            errors[name] = INVALID_NAME
        elif kind not in (None, "string_value") or (kind and not value.string_value):
            errors[name] = INVALID_VALUE
        else:
            values[name] = value.string_value if kind else None
    if "catalog" in values:
        wanted = values["catalog"]
        if wanted is not None and wanted not in view.warehouses:
            errors["catalog"] = INVALID_VALUE
        else:
            if wanted != catalog and "schema" not in values:
                schema = None  # the old schema belongs to the old catalog
            catalog = wanted
    if "schema" in values:
        wanted = values["schema"]
        if wanted is not None and (catalog is None or (catalog, wanted) not in set(view.namespaces)):
            errors["schema"] = INVALID_VALUE
        else:
            schema = wanted
    return NameDefaults(catalog, schema), errors


def options_result(defaults: NameDefaults) -> bytes:
    """GetSessionOptionsResult of ``defaults`` (only the options that are set)."""
    result = GetSessionOptionsResult()
    for name, value in (("catalog", defaults.catalog), ("schema", defaults.schema)):
        if value is not None:
            result.session_options[name].string_value = value
    return bytes(result.SerializeToString())


def errors_result(errors: dict[str, int]) -> bytes:
    result = SetSessionOptionsResult()
    for name, value in errors.items():
        result.errors[name].value = value
    return bytes(result.SerializeToString())


def parse_request(body: bytes) -> Any:
    """The options of a SetSessionOptionsRequest body (name -> SessionOptionValue)."""
    request = SetSessionOptionsRequest()
    try:
        request.ParseFromString(body)
    except Exception:  # noqa: BLE001 - protobuf's DecodeError: one answer
        raise InvalidInput("malformed SetSessionOptionsRequest") from None
    return request.session_options


__all__ = [
    "COOKIE",
    "GetSessionOptionsRequest",
    "GetSessionOptionsResult",
    "SessionOptionValue",
    "SetSessionOptionsRequest",
    "SetSessionOptionsResult",
    "Sessions",
    "apply_options",
    "closed_cookie",
    "cookie",
    "errors_result",
    "options_result",
    "parse_request",
]
