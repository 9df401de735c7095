"""Helpers for driving one detector directly, with no session and no event loop."""

from __future__ import annotations

import numpy as np

from sanitizerd.chips import chip_named
from sanitizerd.detectors import DETECTORS
from sanitizerd.detectors.base import Detector, KernelLaunch, SessionContext
from sanitizerd_protocol.messages import Config, Location
from sanitizerd_protocol.model import Finding


def make_detector(tool: str, *, device: int = 0, locations: dict[int, Location] | None = None) -> Detector:
    """The registered detector ``tool`` for a fresh 910B1 session configured with just that tool."""
    context = SessionContext(
        job="j", session=1, pid=2, device=device, chip=chip_named("910B1"), config=Config(tools=[tool])
    )
    context.locations.update(locations or {})
    return DETECTORS[tool](context)


def run_kernel(detector: Detector, *batches: np.ndarray, name: str = "add_custom") -> list[Finding]:
    """One kernel launch: begin, every batch in order, end; the kernel's findings."""
    detector.kernel_begin(KernelLaunch(kernel=1, name=name, block_dim=8, kernel_type="aiv"))
    for batch in batches:
        detector.check(batch)
    return detector.kernel_end()


def stream(*parts: np.ndarray) -> np.ndarray:
    """Event arrays joined in program order, with serial numbers 1, 2, 3, ..."""
    events = np.concatenate(parts)
    events["serial"] = np.arange(1, events.size + 1)
    return events
