"""``lake``: the command line. Thin: parse, call the catalog, print for people or (--json) machines.

``app`` holds the root group and what the commands share; each other module holds one family of
commands, attached to the root here (so ``app`` never imports them and there is no cycle).
"""

from __future__ import annotations

from lake_platform.cli import (
    access,
    audit,
    branches,
    conformance,
    flight,
    hierarchy,
    indexes,
    maintenance,
    policy,
    results,
    serve,
    sql,
    tables,
    tags,
)
from lake_platform.cli.app import cli, main, parse_duration

for _module in (
    hierarchy,
    tables,
    maintenance,
    policy,
    access,
    audit,
    serve,
    sql,
    tags,
    branches,
    indexes,
    flight,
    results,
    conformance,
):
    for _command in _module.COMMANDS:
        cli.add_command(_command)

__all__ = ["cli", "main", "parse_duration"]
