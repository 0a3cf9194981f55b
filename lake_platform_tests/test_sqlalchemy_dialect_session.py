"""The dialect's session defaults hold even when the ADBC driver loses a session cookie, which
its cookie middleware does now and then under load (``cookie_proxy`` says how): the lost
catalog made the next SetSessionOptions answer ``Could not set option(s) 'schema' (invalid
value)``, failing the connect; a lost schema left a connection whose unqualified names did not
resolve. A proxy between the driver and the endpoint drops the chosen cookie every time."""

from __future__ import annotations

from collections.abc import Iterator

import pandas as pd
import pytest
import sqlalchemy as sa

from lake_platform_tests.cookie_proxy import cookie_dropping_proxy
from lake_platform_tests.flight.conftest import PASSWORDS, build_catalog, built_lake, serving


@pytest.fixture(scope="module")
def port(tmp_path_factory: pytest.TempPathFactory) -> Iterator[int]:
    for settings, catalog in built_lake(tmp_path_factory, build_catalog, "dialect-session"):
        with serving(settings, catalog) as server:
            yield server.port


def _url(port: int, schema: str = "ns") -> str:
    return f"lake+flightsql://alice:{PASSWORDS['alice']}@127.0.0.1:{port}/w?schema={schema}"


@pytest.mark.parametrize("lost", [1, 2], ids=["catalog-cookie-lost", "schema-cookie-lost"])
def test_a_connection_whose_driver_lost_a_session_cookie_sets_its_defaults_again(
    port: int, lost: int
) -> None:
    with cookie_dropping_proxy(port, {lost}) as (through, proxy):
        engine = sa.create_engine(_url(through))
        try:
            assert pd.read_sql("SELECT count(*) AS n FROM t", engine)["n"].tolist() == [1000]
            with engine.connect() as connection:
                assert connection.dialect.default_schema_name == "ns"
        finally:
            engine.dispose()
    assert proxy.dropped == 1


def test_a_schema_the_warehouse_lacks_is_still_the_endpoints_error(port: int) -> None:
    """Setting the defaults again is for a lost cookie: a wrong name fails as it did."""
    engine = sa.create_engine(_url(port, schema="nope"))
    try:
        with pytest.raises(sa.exc.DBAPIError, match="'schema' \\(invalid value\\)"):
            engine.connect()
    finally:
        engine.dispose()
