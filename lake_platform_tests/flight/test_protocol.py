"""Protocol pieces without a server: message bytes, SqlInfo, sealed envelopes, SQL checks."""

from __future__ import annotations

import re

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lake_platform.auth.tokens import Expired, Identity, Sealer
from lake_platform.errors import InvalidInput, Unauthenticated
from lake_platform.flight import proto, schemas
from lake_platform.flight.metadata import like as _like
from lake_platform.flight.sqlinfo import sql_info_table, standard_info
from lake_platform.query.batches import advertised_schema, conformer, split_batch
from lake_platform.query.sql import check_query, qualify_nested, rewrite_placeholders
from lake_platform.settings.flight import flight_settings

# CommandGetTables{db_schema_filter_pattern:"main", table_name_filter_pattern:"trips", include_schema:true}
# as ADBC sends it (Any-wrapped).
GOLDEN_GET_TABLES = bytes.fromhex(
    "0a3e747970652e676f6f676c65617069732e636f6d2f6172726f772e666c696768742e70726f746f636f6c2e73716c2e"
    "436f6d6d616e644765745461626c6573120f12046d61696e1a0574726970732801"
)


def test_golden_bytes() -> None:
    msg = proto.CommandGetTables(
        db_schema_filter_pattern="main", table_name_filter_pattern="trips", include_schema=True
    )
    assert proto.pack(msg) == GOLDEN_GET_TABLES
    name, payload = proto.unpack_any(GOLDEN_GET_TABLES)
    parsed = proto.parse(proto.CommandGetTables, payload)
    assert name == "CommandGetTables" and proto.opt(parsed, "catalog") is None
    assert proto.opt(parsed, "db_schema_filter_pattern") == "main" and parsed.include_schema


def test_optional_fields_distinguish_absent_from_empty() -> None:
    absent = proto.parse(proto.CommandGetDbSchemas, proto.CommandGetDbSchemas().SerializeToString())
    empty = proto.parse(proto.CommandGetDbSchemas, proto.CommandGetDbSchemas(catalog="").SerializeToString())
    assert proto.opt(absent, "catalog") is None and proto.opt(empty, "catalog") == ""


def test_malformed_payload_is_invalid_input() -> None:
    with pytest.raises(InvalidInput):
        proto.parse(proto.CommandGetTables, b"\xff\xff\xff")
    with pytest.raises(ValueError):
        proto.unpack_any(b"\x0a\x03abc")


def test_sql_info_returns_only_standard_ids_and_exact_schema() -> None:
    info = standard_info(max_statement_bytes=1000, statement_timeout_ms=1000)
    table = sql_info_table(info, [])
    table.validate(full=True)
    assert table.schema.equals(schemas.SQL_INFO)
    ids = table.column("info_name").to_pylist()
    assert all(i < 10_000 for i in ids) and {0, 1, 2, 3, 8, 504, 508, 509, 510, 511, 512, 517} <= set(ids)
    assert sql_info_table(info, [504, 3, 12345]).to_pylist() == [
        {"info_name": 504, "value": '"'},
        {"info_name": 3, "value": True},
    ]


def test_metadata_schema_nullability() -> None:
    assert [f.nullable for f in schemas.TABLES] == [True, True, False, False]
    assert not schemas.TABLES_WITH_SCHEMA.field("table_schema").nullable
    assert [f.nullable for f in schemas.DB_SCHEMAS] == [True, False]
    assert not schemas.CATALOGS.field("catalog_name").nullable


def test_sealed_envelopes() -> None:
    sealer = Sealer([("k", b"k" * 32)])
    ident = Identity("alice", "user", "p", "reader")
    token = sealer.bearer(ident, 60)
    assert sealer.open_bearer(token) == ident
    assert Sealer([("k", b"k" * 32)]).open_bearer(token) == ident  # any replica with the same key
    with pytest.raises(Unauthenticated):
        Sealer([("k", b"x" * 32)]).open_bearer(token)
    with pytest.raises(Unauthenticated):
        Sealer([("other", b"k" * 32)]).open_bearer(token)
    blob = sealer.seal("ticket", {"sql": "SELECT 1"}, 60)
    with pytest.raises(Unauthenticated):
        sealer.open("prepared", blob)  # a ticket is not a prepared handle
    tampered = bytearray(blob)
    tampered[-1] ^= 1
    with pytest.raises(Unauthenticated):
        sealer.open("ticket", bytes(tampered))
    with pytest.raises(Expired):
        sealer.open("ticket", sealer.seal("ticket", {}, -1))
    assert b"SELECT" not in blob  # sealed, not just signed


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=200))
def test_random_bytes_never_open(data: bytes) -> None:
    with pytest.raises((Unauthenticated, InvalidInput)):
        Sealer([("k", b"k" * 32)]).open("ticket", data)


def test_check_query() -> None:
    for ok in [
        "SELECT 1",
        "  -- c\n select 1",
        "/* x */ WITH a AS (SELECT 1) SELECT * FROM a",
        "(SELECT 1)",
        "VALUES (1)",
        "explain select 1",
    ]:
        assert check_query(ok, 1000) == ok
    for bad in [
        "",
        "  ",
        "DROP TABLE x",
        "/* open",
        "-- only",
        "INSERT INTO x VALUES (1)",
        "SET x = 1",
        "x" * 2000,
        42,
        "SELECT '\x00'",
    ]:
        with pytest.raises(InvalidInput):
            check_query(bad, 1000)  # type: ignore[arg-type]


