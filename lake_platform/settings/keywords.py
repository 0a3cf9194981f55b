"""Keyword overrides name settings exactly. Each settings class ignores names it does not know,
because the environment and ``.env`` it reads are shared with other programs (unknown ``LAKE_*``
variables are warned about instead: ``unknown``). A keyword passed in code is not shared: a typo
there (``flight_settings(prot=0)``) would leave the default in force in silence, so it is a
SettingsError naming it.
"""

from __future__ import annotations

import difflib
import inspect
from typing import Any

from pydantic_settings import BaseSettings

from lake_platform.errors import SettingsError

#: What BaseSettings' constructor takes besides settings (``_env_file``, ``_secrets_dir``, ...).
INIT_OPTIONS = frozenset(n for n in inspect.signature(BaseSettings.__init__).parameters if n.startswith("_"))


class KeywordStrictSettings(BaseSettings):
    """A BaseSettings whose constructor refuses a keyword that names none of its settings."""

    def __init__(self, **values: Any) -> None:
        check_keywords(type(self), values)
        super().__init__(**values)


def check_keywords(cls: type[BaseSettings], values: dict[str, Any]) -> None:
    """SettingsError naming each keyword of ``values`` that is neither a setting of ``cls``
    (matched ignoring case, as the class reads them) nor a constructor option, with the
    closest setting when one is close."""
    fields = set(cls.model_fields)
    unknown = sorted(k for k in values if k.lower() not in fields and k not in INIT_OPTIONS)
    if not unknown:
        return
    problems = []
    for name in unknown:
        close = difflib.get_close_matches(name.lower(), fields, n=1, cutoff=0.6)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        problems.append(f"{cls.__name__} has no setting {name!r}{hint}")
    raise SettingsError("bad setting: " + "; ".join(problems))
