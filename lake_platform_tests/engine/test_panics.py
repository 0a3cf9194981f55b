"""A Lance panic leaves the engine as ``EnginePanic`` (an ``Exception``); everything else, the
interrupts included, leaves it as it came."""

from __future__ import annotations

from pathlib import Path

import lance
import pytest

from lake_platform.engine.panics import EnginePanic, engine_call, is_error, is_panic
from lake_platform_tests.engine.helpers import PANICS


def test_a_lance_panic_becomes_an_engine_panic(tmp_path: Path) -> None:
    with pytest.raises(EnginePanic, match="^Lance panicked: ") as caught:
        engine_call(lance.write_dataset)(PANICS, tmp_path / "t")
    assert is_panic(caught.value.__cause__) and not isinstance(caught.value.__cause__, Exception)
    assert is_error(caught.value.__cause__)  # a handler answers it, as it answers any Exception


@pytest.mark.parametrize("error", [KeyboardInterrupt(), SystemExit(3), ValueError("bad"), OSError("io")])
def test_other_errors_pass_as_they_are(error: BaseException) -> None:
    def fails() -> None:
        raise error

    with pytest.raises(type(error)) as caught:
        engine_call(fails)()
    assert caught.value is error and not is_panic(error)
    assert is_error(error) == isinstance(error, Exception)  # interrupts pass on, unanswered


def test_results_pass_through() -> None:
    assert engine_call(lambda a, *, b: a + b)(1, b=2) == 3
