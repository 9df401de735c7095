"""What a session hands its detectors, in client order. Host operations travel as their protocol message."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from sanitizerd.detectors.base import KernelLaunch
from sanitizerd.protocol.messages import HostOp


@dataclass(frozen=True, slots=True)
class StartKernel:
    launch: KernelLaunch


@dataclass(frozen=True, slots=True)
class Batch:
    events: np.ndarray


@dataclass(frozen=True, slots=True)
class EndKernel:
    kernel: int


@dataclass(frozen=True, slots=True)
class Finish:
    """The session is over: report end-of-run findings."""


Work = StartKernel | Batch | EndKernel | HostOp | Finish