def test_rewrite_placeholders() -> None:
    assert rewrite_placeholders("SELECT ? , ?") == ("SELECT $1 , $2", 2)
    assert rewrite_placeholders("SELECT '?', \"a?\" -- ?\n, ? /* ? */") == (
        "SELECT '?', \"a?\" -- ?\n, $1 /* ? */",
        1,
    )
    assert rewrite_placeholders("SELECT $2, $1") == ("SELECT $2, $1", 2)
    assert rewrite_placeholders("SELECT 'it''s ?'") == ("SELECT 'it''s ?'", 0)
    with pytest.raises(InvalidInput):
        rewrite_placeholders("SELECT ?, $1")


def test_like_patterns() -> None:
    assert _like("ns.%")("ns.sub") and not _like("ns.%")("ns")
    assert _like("t_")("t1") and not _like("t_")("t12")
    assert _like("a\\_b")("a_b") and not _like("a\\_b")("axb")
    assert _like(None)("anything") and _like("%")("")


def _like_by_regex(pattern: str, name: str) -> bool:
    """LIKE as a regular expression: the reference for short inputs only (it backtracks)."""
    out, i = [], 0
    while i < len(pattern):
        if pattern[i] == "\\" and i + 1 < len(pattern):
            out.append(re.escape(pattern[i + 1]))
            i += 2
            continue
        out.append({"%": ".*", "_": "."}.get(pattern[i], re.escape(pattern[i])))
        i += 1
    return re.fullmatch("".join(out), name, re.DOTALL) is not None


@settings(max_examples=400, deadline=None)
@given(st.text("ab%_\\", max_size=8), st.text("ab%_\\", max_size=8))
def test_like_matches_as_the_regular_expression_would(pattern: str, name: str) -> None:
    assert _like(pattern)(name) == _like_by_regex(pattern, name)


def test_split_batch_respects_the_cap() -> None:
    batch = pa.record_batch({"s": pa.array(["x" * 1000] * 10_000)})
    pieces = list(split_batch(batch, 1 << 20))
    assert sum(p.num_rows for p in pieces) == 10_000
    assert all(p.nbytes <= 1 << 20 for p in pieces) and len(pieces) > 5


def test_conformer_relabels_and_refuses_nulls_in_non_null_columns() -> None:
    target = pa.schema([pa.field("a", pa.int64())])
    strict = pa.schema([pa.field("a", pa.int64(), nullable=False)])
    batch = pa.record_batch([pa.array([1, 2])], schema=strict)
    assert conformer(strict, target)(batch).schema == target
    with_null = pa.record_batch([pa.array([1, None])], schema=target)
    from lake_platform.errors import Internal

    with pytest.raises(Internal):
        conformer(target, strict)(with_null)
    meta = pa.schema([pa.field("a", pa.int64(), metadata={"k": "v"})], metadata={"x": "y"})
    assert advertised_schema(meta).equals(target, check_metadata=True)


def test_settings_guard_non_loopback_binds() -> None:
    from lake_platform.errors import SettingsError

    assert flight_settings().host == "127.0.0.1" and flight_settings().port == 50051
    with pytest.raises(SettingsError, match="LAKE_FLIGHT_HOST"):
        flight_settings(host="0.0.0.0")
    assert flight_settings(host="0.0.0.0", allow_insecure=True).host == "0.0.0.0"
    with pytest.raises(SettingsError, match="SECRET_KEY"):
        flight_settings(secret_key="short")
    assert len(flight_settings(secret_key="ab" * 32).secret_key_bytes) == 32
    with pytest.raises(SettingsError, match="LAKE_FLIGHT_WORKER_THREADS.*max_concurrent_queries"):
        flight_settings(worker_threads=8, max_concurrent_queries=8)
    assert flight_settings(worker_threads=9, max_concurrent_queries=8).worker_threads == 9


def test_nested_namespaces_need_no_quotes() -> None:
    known = {("w", "ns.sub"), ("w", "a.b.c")}

    def q(sql: str) -> str:
        return qualify_nested(sql, lambda wh, ns: (wh, ns) in known)

    assert q("SELECT * FROM w.ns.sub.u") == 'SELECT * FROM w."ns.sub".u'
    assert q("SELECT w.ns.sub.u.id FROM W.NS.SUB.U") == 'SELECT w."ns.sub".u.id FROM W."ns.sub".U'
    assert q("SELECT * FROM w.a.b.c.t") == 'SELECT * FROM w."a.b.c".t'
    assert q('SELECT * FROM w.ns.sub."u@v3"') == 'SELECT * FROM w."ns.sub"."u@v3"'  # time travel
    for untouched in [
        'SELECT * FROM w.ns."t@v3"',
        'SELECT * FROM w.ns.sub."u@v3".id',  # a quoted name mid-chain is left to the user
        "SELECT 'w.ns.sub.u'",
        'SELECT * FROM w."ns.sub".u',
        "SELECT a.b.c.d FROM w.ns.t",
        "SELECT * FROM w.ns.t -- w.ns.sub.u",
        "SELECT * FROM q.ns.sub.u",
    ]:
        assert q(untouched) == untouched
