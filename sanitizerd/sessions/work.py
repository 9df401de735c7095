"""What a session hands its detectors, in client order. Host operations travel as their protocol message."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from sanitizerd import native
from sanitizerd.detectors.base import ALL_PIECES, GM_WRITES, KernelLaunch
from sanitizerd_protocol.messages import HostOp, RegionPermission
from sanitizerd_protocol.records import EVENT_DTYPE, FLAG_CLAIM, EventKind, Space

_compiled = native.load("_ingest")


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

# The most pieces (blocks of a scattered row, or rows) one batch a detector checks may list, bounded from above:
# initcheck and racecheck walk pieces at a few million a second, so a batch of this many is a fraction of a second
# of a detector thread. A client's batch of more is checked as several, in order (the detectors are streams), so
# that the fair share of threads and the kernel's CPU budget act between them: one batch of 65 536 accesses of
# 2 040 pieces each was 37 s of one thread. One access counts at most WIDE_ACCESS_PIECES: the widest accesses are
# checked in closed form (one of 65 535 x 65 535 scattered blocks: 0.1 s), and a batch of them need not become one
# batch per access. Each detector's batches are cut by the pieces it walks (its ``pieces_walked``): memcheck
# walks only its GM writes' and claims' (stomping, unused memory) and checks every other access in closed form,
# so a batch of wide reads or on-chip accesses stays one batch for it.
BATCH_PIECES = 1 << 20
WIDE_ACCESS_PIECES = BATCH_PIECES >> 4


def split_by_pieces(events: np.ndarray, limit: int = BATCH_PIECES, walked: str = ALL_PIECES) -> list[np.ndarray]:
    """``events`` as consecutive batches of at most ``limit`` pieces each (an upper bound: repeat, times the
    blocks of a scattered row; ``walked`` GM_WRITES: of the GM writes and claims alone), each of at least one
    event; one batch, the same array, in the common case."""
    if events.size * WIDE_ACCESS_PIECES <= limit:  # cannot exceed: skip even the field reads
        return [events]
    if _compiled is not None and events.dtype == EVENT_DTYPE and events.flags.c_contiguous:
        cuts = _compiled.cuts(events.view(np.uint8), limit, WIDE_ACCESS_PIECES, walked == GM_WRITES)
        return np.split(events, cuts) if cuts else [events]
    return split_by_pieces_numpy(events, limit, walked)


def split_by_pieces_numpy(events: np.ndarray, limit: int = BATCH_PIECES, walked: str = ALL_PIECES) -> list[np.ndarray]:
    """``split_by_pieces`` in numpy: the reference path, and the path where ``_ingest`` was not built."""
    # Upper bounds from a field read or two settle the common batch: rows (a repeat of 0 is one row, counted as
    # two here), then blocks where some row is scattered.
    repeat = events["repeat"]
    rows = int(repeat.sum(dtype=np.int64)) + events.size
    scattered = events["block_stride"] > 1
    if rows <= limit and (not scattered.any() or rows * int(events["block_num"].max()) <= limit):
        return [events]
    pieces = np.maximum(repeat, 1).astype(np.int64)
    pieces[scattered] *= np.maximum(events["block_num"][scattered], 1)
    np.minimum(pieces, WIDE_ACCESS_PIECES, out=pieces)
    if walked == GM_WRITES:
        writes = (events["kind"] == EventKind.WRITE) | ((events["flags"] & FLAG_CLAIM) != 0)
        pieces[~(writes & (events["space"] == Space.GM))] = 0
    total = np.cumsum(pieces)
    if int(total[-1]) <= limit:
        return [events]
    cuts: list[int] = []
    start, done = 0, 0
    while start < events.size:
        # the first event past the batch's share; at least one event a batch
        end = max(int(np.searchsorted(total, done + limit, side="right")), start + 1)
        cuts.append(end)
        done, start = int(total[end - 1]), end
    return np.split(events, cuts[:-1])
