"""What a module imports, read from its syntax tree (TYPE_CHECKING and function-local imports
count): the layering tests (``test_imports``, ``test_registry_door``) share it."""

from __future__ import annotations

import ast


def imported_names(tree: ast.AST) -> set[str]:
    """Every module imported, and every ``module.name`` imported from one (absolute imports)."""
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
            names |= {f"{node.module}.{alias.name}" for alias in node.names}
    return names
