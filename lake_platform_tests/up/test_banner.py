"""What `lake up` prints once every server answers (the real output: test_launcher.py)."""

from __future__ import annotations

from dataclasses import dataclass, field

from lake_platform.up.banner import started_text


@dataclass
class Started:
    ui_url: str = "http://127.0.0.1:3000"
    flight_address: str = "127.0.0.1:50051"
    rest_address: str = "127.0.0.1:2333"
    metrics_urls: tuple[str, ...] = ()
    inbox: str = "/lake/inbox"
    demo_table: str = "demo.main.sales.orders"
    seeded: list[str] = field(default_factory=list)
    demo_user: tuple[str, str] = ("", "")


def test_addresses_come_first_then_the_next_steps() -> None:
    lines = started_text(Started()).splitlines()
    assert lines[:5] == [
        "Dagster UI     http://127.0.0.1:3000",
        "Flight SQL     grpc://127.0.0.1:50051",
        "Lance REST     http://127.0.0.1:2333 (Lance Namespace spec; see docs/rest.md)",
        "inbox          /lake/inbox",
        "demo table     demo.main.sales.orders",
    ]
    assert lines[6] == "Next steps:" and lines[-1] == "  Ctrl-C stops everything started here."
    assert not any("flight_sql.connect" in line or line.startswith("seeded") for line in lines)


def test_metrics_seeded_files_and_the_demo_readers_query_when_there_are_some() -> None:
    text = started_text(
        Started(
            metrics_urls=("http://127.0.0.1:9464/metrics", "http://127.0.0.1:9465/metrics"),
            seeded=["a.parquet", "b.csv"],
            demo_user=("demo", "secret"),
        )
    )
    assert "metrics        http://127.0.0.1:9464/metrics (Flight)\n" in text
    assert "metrics        http://127.0.0.1:9465/metrics (REST)\n" in text
    assert "seeded         2 sample file(s)" in text
    assert "flight_sql.connect('grpc://127.0.0.1:50051'," in text
    assert "db_kwargs={'username': 'demo', 'password': 'secret'}" in text
