"""botocore sessions that share one parse of botocore's model files per process.

A new session's own data loader parses a service's model, its endpoint rules and the partitions
from disk again: about half a second for each client made from a fresh session (each DynamoDB
registry store, each scoped-credentials STS client). What the loader caches is read-only, so every
session of the process can use one; each session still resolves its own credentials and
configuration.

boto3's ``Session(botocore_session=...)`` is not used on these sessions: it appends boto3's data
path to the loader's search paths, which on a shared loader would grow with every session.
"""

from __future__ import annotations

import functools

import botocore.loaders
import botocore.session


@functools.cache
def _loader(data_path: str | None) -> botocore.loaders.Loader:
    return botocore.loaders.create_loader(data_path)


def botocore_session() -> botocore.session.Session:
    """A new botocore session (the standard credential chain and configuration, resolved for it
    alone) whose data loader is the process's shared one for its data path."""
    session = botocore.session.get_session()
    session.register_component("data_loader", _loader(session.get_config_variable("data_path")))
    return session
