"""Detectors, registered by name. A session creates the ones its configuration enables.

To add one: write a module with a class satisfying ``base.Detector``, decorate it with ``registry.register("name")``
and import the module in this file.
"""

from __future__ import annotations

from sanitizerd.detectors import initcheck, memcheck, racecheck, registercheck, synccheck  # register themselves
from sanitizerd.detectors.base import Detector, KernelLaunch, SessionContext
from sanitizerd.detectors.registry import DETECTORS, register


def create_detectors(context: SessionContext) -> list[Detector]:
    """The detectors for the session's configured tools that this version implements."""
    return [DETECTORS[tool](context) for tool in context.config.tools if tool in DETECTORS]


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
