"""One `lake up` per LAKE_HOME: the lock a killed or stopped run held is not in the way of the
next. That a second `lake up` on a running one's home, on other ports, is refused before it starts
anything is checked on the platform test_launcher_start's JSON test starts
(``a_second_lake_up_on_the_home_is_refused``): one start of the four servers less."""

from __future__ import annotations

import os
from pathlib import Path

import pytest


def test_the_lock_of_a_run_that_ended_is_not_in_the_way(tmp_path: Path) -> None:
    """The kernel drops the lock with its holder (a kill -9 included): the file that stays
    behind, naming a pid that is gone, locks nothing."""
    from lake_platform.errors import ServiceUnavailable
    from lake_platform.up.home_lock import lock_home

    held = lock_home(tmp_path)
    with pytest.raises(ServiceUnavailable, match=f"another `lake up` \\(pid {os.getpid()}\\)"):
        lock_home(tmp_path)
    held.release()
    (tmp_path / "up.lock").write_text("999999999\n")  # a dead run's
    lock_home(tmp_path).release()
    assert oct((tmp_path / "up.lock").stat().st_mode & 0o777) == "0o600"
