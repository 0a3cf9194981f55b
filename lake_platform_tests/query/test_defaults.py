"""A session's default catalog and schema, carried in the SQL text and applied while planning."""

from __future__ import annotations

from datafusion import SessionContext

from lake_platform.errors import InvalidInput, TableNotFound
from lake_platform.query import defaults
from lake_platform.query.defaults import NameDefaults


def test_the_directive_round_trips_and_a_prepared_text_keeps_its_own() -> None:
    sql = defaults.with_defaults("SELECT 1", NameDefaults("w", "ns.sub"))
    assert sql == "/*lake:defaults catalog=w schema=ns.sub*/ SELECT 1"
    assert defaults.defaults_of(sql) == NameDefaults("w", "ns.sub")
    assert defaults.with_defaults(sql, NameDefaults("other")) == sql
    assert defaults.with_defaults("SELECT 1", NameDefaults()) == "SELECT 1"
    assert defaults.defaults_of("SELECT 1") == NameDefaults()
    # Only the exact form counts: anything else is an ordinary comment.
    assert defaults.defaults_of("/*lake:defaults catalog=W*/ SELECT 1") == NameDefaults()


def _setting(ctx: SessionContext, name: str) -> str:
    return str(ctx.sql(f"SHOW datafusion.catalog.{name}").to_pydict()["value"][0])


def test_applied_sets_the_defaults_and_puts_the_neutral_ones_back() -> None:
    ctx = SessionContext()
    with defaults.applied(ctx, NameDefaults("w", "ns")):
        assert (_setting(ctx, "default_catalog"), _setting(ctx, "default_schema")) == ("w", "ns")
    assert (_setting(ctx, "default_catalog"), _setting(ctx, "default_schema")) == ("datafusion", "public")


def test_a_missing_table_is_named_as_the_user_wrote_it() -> None:
    error = defaults.not_found(TableNotFound("table datafusion.raw.orders not found"), NameDefaults())
    assert isinstance(error, TableNotFound) and "datafusion" not in error.message
    assert error.message.startswith("table raw.orders not found: ") and "catalog" in error.message
    schema_hint = defaults.not_found(TableNotFound("table w.public.orders not found"), NameDefaults("w"))
    assert schema_hint.message.startswith("table orders not found: ") and "schema" in schema_hint.message
    kept = TableNotFound("table w.ns.orders not found")
    assert defaults.not_found(kept, NameDefaults("w", "ns")) is kept
    other = InvalidInput("bad")
    assert defaults.not_found(other, NameDefaults()) is other


def test_a_one_warehouse_project_is_the_implicit_catalog() -> None:
    error = "Error during planning: table 'datafusion.ns.t' not found"
    assert defaults.implicit(error, NameDefaults(), ["w"]) == NameDefaults("w")
    assert not defaults.implicit(error, NameDefaults(), ["w", "v"])
    assert not defaults.implicit(error, NameDefaults("w"), ["w"])
    assert not defaults.implicit("Error during planning: table 'w.ns.t' not found", NameDefaults(), ["w"])
    system = "Error during planning: table 'datafusion.information_schema.tables' not found"
    assert not defaults.implicit(system, NameDefaults(), ["w"])
