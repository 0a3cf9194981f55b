"""``lake conformance URL``: the spec-level conformance kit against any Lance Namespace REST server."""

from __future__ import annotations

import sys
from typing import Any

import click

from lake_platform.cli.app import State, handles_errors, pass_state, text_table

DETAIL_WIDTH = 100


@click.command("conformance")
@click.argument("url")
@click.option(
    "--token",
    envvar="LAKE_CONFORMANCE_TOKEN",
    help="Bearer token sent with every request (or LAKE_CONFORMANCE_TOKEN, which keeps it out of ps).",
)
@click.option(
    "--namespace",
    "prefix",
    default="",
    help="Id the kit may write under, segments joined by $ (ours: PROJECT$WAREHOUSE); default: the root.",
)
@click.option(
    "--timeout",
    type=click.FloatRange(0, min_open=True),
    default=60.0,
    show_default=True,
    help="Seconds to wait for each answer.",
)
@pass_state
@handles_errors
def conformance(state: State, url: str, token: str | None, prefix: str, timeout: float) -> None:
    """Check a Lance Namespace REST server against the spec: every operation's success shape,
    its errors (status, code, body), paging, the delimiter; Unsupported answers are reported as
    "not supported", not as failures. Works in a fresh namespace of its own under --namespace and
    drops it at the end. Exits 1 when a check failed or something was left behind."""
    from lake_platform.conformance.run import run_conformance

    _check_url(url)
    segments = [s for s in prefix.split("$") if s]
    report = run_conformance(url, token=token, prefix=segments, timeout=timeout)
    state.emit(report.to_dict(), _human)
    if not report.ok:
        sys.exit(1)


def _check_url(url: str) -> None:
    """An http(s) URL with a host, refused before any request (the HTTP client would warn about a
    missing scheme, then report the server as unreachable)."""
    from urllib.parse import urlsplit

    from lake_platform.errors import InvalidInput

    parts = urlsplit(url)
    try:
        parts.port  # noqa: B018 - a port beyond 65535 or not a number raises here
    except ValueError:
        parts = parts._replace(scheme="")
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise InvalidInput(f"URL {url}: expected http://HOST[:PORT][/PATH] or https://...")


def _human(data: dict[str, Any]) -> str:
    from lake_platform.conformance.report import summary_line

    rows = [
        {
            "operation": c["operation_id"],
            "check": c["aspect"],
            "result": c["outcome"],
            "detail": c["detail"][:DETAIL_WIDTH],
        }
        for c in data["checks"]
    ]
    return text_table(["operation", "check", "result", "detail"], rows) + "\n" + summary_line(data)


COMMANDS: tuple[click.Command, ...] = (conformance,)
