"""The identifier grammar: ``project.warehouse.namespace[.sub...].table``.

Every name is checked here before anything touches the registry or storage, so a rejected name
never reaches I/O. A segment matches ``^[a-z_][a-z0-9_]{0,62}$``: no dots, slashes, ``..``,
upper case, unicode or empty segments, which also means SQL users never need to quote a name.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from lake_platform.errors import InvalidInput

SEGMENT = re.compile(r"[a-z_][a-z0-9_]{0,62}")
MAX_NAMESPACE_DEPTH = 8


def check_segment(segment: object, what: str = "name") -> str:
    """Return ``segment`` if it is a valid identifier segment, else raise InvalidInput."""
    if not isinstance(segment, str) or SEGMENT.fullmatch(segment) is None:
        raise InvalidInput(
            f"invalid {what} {segment!r}: each segment must match [a-z_][a-z0-9_]{{0,62}} "
            "(lower-case letters, digits and underscores, not starting with a digit)"
        )
    return segment


def _split(text: object, minimum: int, maximum: int, what: str) -> list[str]:
    if not isinstance(text, str) or not text:
        raise InvalidInput(f"invalid {what}: expected a dotted name, got {text!r}")
    if len(text) > 1024:
        raise InvalidInput(f"invalid {what}: name is {len(text)} characters long (limit 1024)")
    parts = text.split(".")
    if not minimum <= len(parts) <= maximum:
        raise InvalidInput(f"invalid {what} {text!r}: expected {_shape(what)}")
    for part in parts:
        if not isinstance(part, str) or SEGMENT.fullmatch(part) is None:
            reason = "an empty segment" if part == "" else f"the segment {part!r}"
            raise InvalidInput(
                f"invalid {what} {text!r}: {reason} does not match [a-z_][a-z0-9_]{{0,62}} "
                "(lower-case letters, digits and underscores, not starting with a digit)"
            )
    return parts


def _shape(what: str) -> str:
    return {
        "project name": "PROJECT",
        "warehouse name": "PROJECT.WAREHOUSE",
        "namespace name": "PROJECT.WAREHOUSE.NAMESPACE[.SUB...]",
        "table name": "PROJECT.WAREHOUSE.NAMESPACE[.SUB...].TABLE",
    }[what]


@dataclass(frozen=True, order=True)
class ProjectName:
    project: str

    @classmethod
    def parse(cls, text: object) -> ProjectName:
        return cls(*_split(text, 1, 1, "project name"))

    def __str__(self) -> str:
        return self.project


@dataclass(frozen=True, order=True)
class WarehouseName:
    project: str
    warehouse: str

    @classmethod
    def parse(cls, text: object) -> WarehouseName:
        return cls(*_split(text, 2, 2, "warehouse name"))

    @property
    def parent(self) -> ProjectName:
        return ProjectName(self.project)

    def __str__(self) -> str:
        return f"{self.project}.{self.warehouse}"


@dataclass(frozen=True, order=True)
class NamespaceName:
    project: str
    warehouse: str
    path: tuple[str, ...]

    @classmethod
    def parse(cls, text: object) -> NamespaceName:
        parts = _split(text, 3, 2 + MAX_NAMESPACE_DEPTH, "namespace name")
        return cls(parts[0], parts[1], tuple(parts[2:]))

    @property
    def warehouse_name(self) -> WarehouseName:
        return WarehouseName(self.project, self.warehouse)

    @property
    def parent(self) -> NamespaceName | WarehouseName:
        if len(self.path) == 1:
            return self.warehouse_name
        return NamespaceName(self.project, self.warehouse, self.path[:-1])

    def table(self, segment: str) -> TableName:
        return TableName(self.project, self.warehouse, self.path, check_segment(segment, "table name"))

    def __str__(self) -> str:
        return ".".join((self.project, self.warehouse, *self.path))


@dataclass(frozen=True, order=True)
class TableName:
    project: str
    warehouse: str
    namespace: tuple[str, ...]
    table: str

    @classmethod
    def parse(cls, text: object) -> TableName:
        parts = _split(text, 4, 3 + MAX_NAMESPACE_DEPTH, "table name")
        return cls(parts[0], parts[1], tuple(parts[2:-1]), parts[-1])

    @classmethod
    def from_parts(cls, parts: list[str] | tuple[str, ...]) -> TableName:
        """Build from a Lance Namespace ``table_id`` list, checking every segment."""
        if not isinstance(parts, (list, tuple)):
            raise InvalidInput(f"invalid table id {parts!r}: expected a list of segments")
        for part in parts:  # before joining: a dot inside one would read as the separator
            check_segment(part, "table id segment")
        return cls.parse(".".join(parts))

    @property
    def namespace_name(self) -> NamespaceName:
        return NamespaceName(self.project, self.warehouse, self.namespace)

    @property
    def warehouse_name(self) -> WarehouseName:
        return WarehouseName(self.project, self.warehouse)

    @property
    def parts(self) -> list[str]:
        return [self.project, self.warehouse, *self.namespace, self.table]

    def __str__(self) -> str:
        return ".".join(self.parts)
