"""How a DynamoDB store builds its botocore client: every store of a process shares one parse of
botocore's DynamoDB model files (the service model, the endpoint rules). A session of its own per
store parsed them again, about half a second for every Catalog, CLI command and worker."""

from __future__ import annotations

from lake_platform.registry.dynamodb import DynamoMetaStore
from lake_platform_tests.opened_files import botocore_models_opened


def _store() -> DynamoMetaStore:
    # Creating a client makes no network call: no server is needed.
    return DynamoMetaStore("lake-client-test", region="us-east-1", endpoint_url="http://127.0.0.1:9")


def test_a_second_store_reads_no_botocore_model_file_again() -> None:
    _store().close()  # the process's first store may load them
    with botocore_models_opened() as models:
        second = _store()
    try:
        assert models == [], f"a second store parsed botocore's model files again: {models}"
        assert second.client.meta.service_model.service_name == "dynamodb"
    finally:
        second.close()
