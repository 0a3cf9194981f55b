"""open_metastore: the registry a LAKE_REGISTRY_URL names, or a SettingsError naming the setting."""

from __future__ import annotations

from pathlib import Path

import pytest

from lake_platform.errors import SettingsError
from lake_platform.registry.factory import open_metastore
from lake_platform.registry.sqlite import SqliteMetaStore
from lake_platform.settings import load_settings


def test_a_sqlite_url_opens_its_file_creating_its_folder(tmp_path: Path) -> None:
    store = open_metastore(
        load_settings(home=tmp_path / "home", registry_url=f"sqlite:///{tmp_path}/new/r.db")
    )
    assert isinstance(store, SqliteMetaStore) and store.get("k/x") is None
    store.close()


@pytest.mark.parametrize("where", ["folder", "under_a_file"])
def test_a_sqlite_path_that_cannot_be_a_file_is_a_settings_error(tmp_path: Path, where: str) -> None:
    """Before: IsADirectoryError / NotADirectoryError out of the store's constructor (a
    traceback from the CLI), not an error naming the setting."""
    (tmp_path / "a_file").write_text("x")
    path = tmp_path if where == "folder" else tmp_path / "a_file" / "r.db"
    with pytest.raises(SettingsError, match=r"LAKE_REGISTRY_URL: .*cannot be opened"):
        open_metastore(load_settings(home=tmp_path / "home", registry_url=f"sqlite:///{path}"))
