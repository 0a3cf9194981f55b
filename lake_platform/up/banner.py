"""What ``lake up`` prints once every server answers: where each one is, and what to do next."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Protocol


class Started(Protocol):
    """What the text names of a started platform (``launcher.Platform``)."""

    ui_url: str
    flight_address: str
    rest_address: str
    metrics_urls: tuple[str, ...]
    inbox: str
    demo_table: str
    seeded: list[str]
    demo_user: tuple[str, str]


def started_record(platform: Started, home: Path) -> dict[str, Any]:
    """What ``lake --json up`` prints once every server answers: the text's addresses as URLs,
    the inbox, the demo table and reader (``null`` when the demo was not seeded). Its field
    names are a stable interface, like every command's --json output."""
    user, password = platform.demo_user
    return {
        "home": str(home),
        "ui_url": platform.ui_url,
        "flight_url": f"grpc://{platform.flight_address}",
        "rest_url": f"http://{platform.rest_address}",
        "metrics_urls": list(platform.metrics_urls),
        "inbox": platform.inbox,
        "demo_table": platform.demo_table,
        "seeded_files": list(platform.seeded),
        "demo_user": {"name": user, "password": password} if user else None,
    }


def started_text(platform: Started) -> str:
    """The addresses, the inbox and the demo table, then the next steps (with a Flight SQL
    query as the demo reader, when the demo was seeded)."""
    lines = [
        f"Dagster UI     {platform.ui_url}",
        f"Flight SQL     grpc://{platform.flight_address}",
        f"Lance REST     http://{platform.rest_address} (Lance Namespace spec; see docs/rest.md)",
    ]
    for label, metrics_url in zip(("Flight", "REST"), platform.metrics_urls, strict=False):
        lines.append(f"metrics        {metrics_url} ({label})")
    lines += [f"inbox          {platform.inbox}", f"demo table     {platform.demo_table}"]
    if platform.seeded:
        lines.append(
            f"seeded         {len(platform.seeded)} sample file(s); the inbox sensor ingests them "
            "within a minute"
        )
    lines += [
        "",
        "Next steps:",
        f"  open {platform.ui_url}/assets to see the lake assets and their runs",
        "  drop .parquet/.csv/.jsonl/.arrow files into "
        f"{platform.inbox}/<project>/<warehouse>/<namespace>/<table>/",
        f"  .venv/bin/lake table history {platform.demo_table}",
    ]
    user, password = platform.demo_user
    if user:
        lines += [
            "",
            f"Query it over Flight SQL (ADBC; user {user!r}, a reader in project 'demo'):",
            "  .venv/bin/python - <<'EOF'",
            "  import adbc_driver_flightsql.dbapi as flight_sql",
            f"  conn = flight_sql.connect('grpc://{platform.flight_address}',",
            f"                            db_kwargs={{'username': '{user}', 'password': '{password}'}})",
            "  cur = conn.cursor()",
            "  cur.execute('SELECT region, count(*) AS orders, sum(amount) AS total FROM "
            "main.sales.orders GROUP BY region')",
            "  print(cur.fetch_arrow_table())",
            "  EOF",
        ]
    lines.append("  Ctrl-C stops everything started here.")
    return "\n".join(lines)
