"""All settings, in one place, each class reading its own prefix from the environment and ``.env``:

- ``lake``: ``LakeSettings`` (``LAKE_*``), the platform's own;
- ``dagster``: ``DagsterSettings`` (``LAKE_DAGSTER_*``), how Dagster runs the platform's work;
- ``flight``: ``FlightSettings`` (``LAKE_FLIGHT_*``), the serving endpoints: Flight SQL, and the
  sealing keys, logins and query limits the REST server shares with it.

A bad value fails at start with a :class:`~lake_platform.errors.SettingsError` naming the variable.
``flight`` is not imported here: commands that never serve do not pay for it.
"""

from lake_platform.settings.dagster import DAGSTER_ENV_PREFIX, DagsterSettings, dagster_settings
from lake_platform.settings.lake import ENV_PREFIX, LakeSettings, load_settings, settings_error

__all__ = [
    "DAGSTER_ENV_PREFIX",
    "ENV_PREFIX",
    "DagsterSettings",
    "LakeSettings",
    "dagster_settings",
    "load_settings",
    "settings_error",
]
