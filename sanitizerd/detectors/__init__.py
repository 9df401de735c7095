"""Detectors, registered by name. A session creates the ones its configuration enables.

To add one: write a module with a class satisfying ``base.Detector``, decorate it with ``@register("name")``
and import the module below.
"""

from __future__ import annotations

from collections.abc import Callable

from sanitizerd.detectors.base import Detector, KernelLaunch, SessionContext

DETECTORS: dict[str, Callable[[SessionContext], Detector]] = {}


def register(name: str) -> Callable[[type], type]:
    def add(cls: type) -> type:
        if name in DETECTORS:
            raise ValueError(f"detector {name!r} registered twice")
        cls.name = name  # type: ignore[attr-defined]
        DETECTORS[name] = cls
        return cls

    return add


def create_detectors(context: SessionContext) -> list[Detector]:
    """The detectors for the session's configured tools that this version implements."""
    return [DETECTORS[tool](context) for tool in context.config.tools if tool in DETECTORS]


from sanitizerd.detectors import initcheck, memcheck, racecheck, registercheck, synccheck  # noqa: E402  (register themselves)

__all__ = [
    "DETECTORS",
    "Detector",
    "KernelLaunch",
    "SessionContext",
    "create_detectors",
    "initcheck",
    "memcheck",
    "racecheck",
    "register",
    "registercheck",
    "synccheck",
]
