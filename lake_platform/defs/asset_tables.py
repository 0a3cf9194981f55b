"""Which registered table an asset is, and what a materialization or observation says about it.

Shared by the IO manager (``io_manager``, ``io_reads``, ``wap``) and the table assets
(``table_assets``): the asset key <-> table name mapping, how and under which commit id a step's
output is written (``WritePlan``, the partition predicate), and Dagster's standard table
metadata.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import dagster as dg

from lake_platform.errors import InvalidInput
from lake_platform.naming import TableName

if TYPE_CHECKING:
    import pyarrow as pa

    from lake_platform.defs.partition_rows import PartitionRows

#: Metadata keys the IO manager records on each materialization (and the observations carry):
#: the input side pins its read to ``VERSION``.
TABLE = "lake/table"
VERSION = "lake/version"
COMMIT_ID = "lake/commit_id"
#: Set by a write-audit-publish write (``wap``): the branch the version is on.
BRANCH = "lake/branch"


def table_for_key(key: dg.AssetKey, namespaces: Mapping[str, str]) -> str:
    """The table an asset key names: the longest configured key prefix (``"sales"`` or
    ``"sales/raw"``, path parts joined by ``/``) maps to a namespace (``"demo.main.sales"``) and the
    rest of the key is the table; a key of four or more parts with no configured prefix is the
    table's own name (project, warehouse, namespace(s), table)."""
    path = list(key.path)
    for size in range(len(path) - 1, 0, -1):
        namespace = namespaces.get("/".join(path[:size]))
        if namespace is not None:
            return str(TableName.parse(".".join([namespace, *_segments(key, path[size:])])))
    if len(path) >= 4:
        return str(TableName.parse(".".join(_segments(key, path))))
    raise InvalidInput(
        f"asset {key.to_user_string()} names no table: map a prefix of its key to a namespace "
        "(LakeIOManager namespaces) or give it the table's own name as its key (project, warehouse, "
        "namespace, table)"
    )


def _segments(key: dg.AssetKey, parts: Sequence[str]) -> Sequence[str]:
    """``parts`` of ``key`` as table name segments; a part holding a dot is refused: joined,
    it would name the table of another key (``a.b`` is ``a``, ``b``), written under two assets."""
    dotted = [p for p in parts if "." in p]
    if dotted:
        split = [s for p in key.path for s in p.split(".")]
        raise InvalidInput(
            f"asset {key.to_user_string()}: the key part {dotted[0]!r} holds a dot, which separates a "
            f"table name's segments: give the key one key part per name segment (e.g. {split!r})"
        )
    return parts


def key_for_table(table: str, namespaces: Mapping[str, str]) -> dg.AssetKey:
    """The asset key a table appears under: the inverse of :func:`table_for_key` (the longest
    namespace mapped; else the table's four name parts)."""
    name = TableName.parse(table)
    best: tuple[str, str] | None = None
    for prefix, namespace in namespaces.items():
        if str(name).startswith(namespace + "."):
            if best is None or len(namespace) > len(best[1]):
                best = (prefix, namespace)
    if best is None:
        return dg.AssetKey(list(name.parts))
    rest = str(name)[len(best[1]) + 1 :].split(".")
    return dg.AssetKey([*best[0].split("/"), *rest])


def step_commit_id(run_id: str, step_key: str, key: dg.AssetKey, partitions: Sequence[str]) -> str:
    """The commit id of one step's output: the same run, step, asset and partitions give the
    same id, so a retried step finds its first commit's marker and applies nothing twice."""
    scope = "\0".join((run_id, step_key, key.to_user_string(), *sorted(partitions)))
    return "dg-" + hashlib.sha256(scope.encode()).hexdigest()[:48]


#: The write modes an asset names in its ``write_mode`` metadata (or the IO manager's config).
WRITE_MODES = ("append", "overwrite", "merge")


@dataclass(frozen=True)
class WritePlan:
    """How one output becomes one commit: ``append``, ``overwrite``, ``merge`` (merge-insert
    on ``key_columns``: matched rows updated, the others inserted) or ``replace`` (the rows
    ``predicate`` selects, a partitioned output's partitions, deleted and the output appended:
    every row of the output lands, identical ones too)."""

    operation: str
    key_columns: tuple[str, ...] = ()
    predicate: str | None = None


@dataclass(frozen=True)
class Written:
    """What one output's commit did (on main, or on ``branch``): ``replayed`` when a
    retried step found its commit id already landed and wrote nothing."""

    operation: str
    version: int
    replayed: bool
    #: The branch written (a write-audit-publish run's, a multi-asset step's); None: main.
    branch: str | None = None


def column_names(value: object, key: str) -> list[str]:
    """The metadata ``key``'s list of column names (none: an empty list); a lone string, which
    would be read letter by letter, or any other shape is refused."""
    if value is None:
        return []
    if isinstance(value, (list, tuple)) and all(isinstance(v, str) for v in value):
        return list(value)
    raise InvalidInput(f"{key} is a list of column names, not {value!r}")


def flag(value: object, key: str) -> bool:
    """The metadata ``key``'s true or false; anything else (the string ``"false"``, which is
    truthy) is refused."""
    if isinstance(value, bool):
        return value
    raise InvalidInput(f"{key} is true or false, not {value!r}")


def plan_write(
    table: str, mode: str, key_columns: Sequence[str], partitions: PartitionRows | None, schema: pa.Schema
) -> WritePlan:
    """The plan for an output of ``schema``: a partitioned output replaces exactly its
    partitions' rows, whatever the mode; else the mode, checked."""
    if mode not in WRITE_MODES:
        raise InvalidInput(f"write_mode is one of {', '.join(WRITE_MODES)}, not {mode!r}")
    if partitions is not None:
        return WritePlan("replace", predicate=partitions.predicate(schema))
    if mode == "merge":
        if not key_columns:
            raise InvalidInput(f"write_mode merge of {table} needs key_columns in the asset's metadata")
        return WritePlan("merge", key_columns=tuple(key_columns))
    return WritePlan(mode)


def column_schema(schema: pa.Schema) -> dg.TableSchema:
    return dg.TableSchema(
        columns=[
            dg.TableColumn(
                name=f.name,
                type=str(f.type),
                constraints=dg.TableColumnConstraints(nullable=f.nullable),
            )
            for f in schema
        ]
    )


def table_metadata(table: str, version: int, schema: pa.Schema, rows: int) -> dict[str, object]:
    """What Dagster's catalog shows of a table version: its name, schema and row count (the
    standard keys), and the version a downstream read pins to."""
    return {
        "dagster/table_name": table,
        "dagster/column_schema": column_schema(schema),
        "dagster/row_count": dg.MetadataValue.int(rows),
        TABLE: table,
        VERSION: dg.MetadataValue.int(version),
    }
