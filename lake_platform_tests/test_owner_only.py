"""Everything the platform writes under LAKE_HOME and the results area is owner-only (files
0600, folders 0700) under the usual permissive umask, which a child process sets for itself."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
import textwrap
from pathlib import Path

from lake_platform import owner_only

WRITER = textwrap.dedent(
    """
    import os, sys
    from pathlib import Path
    os.umask(0o022)  # the usual one: files 0644, folders 0755 unless the platform says otherwise
    import pyarrow as pa
    from lake_platform.auth.keyfile import load_or_create
    from lake_platform.catalog.catalog import Catalog
    from lake_platform.engine.results import ResultsArea
    from lake_platform.observability.audit import AuditTrail
    from lake_platform.query.engine import QueryEngine
    from lake_platform.settings import load_settings

    home, results = Path(sys.argv[1]), sys.argv[2]
    settings = load_settings(home=home, results_root=results)
    with Catalog(settings) as catalog:
        catalog.containers.create_project("p")
        catalog.access.create_token("etl", project="p", role="writer")
    AuditTrail(settings.home / "audit" / "queries.jsonl").write({"sql": "SELECT secret"})
    QueryEngine(settings)
    load_or_create(home / "flight-keys")
    area = ResultsArea(results)
    area.check_writable()
    table = pa.table({"x": [1, 2]})
    area.create_job("p", "job1", 1e12, table.schema)
    with area.segment_sink("p", "job1", "seg-00000.arrows") as sink:
        with pa.ipc.new_stream(sink, table.schema) as w:
            w.write_table(table)
    segments = [{"name": "seg-00000.arrows", "rows": 2, "bytes": 1}]
    area.finish_job("p", "job1", table.schema, segments, ordered=True)
    """
)


def modes(top: Path) -> dict[str, str]:
    """Every path under ``top`` (itself included) whose mode lets anyone but the owner in."""
    found = {}
    for here, dirs, files in os.walk(top):
        for name in [".", *dirs, *files]:
            path = Path(here) / name
            mode = stat.S_IMODE(path.lstat().st_mode)
            if mode & 0o077:
                found[str(path.relative_to(top.parent))] = oct(mode)
    return found


def run_writer(home: Path, results: Path) -> None:
    subprocess.run([sys.executable, "-c", WRITER, str(home), str(results)], check=True, timeout=300)


def test_home_and_results_are_owner_only_under_a_permissive_umask(tmp_path: Path) -> None:
    home, results = tmp_path / "home", tmp_path / "results"
    run_writer(home, results)
    written = {p.name for p in home.iterdir()}
    assert {"registry.db", "audit", "spill", "flight-keys"} <= written
    assert (results / "p" / "job1" / "seg-00000.arrows").exists()
    assert modes(home) == {} and modes(results) == {}
    assert stat.S_IMODE(home.stat().st_mode) == owner_only.DIR_MODE
    assert stat.S_IMODE((home / "registry.db").stat().st_mode) == owner_only.FILE_MODE


def test_a_home_made_before_the_rule_is_narrowed_on_use(tmp_path: Path) -> None:
    home, results = tmp_path / "home", tmp_path / "results"
    home.mkdir()
    home.chmod(0o755)
    (home / "spill").mkdir(mode=0o755)
    (home / "audit").mkdir(mode=0o700)
    for name in ("registry.db", "audit/queries.jsonl"):
        (home / name).touch()
        (home / name).chmod(0o644)
    os.chmod(home / "spill", 0o755)
    run_writer(home, results)
    # the files and the platform's own folders in it; the home folder itself is the operator's
    assert modes(home) == {"home": "0o755"}


def test_folders_that_already_exist_keep_their_mode(tmp_path: Path) -> None:
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o755)
    owner_only.make_dir(shared / "a" / "b")
    assert stat.S_IMODE(shared.stat().st_mode) == 0o755
    assert (
        stat.S_IMODE((shared / "a").stat().st_mode)
        == stat.S_IMODE((shared / "a" / "b").stat().st_mode)
        == 0o700
    )


UP = textwrap.dedent(
    """
    import os, sys
    from pathlib import Path
    os.umask(0o022)
    from lake_platform.catalog.catalog import Catalog
    from lake_platform.settings import load_settings
    from lake_platform.up.demo import ensure_demo_user, seed_demo
    from lake_platform.up.launcher import prepare_dagster_home

    home = Path(sys.argv[1])
    settings = load_settings(home=home)
    prepare_dagster_home(settings, ("127.0.0.1", 4000))
    with Catalog(settings) as catalog:
        seed_demo(catalog)
        ensure_demo_user(catalog, home)
    """
)


def test_what_lake_up_writes_is_owner_only_under_a_permissive_umask(tmp_path: Path) -> None:
    home = tmp_path / "home"
    subprocess.run([sys.executable, "-c", UP, str(home)], check=True, timeout=300)
    # Dagster writes its own storage at the umask's mode: its folder keeps others out.
    dagster = home / "dagster"
    assert (dagster / "dagster.yaml").is_file() and any(dagster.iterdir())
    assert stat.S_IMODE(dagster.stat().st_mode) == owner_only.DIR_MODE
    for name in ("dagster/dagster.yaml", "dagster/workspace.yaml", "demo-user.txt"):
        assert stat.S_IMODE((home / name).stat().st_mode) == owner_only.FILE_MODE, name
    # Lance writes table files at the umask's mode too: the warehouse's root keeps others out.
    warehouse = home / "warehouse" / "demo" / "main"
    assert any(warehouse.rglob("*.lance"))
    assert stat.S_IMODE(warehouse.stat().st_mode) == owner_only.DIR_MODE
    assert {
        path for path in modes(home) if not path.startswith(("home/dagster/", "home/warehouse/demo/main/"))
    } == set()
