"""The check registry: each check is one aspect of one operation.

Checks build on each other's state (the table CreateTable made is the one DescribeTable reads),
so they run in the scenario's order: module by module as ``run.CHECK_MODULES`` lists them, and
within a module in registration order. A check passes by returning; it says why not by raising
one of the outcomes below."""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from lake_platform.conformance.client import NamespaceClient


class Outcome(enum.StrEnum):
    PASS = "pass"
    FAIL = "fail"
    UNSUPPORTED = "not supported"  # the server answered the spec's Unsupported (code 0)
    SKIPPED = "skipped"  # a prerequisite failed or is not supported


class CheckFailed(Exception):
    """The server's answer breaks the spec."""


class NotSupported(Exception):
    """The server answered the spec's Unsupported error for the operation."""


class Skipped(Exception):
    """The check cannot run here: a prerequisite is missing."""


@dataclass
class Kit:
    """What checks share: the client, the ids the kit owns, and what earlier checks made."""

    client: NamespaceClient
    namespace: list[str]  # the kit's own throwaway namespace (prefix + a fresh name)
    state: dict[str, Any] = field(default_factory=dict)
    has_token: bool = False

    def child(self, *names: str) -> list[str]:
        return [*self.namespace, *names]

    @property
    def table(self) -> list[str]:
        return self.child("t")

    def need(self, key: str, what: str) -> Any:
        """State an earlier check left, or Skipped naming what is missing."""
        if key not in self.state:
            raise Skipped(f"needs {what}")
        return self.state[key]


@contextmanager
def prerequisite(what: str) -> Iterator[None]:
    """Calls a check makes to set itself up: their failure or Unsupported skips the check (it is
    reported where that operation is checked), rather than being charged to it."""
    try:
        yield
    except (CheckFailed, NotSupported) as exc:
        raise Skipped(f"needs {what}: {exc}") from exc


CheckFn = Callable[[Kit], None]


@dataclass(frozen=True)
class Check:
    operation_id: str
    aspect: str  # "success", an error name ("TableNotFound"), "pagination", "delimiter"
    fn: CheckFn

    @property
    def module(self) -> str:
        return self.fn.__module__

    @property
    def name(self) -> str:
        return f"{self.operation_id}:{self.aspect}"


CHECKS: list[Check] = []


def check(operation_id: str, aspect: str) -> Callable[[CheckFn], CheckFn]:
    """Register ``fn`` as the check of ``aspect`` of ``operation_id``."""

    def register(fn: CheckFn) -> CheckFn:
        CHECKS.append(Check(operation_id, aspect, fn))
        return fn

    return register
