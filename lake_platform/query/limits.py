"""The limits one query engine enforces, and the names its error messages give them.

The query layer does not know where its limits come from: whoever configures it (the Flight
endpoint, from its own settings) passes ``labels``, the name an operator knows each limit by, so
that a message such as "the result is larger than <setting>=20000" names the setting to change.
Without a label a limit is named by its field.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lake_platform.settings.cache_defaults import DEFAULT_RESULT_CACHE_BYTES, default_cache_bytes
from lake_platform.settings.flight import DEFAULT_QUERY_TIMEOUT, ENV_PREFIX, FlightSettings
from lake_platform.settings.lake import LakeSettings


@dataclass(frozen=True)
class QueryLimits:
    memory_limit_bytes: int = 1 << 30  # the whole process's DataFusion pool (fair, spilling)
    spill_dir: Path | None = None
    batch_size: int = 8192
    target_partitions: int = 0
    max_sql_bytes: int = 256 * 1024
    max_message_bytes: int = 8 << 20
    dataset_cache_size: int = 256  # table providers kept, one per exact snapshot
    max_result_bytes: int = 0  # 0 = no limit
    max_value_bytes: int = 64 << 20  # what repeat, lpad, rpad may build for one batch (``capped``)
    max_join_pairs: int = 10**8  # a keyless join's pairs times their cost in comparisons (``join_bounds``)
    max_relations: int = 128  # relations one query may combine, before optimizing (``relations``)
    query_timeout_seconds: float = DEFAULT_QUERY_TIMEOUT  # 0 = no limit (planning and streaming each)
    spill_compression: str = "lz4_frame"  # uncompressed, lz4_frame or zstd
    session_pool_size: int = 16  # idle DataFusion contexts kept for reuse (0: a new one per request)
    cache_bytes: int = 0  # the snapshot cache's budget (decoded Arrow bytes held; 0: no cache)
    cache_admit_after: int = 3  # plannings of one snapshot before a cache=auto table is loaded
    plan_cache_size: int = 256  # GetFlightInfo plans kept for the same replica's DoGet (0: none)
    result_cache_bytes: int = 0  # the result cache's budget (buffers of kept results; 0: none)
    result_cache_entry_bytes: int = 4 << 20  # the largest result the result cache keeps
    #: field name -> the name error messages give the limit (the setting that configures it)
    labels: Mapping[str, str] = field(default_factory=dict, compare=False, hash=False)

    def label(self, name: str) -> str:
        """What an error message calls limit ``name`` (a field of this class)."""
        return self.labels.get(name, name)

    def named(self, name: str) -> str:
        """``label=value`` of limit ``name``, as error messages quote it."""
        value = getattr(self, name)
        return f"{self.label(name)}={value:g}" if isinstance(value, float) else f"{self.label(name)}={value}"


def limits_from(flight: FlightSettings, lake: LakeSettings) -> QueryLimits:
    """The query engine's limits that ``flight`` sets, each labelled with the setting that sets it
    (error messages name the environment variable, not a field of the query layer)."""
    names = [f.name for f in dataclasses.fields(QueryLimits) if f.name in type(flight).model_fields]
    values: dict[str, Any] = {name: getattr(flight, name) for name in names}
    values["spill_dir"] = flight.spill_path(lake)
    if flight.cache_bytes is None:
        values["cache_bytes"] = default_cache_bytes(flight.memory_limit_bytes)
    if flight.result_cache_bytes is None:
        values["result_cache_bytes"] = min(DEFAULT_RESULT_CACHE_BYTES, flight.memory_limit_bytes // 16)
    return QueryLimits(**values, labels={name: f"{ENV_PREFIX}{name.upper()}" for name in names})


__all__ = ["DEFAULT_QUERY_TIMEOUT", "QueryLimits", "limits_from"]
