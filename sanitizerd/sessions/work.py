"""What a session hands its detectors, in client order. Host operations travel as their protocol message."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

# The cut by pieces is the detectors' own (detectors/_batches.py), named here too, where the batches are made
from sanitizerd.detectors._batches import split_by_pieces, split_by_pieces_numpy
from sanitizerd.detectors.base import BATCH_PIECES, WIDE_ACCESS_PIECES, KernelLaunch
from sanitizerd_protocol.messages import HostOp, RegionPermission

__all__ = ["BATCH_PIECES", "WIDE_ACCESS_PIECES", "split_by_pieces", "split_by_pieces_numpy"]


@dataclass(frozen=True, slots=True)
class StartKernel:
    launch: KernelLaunch


@dataclass(frozen=True, slots=True)
class Batch:
    events: np.ndarray
    # each detector's cut of the batch, by the pieces it walks (split_by_pieces), made once for all detectors of
    # that kind: the pipelines run on one event loop
    _cuts: dict[str, list[np.ndarray]] = field(default_factory=dict, compare=False, repr=False)

    def parts(self, walked: str) -> list[np.ndarray]:
        """The batch as the consecutive batches of at most BATCH_PIECES of ``walked`` pieces."""
        cut = self._cuts.get(walked)
        if cut is None:
            cut = self._cuts[walked] = split_by_pieces(self.events, walked=walked)
        return cut


@dataclass(frozen=True, slots=True)
class EndKernel:
    kernel: int


@dataclass(frozen=True, slots=True)
class Finish:
    """The session is over: report end-of-run findings."""


@dataclass(frozen=True, slots=True)
class SharedSpan:
    """``[address, address + size)`` of this session is memory other devices of the job reach too (an IPC export
    or a mapping of one): ``owner`` and ``base`` name it across sessions (the exporting session, and the address
    the span starts at there). ``size`` 0: the span that starts at ``address`` ends."""

    address: int
    size: int
    owner: int
    base: int


Work = StartKernel | Batch | EndKernel | HostOp | RegionPermission | SharedSpan | Finish

