"""The package's import graph: no cycles (TYPE_CHECKING and function-local imports count), and
only ``engine/`` imports ``lance``; and no module, of the package or of its tests, over 450 lines."""

from __future__ import annotations

import ast
from pathlib import Path

from lake_platform_tests.import_names import imported_names

PACKAGE = Path(__file__).resolve().parents[1] / "lake_platform"
TESTS = Path(__file__).resolve().parent


def _modules() -> dict[str, Path]:
    found = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def _imports(path: Path) -> set[str]:
    return imported_names(ast.parse(path.read_text()))


def _graph() -> dict[str, set[str]]:
    modules = _modules()
    # A package importing its own submodules (``cli/__init__`` attaching its command groups) is
    # not a cycle: the submodules never import the package's ``__init__`` back.
    return {
        name: {dep for dep in _imports(path) if dep in modules and dep != name}
        for name, path in modules.items()
    }


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    cycles, state = [], {}

    def visit(node: str, trail: list[str]) -> None:
        state[node] = "open"
        for dep in sorted(graph[node]):
            if state.get(dep) == "open":
                cycles.append([*trail[trail.index(dep) :], dep])
            elif dep not in state:
                visit(dep, [*trail, dep])
        state[node] = "done"

    for node in sorted(graph):
        if node not in state:
            visit(node, [node])
    return cycles


def test_the_package_has_no_import_cycle() -> None:
    assert _cycles(_graph()) == []


def test_the_cycle_check_finds_a_cycle() -> None:
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == [["a", "b", "c", "a"]]


def test_only_the_engine_imports_lance() -> None:
    importers = {
        name
        for name, path in _modules().items()
        if any(dep == "lance" or dep.startswith("lance.") for dep in _imports(path))
    }
    assert importers and all(name.startswith("lake_platform.engine") for name in importers), importers


def _importers_of(prefix: str, among: str) -> set[str]:
    return {
        f"{name} -> {dep}"
        for name, deps in _graph().items()
        if name.startswith(among)
        for dep in deps
        if dep == prefix.rstrip(".") or dep.startswith(prefix)
    }


def test_the_two_serving_surfaces_never_import_each_other() -> None:
    # Shared credentials live in auth/ and shared settings in settings/: an arrow sideways
    # between the entry layers would make one surface's change break the other.
    assert _importers_of("lake_platform.flight.", "lake_platform.rest") == set()
    assert _importers_of("lake_platform.rest.", "lake_platform.flight") == set()


def test_the_settings_import_no_layer_above_them() -> None:
    allowed = ("lake_platform.settings", "lake_platform.errors")
    assert {
        f"{name} -> {dep}"
        for name, deps in _graph().items()
        if name.startswith("lake_platform.settings")
        for dep in deps
        if not dep.startswith(allowed)
    } == set()


#: A module with one job reads in one sitting (docs/architecture.md): past this, split it.
MAX_MODULE_LINES = 450


def test_no_module_is_longer_than_the_limit() -> None:
    long = {
        name: lines
        for name, path in _modules().items()
        if (lines := len(path.read_text().splitlines())) > MAX_MODULE_LINES
    }
    assert long == {}


def test_no_test_file_is_longer_than_the_limit() -> None:
    """Test files too: the suite's two workers take whole files (--dist loadfile), so a long file
    is also a long stretch for one worker. Past the limit, split it along what its tests test."""
    long = {
        path.relative_to(TESTS).as_posix(): lines
        for path in sorted(TESTS.rglob("*.py"))
        if (lines := len(path.read_text().splitlines())) > MAX_MODULE_LINES
    }
    assert long == {}
