"""``LAKE_*`` variables no setting reads. Every settings class ignores names it does not know (a
process's environment holds other programs' variables too), so a typo (``LAKE_HOMEE``,
``LAKE_FLIGHT_PROT``) would leave the default in force in silence: the ``lake`` command warns.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from pathlib import Path

from lake_platform.settings.dagster import DAGSTER_ENV_PREFIX, DagsterSettings
from lake_platform.settings.lake import ENV_PREFIX, LakeSettings

FLIGHT_ENV_PREFIX = "LAKE_FLIGHT_"
#: Read by something other than a settings class: `lake conformance`'s --token, the Dagster
#: health check's token (defs/resources), the ECS run launcher's task (infra/ecs/dagster.yaml).
READ_ELSEWHERE = frozenset(
    {"LAKE_CONFORMANCE_TOKEN", "LAKE_FLIGHT_HEALTH_TOKEN", "LAKE_ECS_RUN_TASK_DEFINITION"}
)
#: The test suite's own switches (LAKE_TEST_S3_ENDPOINT, LAKE_MODEL_EXAMPLES, ...).
TEST_PREFIXES = ("LAKE_TEST_", "LAKE_MODEL_")


def known_variables(flight: bool) -> set[str]:
    """Every ``LAKE_*`` name a setting reads; the Flight ones only when ``flight`` (importing
    their class costs every command tens of milliseconds)."""
    known = set(READ_ELSEWHERE)
    known |= {ENV_PREFIX + name.upper() for name in LakeSettings.model_fields}
    known |= {DAGSTER_ENV_PREFIX + name.upper() for name in DagsterSettings.model_fields}
    if flight:
        from lake_platform.settings.flight import FlightSettings

        known |= {FLIGHT_ENV_PREFIX + name.upper() for name in FlightSettings.model_fields}
    return known


def unknown_variables(environ: Mapping[str, str], dotenv: Path = Path(".env")) -> list[str]:
    """One line per ``LAKE_*`` name in ``environ`` or the ``dotenv`` file that no setting reads,
    in name order, with the closest known name when one is close. Names are matched ignoring
    case, as the settings read them."""
    import dotenv as python_dotenv

    found = {name.upper(): "" for name in environ}
    if dotenv.is_file():
        for name in python_dotenv.dotenv_values(dotenv):
            found.setdefault(name.upper(), " (in .env)")
    ours = {
        n: where for n, where in found.items() if n.startswith(ENV_PREFIX) and not n.startswith(TEST_PREFIXES)
    }
    known = known_variables(flight=any(n.startswith(FLIGHT_ENV_PREFIX) for n in ours))
    lines = []
    for name in sorted(set(ours) - known):
        close = difflib.get_close_matches(name, known, n=1, cutoff=0.8)
        hint = f" (did you mean {close[0]}?)" if close else ""
        lines.append(f"{name}{ours[name]}: no such setting{hint}; ignored")
    return lines
