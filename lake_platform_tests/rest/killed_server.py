"""A REST server process that is SIGKILLed at a catalog hook point (``python -m
lake_platform_tests.rest.killed_server HOME PORT POINT``): at ``append:before-finalize`` a
client's commit has landed in the registry and its answer is not sent yet, the window in which
a client cannot know its outcome. Prints ``ready`` once it listens."""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path

from lake_platform.catalog.catalog import Catalog
from lake_platform.rest.app import build_app
from lake_platform.rest.server import RestService
from lake_platform.settings import load_settings
from lake_platform_tests.rest.conftest import ServerThread


def main(home: str, port: str, point: str) -> None:
    settings = load_settings(home=Path(home), rest_port=int(port))

    def hook(at: str) -> None:
        if at == point:
            os.kill(os.getpid(), signal.SIGKILL)

    catalog = Catalog(settings, hook=hook)
    server = ServerThread(settings, build_app(RestService(settings, catalog=catalog)))
    server.start()
    print("ready", flush=True)
    server.thread.join()


if __name__ == "__main__":
    main(*sys.argv[1:])
