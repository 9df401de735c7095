"""The detectors by name. Each detector module registers its class here as it is imported; the package's __init__
imports them all, so this module sits below them and none of them imports the package (issue 27: no circle)."""

from __future__ import annotations

from collections.abc import Callable

from sanitizerd.detectors.base import Detector, SessionContext

DETECTORS: dict[str, Callable[[SessionContext], Detector]] = {}


def register(name: str) -> Callable[[type], type]:
    def add(cls: type) -> type:
        if name in DETECTORS:
            raise ValueError(f"detector {name!r} registered twice")
        cls.name = name  # type: ignore[attr-defined]
        DETECTORS[name] = cls
        return cls

    return add


__all__ = ["DETECTORS", "register"]
