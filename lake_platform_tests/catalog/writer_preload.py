"""Imported once by the kill writers' forkserver (``faults.writer_processes``) before it forks
any writer: botocore's DynamoDB model, endpoint rules and partitions parsed into the process's
shared loader (``lake_platform.aws_session``), so a writer on a DynamoDB registry makes its
client from them. Each writer parsed them itself: 1.5-2.5 s of a kill on a loaded 2-core machine.

Making a client starts no thread and makes no network call (placeholder credentials, no
request), so forking after it stays safe; the writers make their own clients."""

from __future__ import annotations

from lake_platform.aws_session import botocore_session

botocore_session().create_client(
    "dynamodb", region_name="us-east-1", aws_access_key_id="preload", aws_secret_access_key="preload"
).close()
