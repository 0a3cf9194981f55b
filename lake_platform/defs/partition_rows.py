"""Which rows of a table are a partitioned asset's partitions (the column its ``partition_expr``
metadata names): the filter an output's replacement deletes and an input reads, and the check
that an output holds no row of another partition.

- A time-window partition (daily, hourly, weekly, monthly, a range of them) over a timestamp or
  date column is the rows inside its window, ``start <= column < end``: a zone-less timestamp
  column holds the wall-clock time of the partitions' timezone, a zoned one instants, a date
  column the window's dates. A window a date column cannot hold (one starting or ending within
  a day: an hourly partition's) is refused, for a write and a read alike: as dates it would be
  ``day >= d AND day < d``, a write refusing every row and a read silently empty.
- Any other partition (static, dynamic, a time window over a string or integer column) is the
  rows whose column equals its key, as a typed literal.

A multi-partitioned asset is refused: its key (``2024-01-02|eu``) names no one column's value.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, time, timezone
from typing import TYPE_CHECKING

import dagster as dg

from lake_platform.errors import InvalidInput

if TYPE_CHECKING:
    import pyarrow as pa


@dataclass(frozen=True)
class PartitionRows:
    """The partitions ``keys`` of ``column``; ``window``: their time window's start and end (a
    time-window partitions definition); ``asset``: whose partitions, as a refusal names it."""

    column: str
    keys: tuple[str, ...]
    window: tuple[datetime, datetime] | None = None
    asset: str = ""

    def _windowed(self, column_type: pa.DataType) -> bool:
        import pyarrow as pa

        if self.window is None:
            return False
        if pa.types.is_date(column_type):
            self._whole_days(column_type)
            return True
        return pa.types.is_timestamp(column_type)

    def _whole_days(self, column_type: pa.DataType) -> None:
        """Refuse a window a date column cannot hold: its bounds as dates would select another
        range of rows (an hour: none at all)."""
        assert self.window is not None
        if all(bound.time() == time() for bound in self.window):
            return
        start, end = self.window
        whose = f"asset {self.asset}: " if self.asset else ""
        raise InvalidInput(
            f"{whose}partition column {self.column!r} is a {column_type} column, which "
            f"holds whole days, not the partition window ({', '.join(self.keys)}: from "
            f"{start.isoformat()} to before {end.isoformat()}); name a timestamp column in "
            "partition_expr, or partition the asset by days or longer"
        )

    def _type(self, schema: pa.Schema) -> pa.DataType:
        if self.column not in schema.names:
            raise InvalidInput(f"the partition column {self.column!r} is not a column of the data")
        return schema.field(self.column).type

    def predicate(self, schema: pa.Schema) -> str:
        """The rows of the partitions, as a Lance filter over a table of ``schema``."""
        column_type = self._type(schema)
        name = quote_name(self.column)
        if self._windowed(column_type):
            assert self.window is not None
            start, end = (window_literal(t, column_type) for t in self.window)
            return f"{name} >= {start} AND {name} < {end}"
        return f"{name} IN ({', '.join(literal(k, column_type, self.column) for k in self.keys)})"

    def stray(self, values: pa.Array | pa.ChunkedArray) -> pa.Scalar | None:
        """The first value of ``values`` (the partition column of a batch) outside the
        partitions, or None when every one is inside. A null is outside all (no partition's
        predicate selects it: written, it would never be replaced), returned as a null scalar."""
        import pyarrow as pa
        import pyarrow.compute as pc

        if self._windowed(values.type):
            assert self.window is not None
            start, end = (pa.scalar(bound_value(t, values.type), values.type) for t in self.window)
            inside = pc.and_(pc.greater_equal(values, start), pc.less(values, end))
        elif pa.types.is_integer(values.type):  # as the predicate reads a key: '07' is 7
            allowed = pa.array([integer_key(k, self.column) for k in self.keys], values.type)
            inside = pc.is_in(values, value_set=allowed)
        else:
            allowed = pa.array(list(self.keys), pa.string())
            inside = pc.is_in(pc.cast(values, pa.string()), value_set=allowed)
        outside = pc.invert(pc.fill_null(inside, False))
        if not pc.any(outside).as_py():
            return None
        return values.filter(outside)[0]

    def describe(self, column_type: pa.DataType) -> str:
        """The partitions as the check of a column of ``column_type`` reads them."""
        if self._windowed(column_type):
            assert self.window is not None
            start, end = self.window
            return f"{', '.join(self.keys)}: from {start.isoformat()} to before {end.isoformat()}"
        return ", ".join(self.keys)


def partition_rows(
    partitions_def: dg.PartitionsDefinition | None,
    keys: list[str],
    window: dg.TimeWindow | None,
    column: object,
    asset: dg.AssetKey,
) -> PartitionRows | None:
    """The rows the partitions ``keys`` of ``asset`` are (None: not partitioned, or no
    ``partition_expr`` named: ``column``); a multi-partitioned asset is refused."""
    if not keys:
        return None
    if isinstance(partitions_def, dg.MultiPartitionsDefinition):
        raise InvalidInput(
            f"multi-partitioned asset {asset.to_user_string()}: the Lake IO manager writes and reads "
            "assets of one partition dimension, whose column partition_expr names"
        )
    if not column:
        return None
    span = (window.start, window.end) if window is not None else None
    return PartitionRows(str(column), tuple(keys), span, asset.to_user_string())


def context_rows(context: dg.OutputContext | dg.InputContext, column: object) -> PartitionRows | None:
    """:func:`partition_rows` of an output's partitions, or of the upstream partitions an input
    reads (their time window when the definition has one)."""
    keys = list(context.asset_partition_keys) if context.has_asset_partitions else []
    partitions_def = context.asset_partitions_def if keys else None
    timed = isinstance(partitions_def, dg.TimeWindowPartitionsDefinition)
    window = context.asset_partitions_time_window if timed else None
    return partition_rows(partitions_def, keys, window, column, context.asset_key)


def integer_key(value: str, column: str) -> int:
    try:
        return int(value)
    except ValueError:
        raise InvalidInput(f"partition key {value!r} is not an integer, as column {column} is") from None


def literal(value: str, column_type: pa.DataType, column: str) -> str:
    """A partition key as a SQL literal of the partition column's type (Lance's filter parser
    does not cast a string to a date or a number by itself)."""
    import pyarrow as pa

    quoted = "'" + value.replace("'", "''") + "'"
    if pa.types.is_string(column_type) or pa.types.is_large_string(column_type):
        return quoted
    if pa.types.is_date(column_type):
        return f"date {quoted}"
    if pa.types.is_timestamp(column_type):
        return f"timestamp {quoted}"
    if pa.types.is_integer(column_type):
        return str(integer_key(value, column))
    raise InvalidInput(
        f"a partition column is a string, date, timestamp or integer column, not {column_type}"
    )


def bound_value(moment: datetime, column_type: pa.DataType) -> object:
    """A window's bound as a value of a date or timestamp column (see the module docstring)."""
    import pyarrow as pa

    if pa.types.is_date(column_type):
        return moment.date()
    if column_type.tz is None:
        return moment.replace(tzinfo=None)
    return moment.astimezone(timezone.utc)


def window_literal(moment: datetime, column_type: pa.DataType) -> str:
    import pyarrow as pa

    value = bound_value(moment, column_type)
    if pa.types.is_date(column_type):
        return f"date '{value.isoformat()}'"
    return f"timestamp '{value.isoformat(sep=' ' if column_type.tz is None else 'T')}'"


def quote_name(column: str) -> str:
    return "`" + column.replace("`", "``") + "`"
