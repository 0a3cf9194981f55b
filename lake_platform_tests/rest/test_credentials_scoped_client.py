"""How scoped storage credentials build their STS client: every client of a process shares one
parse of botocore's model files (lake_platform.aws_session), as the DynamoDB registry's stores
do. A boto3 Session of its own per client parsed them again, about half a second each."""

from __future__ import annotations

from pathlib import Path

from lake_platform.rest.credentials_scoped import ScopedCredentials
from lake_platform.settings import LakeSettings, load_settings
from lake_platform_tests.opened_files import botocore_models_opened


def _settings(tmp_path: Path) -> LakeSettings:
    # Creating a client makes no network call: no STS is needed.
    return load_settings(
        home=tmp_path,
        s3_endpoint="http://127.0.0.1:9",
        s3_access_key_id="key",
        s3_secret_access_key="secret",
        rest_storage_credentials="scoped",
        rest_sts_role_arn="arn:aws:iam::000000000000:role/lake",
    )


def test_a_second_sts_client_reads_no_botocore_model_file_again(tmp_path: Path) -> None:
    settings = _settings(tmp_path)
    ScopedCredentials(settings).client.close()  # the process's first client may load them
    with botocore_models_opened() as models:
        second = ScopedCredentials(settings)
    try:
        assert models == [], f"a second STS client parsed botocore's model files again: {models}"
        assert second.client.meta.service_model.service_name == "sts"
        assert second.client.meta.endpoint_url == "http://127.0.0.1:9"
    finally:
        second.client.close()
