"""A client's namespace that stages a commit without sending it: the CreateTableVersion body
pylance would send, for a test to send by hand (in a batch, or again as a resend would)."""

from __future__ import annotations

from typing import Any

from lance_namespace import LanceNamespace
from lance_namespace.errors import TableVersionNotFoundError


class StagingOnly(LanceNamespace):
    """Asks the server everything but keeps its CreateTableVersion request instead of sending it."""

    def __init__(self, inner: LanceNamespace) -> None:
        self.inner = inner
        self.staged: dict[str, Any] | None = None

    def namespace_id(self) -> str:
        return "staging-only"

    def describe_table(self, request: Any) -> Any:
        return self.inner.describe_table(request)

    def list_table_versions(self, request: Any) -> Any:
        return self.inner.list_table_versions(request)

    def describe_table_version(self, request: Any) -> Any:
        # After the kept commit, Lance asks whether the version it staged landed, a few times
        # with a pause between: it did not, as this client knows without asking the server.
        if self.staged is not None and _field(request, "version") == self.staged.get("version"):
            raise TableVersionNotFoundError(f"version {self.staged.get('version')} was kept, not sent")
        return self.inner.describe_table_version(request)

    def create_table_version(self, request: Any) -> Any:
        self.staged = dict(request) if isinstance(request, dict) else request.to_dict()
        raise RuntimeError("kept, not sent")


def _field(request: Any, name: str) -> Any:
    return request.get(name) if isinstance(request, dict) else getattr(request, name, None)
