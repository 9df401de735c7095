"""The switch between the compiled loops and numpy's (sanitizerd.native): what each value of SANITIZERD_NATIVE does."""

from __future__ import annotations

import pytest

from sanitizerd import native


def test_reference_mode_loads_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(native.ENVIRONMENT, "0")
    assert native.mode() == "reference"
    assert native.load("_memcheck") is None
    assert not any(native.built().values())


def test_required_mode_refuses_a_missing_module(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(native.ENVIRONMENT, "1")
    with pytest.raises(native.NativeMissing, match="not built"):
        native.load("_no_such_loop")


def test_auto_mode_falls_back_quietly(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(native.ENVIRONMENT, raising=False)
    assert native.mode() == "auto"
    assert native.load("_no_such_loop") is None


@pytest.mark.parametrize("value", ["yes", "2", " 1", "true"])
def test_other_values_are_refused(monkeypatch: pytest.MonkeyPatch, value: str) -> None:
    monkeypatch.setenv(native.ENVIRONMENT, value)
    with pytest.raises(ValueError, match="must be 0 or 1"):
        native.mode()


def test_version_says_which_loops_run_compiled(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(native.ENVIRONMENT, "0")
    assert native.describe() == "hot loops: numpy (SANITIZERD_NATIVE=0)"
    monkeypatch.delenv(native.ENVIRONMENT)
    built = native.built()
    described = native.describe()
    if all(built.values()):
        assert described == "hot loops: compiled"
    else:
        missing = [name.lstrip("_") for name, present in built.items() if not present]
        assert described.endswith("numpy " + ", ".join(missing))
