"""Serve the REST app under uvicorn until SIGINT/SIGTERM (uvicorn's graceful shutdown)."""

from __future__ import annotations

from typing import Any

from lake_platform.settings import LakeSettings


def uvicorn_config(settings: LakeSettings, app: Any, **overrides: Any) -> Any:
    import uvicorn

    options: dict[str, Any] = {
        "host": settings.rest_host,
        "port": settings.rest_port,
        "log_level": "warning",
        "access_log": False,
        "lifespan": "on",
    }
    if settings.rest_tls_cert_file is not None:
        options["ssl_certfile"] = str(settings.rest_tls_cert_file)
        options["ssl_keyfile"] = str(settings.rest_tls_key_file)
    options.update(overrides)
    return uvicorn.Config(app, **options)


def serve(settings: LakeSettings) -> None:
    """Serve until Ctrl-C or SIGTERM."""
    import uvicorn

    from lake_platform.rest.app import build_app
    from lake_platform.rest.server import RestService

    service = RestService(settings)
    try:
        uvicorn.Server(uvicorn_config(settings, build_app(service))).run()
    finally:
        service.close()
