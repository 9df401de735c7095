"""What a detector is: state plus functions over batches. No I/O, no event loop, no clock.

The session layer calls these in the order the client sent things. ``check`` may run on a worker thread;
a detector is only ever driven by one thread at a time.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import ClassVar, Protocol

import numpy as np

from sanitizerd.chips import Chip
from sanitizerd.detectors._cross_npu import JobAccesses
from sanitizerd.detectors.memory_budget import MemoryAccount, unbounded
from sanitizerd_protocol.messages import Config, HostOp, Location
from sanitizerd_protocol.model import Finding, Frame, make_finding


@dataclass(frozen=True, slots=True)
class KernelLaunch:
    kernel: int
    name: str
    block_dim: int
    kernel_type: str


# Where AscendC's own code lives: its kernel_operator headers and the CANN toolkit tree (tikcpp/tikcfw).
_LIBRARY_MARKERS = ("kernel_operator", "/tikcpp/", "/tikcfw/", "${ASCEND_HOME_PATH}", "/ascend-toolkit/")


def is_library_frame(frame: Frame) -> bool:
    return any(marker in frame.file for marker in _LIBRARY_MARKERS)


# Events racecheck holds for one kernel launch until it ends: 0.5 GiB of records, 5 blocks' worth at msSanitizer's
# default cache size; with the check's temporaries 4.8 GiB reserved (racecheck.BYTES_PER_HELD_EVENT), and up to
# 3 GiB more for candidate pairs. The daemon's --max-race-events; the host's --race-memory bounds all sessions.
DEFAULT_MAX_RACE_EVENTS = 10_000_000


@dataclass(slots=True)
class SessionContext:
    """What a detector may know about its session: identity to stamp on findings, the chip, and the
    client's location table to turn location ids into source frames, and the session's share of the host's memory
    for racecheck."""

    job: str
    session: int
    pid: int
    device: int
    chip: Chip
    config: Config
    locations: dict[int, Location] = field(default_factory=dict)
    max_race_events: int = DEFAULT_MAX_RACE_EVENTS
    race_memory: MemoryAccount = field(default_factory=unbounded)
    # the job's accesses to shared memory, which cross-NPU racecheck compares across its sessions
    cross_npu: JobAccesses | None = None
    # told what cross-NPU racecheck left out at its bounds, by reason (_cross_npu.CUT_REASONS) and count: the metric
    on_cross_npu_cut: Callable[[str, int], None] = field(default=lambda reason, count: None)

    def stack(self, location: int) -> list[Frame]:
        """The call stack of a location id, innermost first. Without ``--full-backtrace yes``, frames inside the
        AscendC library are left out (unless nothing else remains), so the first frame is the user's line."""
        frames: list[Frame] = []
        loc = self.locations.get(location)
        if loc is None:
            return frames
        for ident in (location, *loc.callers):
            entry = self.locations.get(ident)
            if entry is not None:
                frames.append(Frame(file=entry.file, line=entry.line, column=entry.column, function=entry.function))
        if not self.config.full_backtrace:
            own = [frame for frame in frames if not is_library_frame(frame)]
            frames = own or frames
        return frames

    def place(self, location: int) -> tuple[Frame | None, list[Frame]]:
        """(location, stack) of a location id, as a finding carries them: a record's own place (``record``) is a
        location without a stack; a call stack is the stack and its innermost frame."""
        entry = self.locations.get(location)
        if entry is not None and entry.record:
            return Frame(file=entry.file, line=entry.line, column=entry.column, function=entry.function), []
        stack = self.stack(location)
        return (stack[0] if stack else None), stack

    def finding(self, kind: str, *, location: int = 0, kernel: str | None = None, **fields: object) -> Finding:
        where, stack = self.place(location)
        return make_finding(
            kind,
            job=self.job,
            session=self.session,
            pid=self.pid,
            device=self.device,
            kernel=kernel,
            location=where,
            stack=stack,
            **fields,
        )


# The most pieces (blocks of a scattered row, or rows) one batch a detector checks may list, bounded from above:
# initcheck and racecheck walk pieces at a few million a second, so a batch of this many is a fraction of a second
# of a detector thread. A client's batch of more is checked as several, in order (the detectors are streams), so
# that the fair share of threads and the kernel's CPU budget act between them: one batch of 65 536 accesses of
# 2 040 pieces each was 37 s of one thread. One access counts at most WIDE_ACCESS_PIECES: the widest accesses are
# checked in closed form (one of 65 535 x 65 535 scattered blocks: 0.1 s), and a batch of them need not become one
# batch per access.
BATCH_PIECES = 1 << 20
WIDE_ACCESS_PIECES = BATCH_PIECES >> 4

# What a detector's ``pieces_walked`` may say: the pieces it lists one by one, which bound the batches it is given
# (sessions/work.py): every access's, or its GM writes' and claims' alone (memcheck, which checks every other
# access in closed form).
ALL_PIECES, GM_WRITES = "all", "gm_writes"


class BatchTooWide(Exception):
    """Raised by ``check_within_bound`` of a detector that counts its own batches' pieces (``counts_pieces``),
    before it changes any state, where a batch lists more than BATCH_PIECES of the pieces it walks: the pipeline
    then checks the batch in parts, as it cuts them for every other detector."""


class Detector(Protocol):
    """Besides these, a detector that judges by memory regions may define ``region_permission(region)`` and
    ``shared_span(address, size, owner, base)``, returning findings: the session calls them where defined. One
    whose batches need only be bounded by some of their pieces says which in ``pieces_walked`` (ALL_PIECES where
    it does not); one that counts them in its own first pass over a batch (``counts_pieces = True``) is given each
    batch whole by ``check_within_bound(events)``, which raises BatchTooWide for one past the bound (its ``check``
    takes any batch)."""

    name: ClassVar[str]

    def kernel_begin(self, launch: KernelLaunch) -> None:
        """A kernel launch starts; per-kernel state resets."""

    def check(self, events: np.ndarray) -> None:
        """Check one batch of the current kernel's events; findings are held until the kernel ends."""

    def kernel_end(self) -> list[Finding]:
        """The kernel's deduplicated findings."""
        ...

    def host_op(self, op: HostOp) -> list[Finding]:
        """A host memory operation; findings are reported at once."""
        ...

    def finish(self) -> list[Finding]:
        """The session ended: end-of-run findings (leaks, unused memory)."""
        ...

    # Optional: ``take_early() -> list[Finding]``, findings a detector made while the kernel runs, reported after the
    # batch that made them rather than at the kernel's end (synccheck's lock-ups: a locked kernel never ends).
    # Optional: ``take_deferred() -> list[Finding]``, earlier launches' findings given at a kernel's end (cross-NPU
    # verdicts that waited for other sessions' kernels), published after it with their own ``launch``, not counted
    # in its verdict.
