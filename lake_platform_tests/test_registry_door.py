"""The catalog is the one door to the registry: outside ``catalog/`` and ``registry/`` no module
imports the registry's key layout or opens a backend, and nothing outside ``catalog/`` reads a
private member of a Catalog."""

from __future__ import annotations

import ast
from pathlib import Path

from lake_platform_tests.import_names import imported_names

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "lake_platform"
#: What only the catalog and the registry itself know: the key layout and the backends.
REGISTRY_INSIDES = (
    "lake_platform.registry.keys",
    "lake_platform.registry.factory",
    "lake_platform.registry.sqlite",
    "lake_platform.registry.dynamodb",
)
#: The query layer's snapshot loader reads the registry itself, by design (invariant 7: one
#: background refresh of a process-local snapshot; the catalog, a lower layer, cannot build the
#: query layer's types). The one exception: ``query/snapshot*.py``.
READS_THE_REGISTRY_ITSELF = "lake_platform/query/snapshot"


def _registry_importers() -> set[str]:
    found = set()
    for path in PACKAGE.rglob("*.py"):
        rel = path.relative_to(ROOT).as_posix()
        if rel.startswith(("lake_platform/catalog/", "lake_platform/registry/")):
            continue
        imported = imported_names(ast.parse(path.read_text()))
        if any(name.startswith(REGISTRY_INSIDES) for name in imported):
            found.add(rel)
    return found


def test_only_the_catalog_and_the_registry_know_registry_keys_and_backends() -> None:
    assert {rel for rel in _registry_importers() if not rel.startswith(READS_THE_REGISTRY_ITSELF)} == set()


def _private_reads(tree: ast.AST) -> list[str]:
    """``catalog._x``, ``cat._x``, ``self.catalog._x``, ``lake.catalog._x``: a private member
    read through anything named like a catalog."""
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Attribute) or not node.attr.startswith("_") or node.attr.startswith("__"):
            continue
        owner = node.value
        name = (
            owner.id
            if isinstance(owner, ast.Name)
            else owner.attr
            if isinstance(owner, ast.Attribute)
            else ""
        )
        if name in ("catalog", "cat"):
            found.append(f"{name}.{node.attr} (line {node.lineno})")
    return found


def test_nothing_outside_the_catalog_reads_a_private_member_of_a_catalog() -> None:
    offenders = {}
    for folder in ("lake_platform", "lake_platform_tests", "bench"):
        for path in (ROOT / folder).rglob("*.py"):
            rel = path.relative_to(ROOT).as_posix()
            if rel.startswith("lake_platform/catalog/"):
                continue
            found = _private_reads(ast.parse(path.read_text()))
            if found:
                offenders[rel] = found
    assert offenders == {}


def test_the_checks_find_what_they_look_for() -> None:
    source = "from lake_platform.registry import keys\nx = self.catalog._tables\ny = cat._who(None)\n"
    tree = ast.parse(source)
    assert "lake_platform.registry.keys" in imported_names(tree)
    assert _private_reads(tree) == ["catalog._tables (line 2)", "cat._who (line 3)"]
