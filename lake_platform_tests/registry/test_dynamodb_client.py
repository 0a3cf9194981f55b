"""How a DynamoDB store builds its botocore client: every store of a process shares one parse of
botocore's DynamoDB model files (the service model, the endpoint rules). A session of its own per
store parsed them again, about half a second for every Catalog, CLI command and worker.

The files opened are seen through a Python audit hook (``sys.addaudithook``, the ``open``
event): nothing of botocore or the store is replaced."""

from __future__ import annotations

import os
import sys

from lake_platform.registry.dynamodb import DynamoMetaStore

#: The files opened while ``_watching`` is set; an audit hook cannot be removed, so it stays
#: installed, and idle, for the rest of the process.
_opened: list[str] = []
_watching: list[bool] = []


def _audit(event: str, args: tuple[object, ...]) -> None:
    if _watching and event == "open" and isinstance(args[0], str):
        _opened.append(args[0])


sys.addaudithook(_audit)


def _store() -> DynamoMetaStore:
    # Creating a client makes no network call: no server is needed.
    return DynamoMetaStore("lake-client-test", region="us-east-1", endpoint_url="http://127.0.0.1:9")


def test_a_second_store_reads_no_botocore_model_file_again() -> None:
    _store().close()  # the process's first store may load them
    _opened.clear()
    _watching.append(True)
    try:
        second = _store()
    finally:
        _watching.clear()
    try:
        models = [p for p in _opened if os.path.join("botocore", "data") in p]
        assert models == [], f"a second store parsed botocore's model files again: {models}"
        assert second.client.meta.service_model.service_name == "dynamodb"
    finally:
        second.close()
