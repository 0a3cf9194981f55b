"""Flight SQL spooling into a results area on an 8 MiB tmpfs (run by
``engine/small_disk.run_on_tmpfs``): a result larger than the disk, then one that fits, twice,
on one server. Prints what a client and the process saw.

``python -m lake_platform_tests.flight.spool_full_disk_probe TMP RESULTS``
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.flight as fl

from lake_platform_tests.engine.small_disk import free_fraction, open_deleted_files
from lake_platform_tests.flight.conftest import build_catalog, login, plan, serving

ROWS = 60_000  # about 13 MB of Arrow IPC: more than the disk
FITS = 10_000


def table() -> pa.Table:
    ids = list(range(ROWS))
    return pa.table({"id": pa.array(ids, pa.int64()), "pad": [f"{i:0200d}" for i in ids]})


def spool(server: Any, sql: str, results: Path) -> dict[str, Any]:
    client, options = login(f"grpc://127.0.0.1:{server.port}")
    asking = fl.FlightCallOptions(headers=[*options.headers, (b"x-lake-spool", b"true")])
    seen: dict[str, Any] = {}
    try:
        info = plan(client, asking, sql)
        seen["rows"] = sum(client.do_get(e.ticket, options).read_all().num_rows for e in info.endpoints)
        seen["job"] = _job(server)
    except pa.ArrowException as exc:
        seen["error"] = str(exc)
    seen.update(
        open_deleted=open_deleted_files(results),
        free=free_fraction(results),
        jobs_left=sorted(p.name for p in results.glob("p/*")),
    )
    return seen


def _job(server: Any) -> str:
    [job] = [p.name for p in Path(server.spooler.area.base).glob("p/*")]
    return job


def main(tmp: Path, results: Path) -> None:
    settings, catalog = build_catalog(tmp / "home", results_root=str(results))
    catalog.tables.create_table("p.w.ns.big", table().to_reader())
    with serving(settings, catalog, spool_segment_bytes=1 << 20) as server:
        steps = []
        for _ in range(2):
            steps.append(spool(server, "SELECT id, pad FROM w.ns.big", results))
            fits = spool(server, f"SELECT id, pad FROM w.ns.big WHERE id < {FITS}", results)
            steps.append(fits)
            if "job" in fits:  # done with it: the next big one starts on an empty disk again
                server.spooler.area.remove_job("p", fits["job"])
    catalog.close()
    print(json.dumps({"steps": steps}))


if __name__ == "__main__":
    main(Path(sys.argv[1]), Path(sys.argv[2]))
