from __future__ import annotations

from pathlib import Path

import pytest

from lake_platform.errors import SettingsError
from lake_platform.settings import LakeSettings, load_settings
from lake_platform.settings.unknown import unknown_variables


def test_defaults_are_embedded(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.chdir(tmp_path)
    for key in ("LAKE_HOME", "LAKE_REGISTRY_URL", "LAKE_WAREHOUSE_ROOT"):
        monkeypatch.delenv(key, raising=False)
    s = load_settings()
    assert s.home == Path(".lake")
    assert s.registry_url == "sqlite:///.lake/registry.db"
    assert s.warehouse_root == ".lake/warehouse"


def test_home_moves_the_defaults(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("LAKE_HOME", str(tmp_path / "h"))
    s = load_settings()
    assert s.registry_url == f"sqlite:///{tmp_path}/h/registry.db"
    assert s.warehouse_root == f"{tmp_path}/h/warehouse"


def test_dotenv_is_read(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("LAKE_ACTOR", raising=False)
    (tmp_path / ".env").write_text("LAKE_ACTOR=from-dotenv\n")
    assert load_settings().actor == "from-dotenv"


@pytest.mark.parametrize(
    ("env", "named"),
    [
        ({"LAKE_LEASE_TTL_SECONDS": "soon"}, "LAKE_LEASE_TTL_SECONDS"),
        ({"LAKE_LEASE_TTL_SECONDS": "-1"}, "LAKE_LEASE_TTL_SECONDS"),
        ({"LAKE_REGISTRY_URL": "postgres://db"}, "LAKE_REGISTRY_URL"),
        ({"LAKE_LEASE_IO_TIMEOUT_SECONDS": "9"}, "LAKE_LEASE_IO_TIMEOUT_SECONDS"),
        ({"LAKE_LEASE_SAFETY_MARGIN_SECONDS": "60"}, "LAKE_LEASE_SAFETY_MARGIN_SECONDS"),
        ({"LAKE_S3_ALLOW_HTTP": "perhaps"}, "LAKE_S3_ALLOW_HTTP"),
        ({"LAKE_LOG_LEVEL": "LOUD"}, "LAKE_LOG_LEVEL"),
        # A malformed endpoint was taken and failed at the first S3 call, far from the setting.
        ({"LAKE_S3_ENDPOINT": "minio:9000"}, "LAKE_S3_ENDPOINT: expected http://HOST"),
        ({"LAKE_S3_ENDPOINT": "http://"}, "LAKE_S3_ENDPOINT: expected http://HOST"),
        # Recorded as the commit log's actor: a line break forged lines in `lake log`'s text.
        ({"LAKE_ACTOR": "ana\n2026-01-01 00:00:00Z  p  drop  root"}, "LAKE_ACTOR: no control characters"),
        ({"LAKE_ACTOR": "ana\x1b[2J"}, "LAKE_ACTOR: no control characters"),
    ],
)
def test_bad_values_name_the_variable(
    monkeypatch: pytest.MonkeyPatch, env: dict[str, str], named: str
) -> None:
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    with pytest.raises(SettingsError, match=named):
        load_settings()


def test_s3_storage_options() -> None:
    s = LakeSettings(
        s3_endpoint="http://127.0.0.1:9000",
        s3_region="us-east-1",
        s3_access_key_id="k",
        s3_secret_access_key="s",
        s3_allow_http=True,
    )
    assert s.storage_options("/local/path") == {}
    assert s.storage_options("s3://b/p") == {
        "aws_endpoint": "http://127.0.0.1:9000",
        "aws_region": "us-east-1",
        "aws_access_key_id": "k",
        "aws_secret_access_key": "s",
        "allow_http": "true",
    }


def test_the_rest_server_vends_no_storage_keys_by_default(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.delenv("LAKE_REST_STORAGE_CREDENTIALS", raising=False)
    assert load_settings(home=tmp_path).rest_storage_credentials == "none"


ROLE = "arn:aws:iam::123456789012:role/lake-tables"
SCOPED = {"rest_storage_credentials": "scoped", "rest_sts_role_arn": ROLE}


@pytest.mark.parametrize(
    ("overrides", "named"),
    [
        ({"rest_storage_credentials": "scoped"}, "LAKE_REST_STS_ROLE_ARN: set it exactly when"),
        ({"rest_sts_role_arn": ROLE}, "LAKE_REST_STS_ROLE_ARN: set it exactly when"),
        ({"rest_sts_endpoint": "https://sts.example"}, "LAKE_REST_STS_ENDPOINT: only used when"),
        (
            {**SCOPED, "rest_sts_duration_seconds": 899},
            "LAKE_REST_STS_DURATION_SECONDS",
        ),
        (
            {**SCOPED, "rest_sts_duration_seconds": 43201},
            "LAKE_REST_STS_DURATION_SECONDS",
        ),
        ({"rest_storage_credentials": "everyone"}, "LAKE_REST_STORAGE_CREDENTIALS"),
    ],
)
def test_scoped_credential_settings_are_checked(
    tmp_path: Path, overrides: dict[str, object], named: str
) -> None:
    with pytest.raises(SettingsError, match=named):
        load_settings(home=tmp_path, **overrides)
    assert load_settings(home=tmp_path, **SCOPED).rest_sts_duration_seconds == 900  # 15 minutes


def test_a_sqlite_url_without_a_path_names_the_variable(tmp_path: Path) -> None:
    """sqlite:/// alone once reached the registry and failed there as INTERNAL IsADirectoryError."""
    with pytest.raises(SettingsError, match="LAKE_REGISTRY_URL: sqlite:/// needs a PATH"):
        load_settings(home=tmp_path, registry_url="sqlite:///")


@pytest.mark.parametrize("tail", ["?mode=ro", "#x"])
def test_a_sqlite_url_takes_no_query_or_fragment(tmp_path: Path, tail: str) -> None:
    """The registry opens the path as written: ``?mode=ro`` became part of a new file's name."""
    with pytest.raises(SettingsError, match="LAKE_REGISTRY_URL: .*no query"):
        load_settings(home=tmp_path, registry_url=f"sqlite:///{tmp_path}/r.db{tail}")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("inbox", ["s3://", "s3://Bad_Bucket/in", "ftp://host/in"])
def test_an_inbox_no_storage_can_open_is_a_settings_error(tmp_path: Path, inbox: str) -> None:
    """Checked as the inbox resource's own location is; before, LAKE_INBOX was taken as given
    and every sensor tick failed with the storage client's error."""
    with pytest.raises(SettingsError, match="LAKE_INBOX: .*s3://bucket/prefix"):
        load_settings(home=tmp_path, inbox=inbox)
    assert (
        load_settings(home=tmp_path, inbox="s3://landing-zone/in").inbox_location() == "s3://landing-zone/in"
    )


def test_unknown_lake_variables_are_named_with_the_closest_setting(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A typo in a LAKE_* name is otherwise ignored in silence and the default used."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / ".env").write_text("LAKE_ACTR=from-dotenv\nLAKE_ACTOR=ok\n")
    environ = {
        "LAKE_HOMEE": "/x",
        "LAKE_HOME": "/y",
        "lake_flight_prot": "1",
        "LAKE_FLIGHT_PORT": "2",
        "LAKE_DAGSTER_EXECUTER": "multiprocess",
        "LAKE_NOTHING_LIKE_IT": "1",
        "LAKE_CONFORMANCE_TOKEN": "t",  # read by `lake conformance`'s option
        "LAKE_FLIGHT_HEALTH_TOKEN": "t",  # read by the Dagster health check
        "LAKE_ECS_RUN_TASK_DEFINITION": "arn",  # read by infra/ecs/dagster.yaml
        "LAKE_TEST_S3_ENDPOINT": "http://x",  # the test suite's own
        "OTHER": "1",
    }
    assert unknown_variables(environ) == [
        "LAKE_ACTR (in .env): no such setting (did you mean LAKE_ACTOR?); ignored",
        "LAKE_DAGSTER_EXECUTER: no such setting (did you mean LAKE_DAGSTER_EXECUTOR?); ignored",
        "LAKE_FLIGHT_PROT: no such setting (did you mean LAKE_FLIGHT_PORT?); ignored",
        "LAKE_HOMEE: no such setting (did you mean LAKE_HOME?); ignored",
        "LAKE_NOTHING_LIKE_IT: no such setting; ignored",
    ]
    (tmp_path / ".env").unlink()
    assert (
        unknown_variables({"LAKE_HOME": "/y", "LAKE_FLIGHT_PORT": "1", "LAKE_DAGSTER_EXECUTOR": "ecs"}) == []
    )


def test_the_inbox_settle_time_is_a_setting(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """How long a landed file must be left alone before the sensor takes it: an operator whose
    producers copy slowly onto a network folder raises it (it was fixed at 1 s in the code)."""
    monkeypatch.delenv("LAKE_INBOX_SETTLE_SECONDS", raising=False)
    assert load_settings(home=tmp_path).inbox_settle_seconds == 1.0
    monkeypatch.setenv("LAKE_INBOX_SETTLE_SECONDS", "30")
    assert load_settings(home=tmp_path).inbox_settle_seconds == 30.0
    monkeypatch.setenv("LAKE_INBOX_SETTLE_SECONDS", "-1")
    with pytest.raises(
        SettingsError, match="LAKE_INBOX_SETTLE_SECONDS: Input should be greater than or equal to 0"
    ):
        load_settings(home=tmp_path)


def test_a_misspelled_keyword_override_is_a_settings_error_naming_it(tmp_path: Path) -> None:
    """A keyword passed in code that names no setting would leave the default in force in
    silence (the classes ignore unknown names for the environment's sake)."""
    from lake_platform.settings import dagster_settings
    from lake_platform.settings.flight import flight_settings

    with pytest.raises(SettingsError, match="LakeSettings has no setting 'hom' \\(did you mean 'home'\\?\\)"):
        load_settings(hom=tmp_path)
    with pytest.raises(
        SettingsError, match="FlightSettings has no setting 'prot' \\(did you mean 'port'\\?\\)"
    ):
        flight_settings(prot=0)
    with pytest.raises(SettingsError, match="DagsterSettings has no setting 'executer'"):
        dagster_settings(executer="multiprocess")
    with pytest.raises(SettingsError, match="'_env_flie'.*'colour'"):  # every one, in name order
        LakeSettings(home=tmp_path, colour="blue", _env_flie=None)  # type: ignore[call-arg]


def test_keywords_stay_strict_and_the_environment_lenient(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Unknown LAKE_* variables and .env entries are still only warned about (unknown.py): the
    process's environment is shared with other programs. Keyword overrides match as the class
    reads them (case-insensitively) and pydantic-settings' own init options pass."""
    from lake_platform.settings.flight import flight_settings

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("LAKE_FLIGHT_COLOUR", "blue")
    monkeypatch.setenv("LAKE_HOMEE", "typo")
    (tmp_path / ".env").write_text("LAKE_NOT_A_SETTING=1\nOTHER_PROGRAM=2\nLAKE_ACTOR=from-dotenv\n")
    settings = load_settings(HOME=tmp_path / "h")
    assert settings.home == tmp_path / "h" and settings.actor == "from-dotenv"
    assert flight_settings(settings, port=0).port == 0
    assert LakeSettings(home=tmp_path, _env_file=None).actor != "from-dotenv"  # type: ignore[call-arg]
