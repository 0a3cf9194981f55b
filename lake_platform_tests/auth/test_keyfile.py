"""The embedded default's sealing key file: tickets and logins survive a restart, and two
endpoints on one home honour each other's (no LAKE_FLIGHT_KEYS configured)."""

from __future__ import annotations

import os
import stat
import threading
from collections.abc import Iterator
from pathlib import Path

import pyarrow.flight as fl
import pytest
from click.testing import CliRunner

from lake_platform.auth import keyfile
from lake_platform.auth.keyfile import key_file_path, load_or_create, read_keys
from lake_platform.auth.tokens import UnknownKey
from lake_platform.catalog.catalog import Catalog
from lake_platform.cli import cli
from lake_platform.errors import SettingsError
from lake_platform.settings import LakeSettings
from lake_platform_tests.flight.conftest import build_catalog, fetch, login, plan, serving

SQL = "SELECT count(*) AS n FROM w.ns.t"


@pytest.fixture
def lake(tmp_path: Path) -> Iterator[tuple[LakeSettings, Catalog]]:
    settings, catalog = build_catalog(tmp_path / "home")
    try:
        yield settings, catalog
    finally:
        catalog.close()


def _uri(server: object) -> str:
    return f"grpc://127.0.0.1:{server.port}"  # type: ignore[attr-defined]


def test_a_ticket_and_a_login_survive_a_restart(lake: tuple[LakeSettings, Catalog]) -> None:
    settings, catalog = lake
    with serving(settings, catalog) as first:
        client, options = login(_uri(first))
        info = plan(client, options, SQL)
        client.close()
    with serving(settings, catalog) as second:
        client = fl.connect(_uri(second))
        # The Bearer from the first process's login, and its ticket, on the restarted one.
        assert fetch(client, options, info).column("n").to_pylist() == [1000]
        client.close()


def test_two_endpoints_on_one_home_serve_each_others_tickets(lake: tuple[LakeSettings, Catalog]) -> None:
    settings, catalog = lake
    with serving(settings, catalog) as a, serving(settings, catalog) as b:
        client_a, options_a = login(_uri(a))
        client_b, options_b = login(_uri(b))
        on_b = fl.connect(_uri(b))
        on_a = fl.connect(_uri(a))
        assert fetch(on_b, options_a, plan(client_a, options_a, SQL)).column("n").to_pylist() == [1000]
        assert fetch(on_a, options_b, plan(client_b, options_b, SQL)).column("n").to_pylist() == [1000]
        for c in (client_a, client_b, on_a, on_b):
            c.close()


def test_the_key_file_is_created_once_with_mode_0600(lake: tuple[LakeSettings, Catalog]) -> None:
    settings, catalog = lake
    path = key_file_path(settings.home)
    with serving(settings, catalog) as server:
        sealing = server.sealer.sealing_kid
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert [kid for kid, _ in read_keys(path)] == [sealing]


def test_endpoints_starting_at_once_agree_on_one_key(tmp_path: Path) -> None:
    path = tmp_path / "flight-keys"
    results: list[list[tuple[str, bytes]]] = []
    barrier = threading.Barrier(8)

    def start() -> None:
        barrier.wait()
        results.append(load_or_create(path))

    threads = [threading.Thread(target=start) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(results) == 8 and all(r == results[0] for r in results)
    assert len(results[0]) == 1
    assert [p.name for p in tmp_path.iterdir()] == ["flight-keys"]  # no temporary file left


def test_configured_keys_win_over_the_key_file(lake: tuple[LakeSettings, Catalog]) -> None:
    settings, catalog = lake
    with serving(settings, catalog, keys="k1:" + "ab" * 32) as server:
        assert server.sealer.key_ids == ("k1",)
    assert not key_file_path(settings.home).exists()


@pytest.mark.parametrize(
    ("content", "mode", "problem"),
    [
        ("k1:" + "ab" * 32 + "\n", 0o644, "mode 0644"),
        ("k1:" + "ab" * 32 + "\n", 0o620, "mode 0620"),
        ("not a key\n", 0o600, "line 1: expected 'kid:hex'"),
        ("k1:zz\n", 0o600, "not hex"),
        ("k1:abcd\n", 0o600, "at least 32 bytes"),
        ("", 0o600, "holds no key"),
    ],
)
def test_an_unsafe_or_malformed_key_file_is_refused(
    lake: tuple[LakeSettings, Catalog], content: str, mode: int, problem: str
) -> None:
    settings, catalog = lake
    path = key_file_path(settings.home)
    path.write_text(content)
    os.chmod(path, mode)
    with pytest.raises(SettingsError) as err:
        with serving(settings, catalog):
            pass
    assert str(path) in err.value.message and problem in err.value.message
    assert path.read_text() == content and stat.S_IMODE(path.stat().st_mode) == mode  # left alone


def test_rotation_keeps_old_tickets_until_the_old_key_is_retired(lake: tuple[LakeSettings, Catalog]) -> None:
    settings, catalog = lake
    env = {"LAKE_HOME": str(settings.home)}
    runner = CliRunner()
    with serving(settings, catalog) as first:
        old_kid = first.sealer.sealing_kid
        client, old_options = login(_uri(first))
        old_info = plan(client, old_options, SQL)
        client.close()
    rotated = runner.invoke(cli, ["--json", "flight", "rotate-key"], env=env)
    assert rotated.exit_code == 0, rotated.output
    path = key_file_path(settings.home)
    new_kid = read_keys(path)[-1][0]
    assert new_kid != old_kid and stat.S_IMODE(path.stat().st_mode) == 0o600
    with serving(settings, catalog) as second:
        assert second.sealer.sealing_kid == new_kid
        client = fl.connect(_uri(second))
        assert fetch(client, old_options, old_info).column("n").to_pylist() == [1000]
        client.close()
    retired = runner.invoke(cli, ["flight", "retire-keys", "--keep", "1"], env=env)
    assert retired.exit_code == 0 and old_kid in retired.output
    assert [kid for kid, _ in read_keys(path)] == [new_kid]
    with serving(settings, catalog) as third:
        with pytest.raises(UnknownKey):
            third.sealer.open_bearer(old_options.headers[0][1].decode().removeprefix("Bearer "))


def test_retire_refuses_to_drop_every_key(tmp_path: Path) -> None:
    path = tmp_path / "flight-keys"
    load_or_create(path)
    with pytest.raises(SettingsError):
        keyfile.retire(path, 0)
    assert len(read_keys(path)) == 1


def test_serve_flight_stops_on_an_unsafe_key_file(tmp_path: Path) -> None:
    home = tmp_path / "home"
    path = key_file_path(home)
    home.mkdir()
    path.write_text("k1:" + "ab" * 32 + "\n")
    path.chmod(0o644)
    result = CliRunner().invoke(cli, ["--json", "serve-flight", "--port", "0"], env={"LAKE_HOME": str(home)})
    assert result.exit_code != 0
    assert "SettingsError" in result.output and str(path) in result.output and "mode 0644" in result.output
