"""Detectors, registered by name. A session creates the ones its configuration enables.

To add one: write a module with a class satisfying ``base.Detector``, decorate it with ``registry.register("name")``
and import the module in this file.
"""

from __future__ import annotations

from sanitizerd.detectors import initcheck, memcheck, racecheck, registercheck, synccheck  # register themselves
from sanitizerd.detectors._cross_npu import JobAccesses
from sanitizerd.detectors.base import Detector, KernelLaunch, SessionContext
from sanitizerd.detectors.crossnpu import CrossNpuRacecheck
from sanitizerd.detectors.registry import DETECTORS, register


def create_detectors(context: SessionContext) -> list[Detector]:
    """The detectors for the session's configured tools that this version implements; with racecheck and
    ``check_cross_npu_races``, cross-NPU racecheck over the job's shared memory too."""
    detectors = [DETECTORS[tool](context) for tool in context.config.tools if tool in DETECTORS]
    config = context.config
    if config.check_cross_npu_races and "racecheck" in config.tools:
        job = context.cross_npu if context.cross_npu is not None else JobAccesses()
        detectors.append(CrossNpuRacecheck(context, job))
    return detectors


__all__ = [
    "DETECTORS",
    "Detector",
    "JobAccesses",
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
