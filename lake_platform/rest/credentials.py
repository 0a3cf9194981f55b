"""Which S3 keys the REST server hands a client with a table's location.

A Lance client reads and writes a table's files itself, so ``DescribeTable``/``DeclareTable``
answer the storage options it needs. What they carry is the operator's choice
(``LAKE_REST_STORAGE_CREDENTIALS``):

- ``none`` (the default): no keys (endpoint, region and the like stay): each client brings its
  own, e.g. an IAM role per team.
- ``scoped``: per table, short-lived STS keys that reach only that table's prefix: read-only for
  a principal that may only read, and for a writer everything but the published manifests, so
  only the registry's commit path publishes versions (``credentials_scoped.py``).
- ``server``: the server's own keys, as the in-process namespace uses them. Every principal of
  a project, readers included, receives them, and with them every table's files: the server
  logs a WARNING when it starts in this mode.
- ``file``: per project, from ``LAKE_REST_CREDENTIALS_FILE``::

      {"projects": {"sales": {"read":  {"access_key_id": "…", "secret_access_key": "…"},
                              "write": {"access_key_id": "…", "secret_access_key": "…"}}}}

  A principal that may write to the table's project receives its ``write`` pair, any other its
  ``read`` pair (a writer of a project without a ``write`` pair gets the ``read`` pair); a
  project missing from the file, or without the pair asked for, gets no keys. Scope each pair on
  the storage side (a bucket or prefix per project; read-only for ``read``): then a reader cannot
  write around the registry, and no project's keys reach another project's data.

Only S3 locations carry keys; a local location has none to hand out. The file is read once,
when the server starts; a bad file stops the start with a ``SettingsError`` naming the problem.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from lake_platform.catalog.principals import Principal
from lake_platform.errors import SettingsError
from lake_platform.naming import check_segment
from lake_platform.rest.credentials_scoped import ScopedCredentials
from lake_platform.settings import LakeSettings

log = logging.getLogger(__name__)

#: Storage-option keys that are secrets (object_store's names for the S3 key pair and session).
SECRET_KEYS = frozenset({"aws_access_key_id", "aws_secret_access_key", "aws_session_token"})


class KeyPair(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    access_key_id: str = Field(min_length=1)
    secret_access_key: str = Field(min_length=1)


class ProjectKeys(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    read: KeyPair | None = None
    write: KeyPair | None = None


class CredentialsFile(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    projects: dict[str, ProjectKeys]


def load_credentials_file(path: Path) -> CredentialsFile:
    """The file, checked: JSON of the documented shape, project names that are project names."""
    where = f"rest_credentials_file {path}"
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise SettingsError(f"{where}: cannot read it: {exc.strerror or exc}") from None
    try:
        loaded = CredentialsFile.model_validate(json.loads(raw))
    except ValidationError as exc:
        first = exc.errors()[0]
        at = ".".join(str(p) for p in first["loc"])
        raise SettingsError(f"{where}: {at}: {first['msg']}") from None
    except ValueError as exc:  # json.JSONDecodeError, and text that is not UTF-8
        raise SettingsError(f"{where}: not JSON: {exc}") from None
    for project in loaded.projects:
        try:
            check_segment(project)
        except Exception as exc:  # noqa: BLE001 - the naming error's text, in this file's terms
            raise SettingsError(f"{where}: {project!r} is not a project name: {exc}") from None
    return loaded


class StorageCredentials:
    """The storage options a principal receives for a location (``LAKE_REST_STORAGE_CREDENTIALS``)."""

    def __init__(self, settings: LakeSettings) -> None:
        self.settings = settings
        self.mode = settings.rest_storage_credentials
        self.keys: CredentialsFile | None = None
        self.scoped: ScopedCredentials | None = None
        if self.mode == "file":
            assert settings.rest_credentials_file is not None  # the settings check it
            self.keys = load_credentials_file(settings.rest_credentials_file)
        elif self.mode == "scoped":
            self.scoped = ScopedCredentials(settings)
        elif self.mode == "server":
            log.warning(
                "LAKE_REST_STORAGE_CREDENTIALS=server: every principal receives the server's own S3 "
                "keys with a table's location, so readers can write any table's files and writers "
                "can publish manifests the registry never committed; prefer scoped or none"
            )

    def options_for(self, principal: Principal, project: str, location: str) -> dict[str, str] | None:
        options = self.settings.storage_options(location)
        if self.mode == "server" or not location.startswith("s3://"):
            return options or None
        keyless = {k: v for k, v in options.items() if k not in SECRET_KEYS}
        if self.scoped is not None and principal.can(project, "read"):
            write = principal.can(project, "write")
            keyless.update(self.scoped.keys_for(principal, location, write=write))
            return keyless
        pair = self._pair(principal, project)
        if pair is not None:
            keyless["aws_access_key_id"] = pair.access_key_id
            keyless["aws_secret_access_key"] = pair.secret_access_key
        return keyless or None

    def _pair(self, principal: Principal, project: str) -> KeyPair | None:
        if self.keys is None or not principal.can(project, "read"):
            return None
        found = self.keys.projects.get(project)
        if found is None:
            return None
        if principal.can(project, "write") and found.write is not None:
            return found.write
        return found.read
