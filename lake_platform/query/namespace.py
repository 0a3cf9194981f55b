"""A read-only Lance namespace answering from one captured :class:`TableRef`.

Lance resolves a version through its namespace client (``describe_table`` then
``describe_table_version``); answering from the ref means opening a table for a query reads no
registry at all, and a ticket's pinned version opens exactly as planned, on any replica.
"""

from __future__ import annotations

from typing import Any

import lance_namespace.errors as ns_errors
from lance_namespace import LanceNamespace
from lance_namespace_urllib3_client.models import (
    DescribeTableResponse,
    DescribeTableVersionResponse,
    ListTableVersionsResponse,
    TableVersion,
)

from lake_platform.catalog.namespace import request_field
from lake_platform.query.snapshot import TableRef


class PinnedNamespace(LanceNamespace):
    def __init__(self, ref: TableRef, storage_options: dict[str, str] | None = None) -> None:
        self.ref = ref
        self.parts = ref.table_name.parts
        self.storage_options = storage_options or None

    def namespace_id(self) -> str:
        return f"lake-pinned:{self.ref.incarnation}:{self.ref.version}"

    def _check(self, request: Any) -> None:
        table_id = request_field(request, "id")
        if table_id is not None and list(table_id) != self.parts:
            raise ns_errors.TableNotFoundError(f"this handle serves {self.ref.name} only")

    def describe_table(self, request: Any) -> DescribeTableResponse:
        self._check(request)
        version = request_field(request, "version")
        if version is not None and int(version) != self.ref.version:
            raise ns_errors.TableVersionNotFoundError(
                f"{self.ref.name} is pinned at version {self.ref.version}"
            )
        return DescribeTableResponse(
            location=self.ref.location,
            managed_versioning=True,
            version=self.ref.version,
            storage_options=self.storage_options,
        )

    def describe_table_version(self, request: Any) -> DescribeTableVersionResponse:
        self._check(request)
        version = request_field(request, "version")
        if version is not None and int(version) != self.ref.version:
            raise ns_errors.TableVersionNotFoundError(
                f"{self.ref.name} is pinned at version {self.ref.version}"
            )
        return DescribeTableVersionResponse(version=self._version())

    def list_table_versions(self, request: Any) -> ListTableVersionsResponse:
        self._check(request)
        return ListTableVersionsResponse(versions=[self._version()])

    def _version(self) -> TableVersion:
        return TableVersion(
            version=self.ref.version,
            manifest_path=self.ref.manifest_path,
            manifest_size=self.ref.manifest_size,
            e_tag=self.ref.e_tag,
            timestamp_millis=self.ref.committed_at_ms,
        )
