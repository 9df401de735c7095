"""Local tensors: the buffers a kernel's blocks allocate in their on-chip memory, and the accesses judged by them.

msSanitizer checks an annotated UB/L1/L0 access against the tensor the kernel allocated, not against the whole
space (reference §2.1, "Bounds check"): a DataCopy of 256 floats into a 64-float UB tensor writes 768 bytes past
it, all inside UB. Two forms reach memcheck (docs/protocol.md §7.3, ``TENSOR``):

* **A block's tensors** (``mode`` 0; native clients, the emulator): AscendC's TPipe/TQue/TBuf/LocalMemAllocator
  buffers, declared once and used by many instructions. A tensor lives until its block's ``BLOCK_FINISH`` or until
  a later tensor of the block overlaps it (the memory went to another buffer). An on-chip access that starts inside
  one of its block's tensors is checked against that tensor; one that starts in none, against the whole space.
  ``BlockTensors`` keeps them and says, for each access of a batch, which tensor was in force when it ran.
* **An instruction's operands** (``mode`` TENSOR_OPERAND_READ/WRITE; msSanitizer's mstx local-tensor annotations,
  which its compat converter turns into these): the tensors one annotated instruction names, for that
  instruction's ``TENSOR_READ``/``TENSOR_WRITE`` accesses only, reads against its read operands and writes against
  its written one, as msSanitizer's ``DoWithLocalTensor`` builds one bounds table per side per record.
  ``operand_ranges`` pairs them.

Both are bounded: a block holds at most MAX_TENSORS_PER_BLOCK tensors at once and a kernel MAX_TENSORS_PER_KERNEL;
an instruction names at most MAX_OPERANDS tensors per side and space. What passes a bound is refused (the
declaration is not kept, so accesses there are judged as if it had not been made) and counted by reason; memcheck
says so in one ``internal_error`` per kernel.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field

import numpy as np

from sanitizerd_protocol.records import (
    TENSOR_OF_BLOCK,
    TENSOR_OPERAND_READ,
    TENSOR_OPERAND_WRITE,
    EventKind,
    Space,
    block_keys,
)

MAX_TENSORS_PER_BLOCK = 4096  # a block's live tensors (AscendC's TPipe holds a few dozen buffers)
MAX_TENSORS_PER_KERNEL = 1 << 16  # the live tensors of all blocks of one kernel launch
MAX_OPERANDS = 4  # tensors one annotated instruction names per side and space (a binary op reads two)

# The spaces a local tensor lives in, as msSanitizer's local bounds table has them: L1, L0A, L0B, L0C, UB. An access
# or tensor elsewhere (PRIVATE, BT, FB) is not judged by tensors; a GM "tensor" is a GlobalTensor, whose length
# AscendC does not report (msSanitizer skips it too).
LOCAL_SPACES = np.zeros(256, dtype=bool)
LOCAL_SPACES[[Space.L1, Space.L0A, Space.L0B, Space.L0C, Space.UB]] = True

_U64 = np.uint64
_START_BITS = 32  # a local tensor lies below 4 GiB (every on-chip space is far smaller): its start fits 32 bits
_START_MASK = _U64((1 << _START_BITS) - 1)
_NONE = -1

# Why a declaration was refused, in the order memcheck names them.
REFUSALS = {
    "block_limit": f"more than {MAX_TENSORS_PER_BLOCK} live tensors in one block",
    "kernel_limit": f"more than {MAX_TENSORS_PER_KERNEL} live tensors in the kernel",
    "not_local": "not in L1, L0A, L0B, L0C or UB",
    "empty": "of size 0",
    "outside": "past the end of its space on this chip",
    "operands": f"more than {MAX_OPERANDS} operands of one side and space in one instruction",
    "mode": "with a mode that is neither a block's tensor nor an operand",
}


@dataclass(slots=True)
class Judged:
    """For accesses of a batch (positions ``index``), the tensor that judges each: ``found`` whether there is one,
    its bytes ``[start, end)``, the serial and location of its declaration."""

    index: np.ndarray
    found: np.ndarray
    start: np.ndarray
    end: np.ndarray
    serial: np.ndarray
    location: np.ndarray


@dataclass(slots=True)
class BlockTensors:
    """The live tensors of a kernel launch's blocks, sorted by (block, space, start): those of one (block, space) are
    disjoint, so the one holding an address is one ``searchsorted`` away. Kept as Python lists, changed one
    declaration at a time (a bisect and a memmove), and copied into numpy arrays only when accesses are looked up
    after a change."""

    keys: list[int] = field(default_factory=list)  # block << 40 | space << 32 | start
    ends: list[int] = field(default_factory=list)
    serials: list[int] = field(default_factory=list)
    locations: list[int] = field(default_factory=list)
    per_block: dict[int, int] = field(default_factory=dict)
    refused: dict[str, int] = field(default_factory=dict)
    _arrays: tuple[np.ndarray, ...] | None = None  # the lists as arrays, while they have not changed

    def __len__(self) -> int:
        return len(self.keys)

    def refuse(self, reason: str, n: int = 1) -> None:
        self.refused[reason] = self.refused.get(reason, 0) + n

    def apply(self, events: np.ndarray, candidates: np.ndarray, limits: np.ndarray) -> Judged | None:
        """Take the batch's declarations and block ends in program order, and judge the on-chip accesses at
        positions ``candidates`` by the tensors in force when each ran; None when no tensor was in force for any.

        The table changes only at a declaration that is not already in force (AscendC's queues hand the same
        buffers out again and again) and at the end of a block that holds tensors; the accesses between two such
        changes are looked up at once. So a kernel that declares its buffers up front costs one lookup per batch,
        and one that declares a buffer per tile one lookup per tile (benchmarks/tensors.py)."""
        kind = events["kind"]
        points = np.flatnonzero((kind == EventKind.TENSOR) | (kind == EventKind.BLOCK_FINISH))
        if points.size:  # operands belong to their instruction, not to the block
            points = points[(kind[points] == EventKind.BLOCK_FINISH) | (events["mode"][points] == TENSOR_OF_BLOCK)]
        if not points.size and not len(self):
            return None
        judged = Judged(
            index=candidates,
            found=np.zeros(candidates.size, bool),
            start=np.zeros(candidates.size, _U64),
            end=np.zeros(candidates.size, _U64),
            serial=np.zeros(candidates.size, _U64),
            location=np.zeros(candidates.size, np.uint32),
        )
        keys = _access_keys(events, candidates)
        # The fields of every point, read once: one structured record per point costs more than the step itself.
        stops = np.searchsorted(candidates, points).tolist()
        rows = zip(
            stops,
            (kind[points] == EventKind.BLOCK_FINISH).tolist(),
            (events["block_type"][points].astype(np.int64) << 16 | events["block_id"][points]).tolist(),
            events["space"][points].tolist(),
            events["address"][points].tolist(),
            events["block_size"][points].tolist(),
            events["serial"][points].tolist(),
            events["location"][points].tolist(),
            strict=True,
        )
        limit = limits.tolist()
        begin = 0  # candidates before this one are judged already
        # One Python step per declaration or block end (not per access): they are a kernel's buffers, not its work.
        for stop, finished, block, space, start, size, serial, location in rows:
            if finished:
                if not self.per_block.get(block):
                    continue
                self._lookup(keys, judged, begin, stop)
                begin = stop
                self._drop_block(block)
                continue
            if not LOCAL_SPACES[space]:
                self.refuse("not_local")
                continue
            if size == 0:
                self.refuse("empty")
                continue
            if start + size > limit[space]:
                self.refuse("outside")
                continue
            key = block << 40 | space << _START_BITS | start
            j = bisect.bisect_left(self.keys, key)
            if j < len(self.keys) and self.keys[j] == key and self.ends[j] == start + size:
                continue  # the same tensor again: nothing changes
            self._lookup(keys, judged, begin, stop)
            begin = stop
            self._declare(block, space, start, size, serial, location)
        self._lookup(keys, judged, begin, candidates.size)
        return judged if judged.found.any() else None

    def _lookup(self, keys: np.ndarray, judged: Judged, begin: int, stop: int) -> None:
        if stop <= begin or not len(self):
            return
        if self._arrays is None:
            self._arrays = (
                np.array(self.keys, dtype=_U64),
                np.array(self.ends, dtype=_U64),
                np.array(self.serials, dtype=_U64),
                np.array(self.locations, dtype=np.uint32),
            )
        table, ends, serials, locations = self._arrays
        key = keys[begin:stop]
        j = np.searchsorted(table, key, side="right") - 1
        jj = np.maximum(j, 0)
        address = key & _START_MASK
        found = (j >= 0) & ((table[jj] >> _U64(_START_BITS)) == (key >> _U64(_START_BITS)))
        found &= address < ends[jj]
        found &= key != _U64(np.iinfo(np.uint64).max)  # an access that starts past every tensor's reach
        rows = np.arange(begin, stop)[found]
        hit = jj[found]
        judged.found[rows] = True
        judged.start[rows] = table[hit] & _START_MASK
        judged.end[rows] = ends[hit]
        judged.serial[rows] = serials[hit]
        judged.location[rows] = locations[hit]

    def _drop_block(self, block: int) -> None:
        """The block ended: its on-chip memory is gone, and its tensors with it."""
        keep = [i for i, key in enumerate(self.keys) if key >> 40 != block]
        self.keys = [self.keys[i] for i in keep]
        self.ends = [self.ends[i] for i in keep]
        self.serials = [self.serials[i] for i in keep]
        self.locations = [self.locations[i] for i in keep]
        self.per_block.pop(block, None)
        self._arrays = None

    def _declare(self, block: int, space: int, start: int, size: int, serial: int, location: int) -> None:
        group = block << 40 | space << _START_BITS
        # Tensors of this (block, space) that share a byte with the new one are gone: their memory is its now.
        lo = bisect.bisect_right(self.keys, group | start)
        if lo and self.keys[lo - 1] >> _START_BITS == group >> _START_BITS and self.ends[lo - 1] > start:
            lo -= 1
        hi = bisect.bisect_left(self.keys, group | (start + size))
        gone = hi - lo
        live = self.per_block.get(block, 0) - gone
        if live >= MAX_TENSORS_PER_BLOCK:
            self.refuse("block_limit")
            return
        if len(self) - gone >= MAX_TENSORS_PER_KERNEL:
            self.refuse("kernel_limit")
            return
        self.keys[lo:hi] = [group | start]
        self.ends[lo:hi] = [start + size]
        self.serials[lo:hi] = [serial]
        self.locations[lo:hi] = [location]
        self.per_block[block] = live + 1
        self._arrays = None


def _access_keys(events: np.ndarray, index: np.ndarray) -> np.ndarray:
    """Each access's (block, space, start) as a table key; all ones for a start no tensor can hold (past 4 GiB).
    Read field by field: gathering whole 56-byte records costs several times more."""
    start = events["address"][index].astype(_U64)
    blocks = events["block_type"][index].astype(_U64) << _U64(16) | events["block_id"][index].astype(_U64)
    key = blocks << _U64(40) | events["space"][index].astype(_U64) << _U64(_START_BITS) | (start & _START_MASK)
    return np.where(start > _START_MASK, _U64(np.iinfo(np.uint64).max), key)


@dataclass(slots=True)
class Operands:
    """For operand accesses (positions ``index``): each one's ranges ``starts/stops[first : first + count]``,
    sorted and disjoint, and the operand tensor to name in a report (the one holding its start, else its first)."""

    index: np.ndarray
    starts: np.ndarray
    stops: np.ndarray
    first: np.ndarray
    count: np.ndarray
    named_start: np.ndarray
    named_size: np.ndarray


def operand_ranges(events: np.ndarray, accesses: np.ndarray, horizon: int, refused: BlockTensors) -> Operands:
    """Pair each operand access at positions ``accesses`` with the operand tensors of its instruction: the
    ``TENSOR`` events of the same serial and block, of its side (read operands for a TENSOR_READ) and space, that
    come in the same run of the batch (an instruction's events are sent together). Operands past MAX_OPERANDS
    per side and space are refused (counted in ``refused``)."""
    kind = events["kind"]
    n = events.size
    serial = events["serial"]
    blocks = block_keys(events)
    change = np.ones(n, dtype=bool)
    change[1:] = (serial[1:] != serial[:-1]) | (blocks[1:] != blocks[:-1])
    run = np.cumsum(change).astype(_U64)
    mode = events["mode"]
    tensors = np.flatnonzero(
        (kind == EventKind.TENSOR) & ((mode == TENSOR_OPERAND_READ) | (mode == TENSOR_OPERAND_WRITE))
    )
    bad_mode = (kind == EventKind.TENSOR) & (mode != TENSOR_OF_BLOCK) & (mode != TENSOR_OPERAND_READ)
    bad_mode &= mode != TENSOR_OPERAND_WRITE
    if bad_mode.any():
        refused.refuse("mode", int(bad_mode.sum()))
    tensors = tensors[LOCAL_SPACES[events["space"][tensors]]]
    side_of_tensor = (mode[tensors] == TENSOR_OPERAND_WRITE).astype(_U64)
    t_key = run[tensors] << _U64(16) | side_of_tensor << _U64(8) | events["space"][tensors].astype(_U64)
    t_start = np.minimum(events["address"][tensors].astype(_U64), _U64(horizon))
    t_stop = np.minimum(t_start + np.minimum(events["block_size"][tensors].astype(_U64), _U64(horizon)), _U64(horizon))
    order = np.lexsort((t_start, t_key))
    t_key, t_start, t_stop = t_key[order], t_start[order], t_stop[order]
    # At most MAX_OPERANDS per (instruction, side, space): a hostile client could name thousands.
    group_head = np.ones(t_key.size, dtype=bool)
    group_head[1:] = t_key[1:] != t_key[:-1]
    heads = np.flatnonzero(group_head)
    rank = np.arange(t_key.size) - np.repeat(heads, np.diff(np.append(heads, t_key.size)))
    over = rank >= MAX_OPERANDS
    if over.any():
        refused.refuse("operands", int(over.sum()))
        t_key, t_start, t_stop, rank = t_key[~over], t_start[~over], t_stop[~over], rank[~over]
    # Disjoint: each range starts no earlier than the end of those before it in its group (their union unchanged).
    reach = t_stop.copy()
    same = np.zeros(t_key.size, dtype=bool)
    same[1:] = t_key[1:] == t_key[:-1]
    for _ in range(MAX_OPERANDS - 1):
        reach[1:] = np.where(same[1:], np.maximum(reach[1:], reach[:-1]), reach[1:])
    before = np.zeros(t_key.size, _U64)
    before[1:] = np.where(same[1:], reach[:-1], _U64(0))
    named_lo, named_hi = t_start, t_stop
    starts = np.maximum(t_start, before)
    stops = np.maximum(t_stop, starts)

    side = (kind[accesses] == EventKind.TENSOR_WRITE).astype(_U64)
    a_key = run[accesses] << _U64(16) | side << _U64(8) | events["space"][accesses].astype(_U64)
    first = np.searchsorted(t_key, a_key, side="left")
    count = np.searchsorted(t_key, a_key, side="right") - first
    # Name the operand that holds the access's start, else the first of its side.
    address = events["address"][accesses].astype(_U64)
    pick = first.copy()
    for k in range(MAX_OPERANDS - 1, -1, -1):
        j = np.minimum(first + k, max(t_key.size - 1, 0))
        holds = (count > k) & (named_lo[j] <= address) & (address < named_hi[j]) if t_key.size else count > k
        pick = np.where(holds, j, pick)
    has = count > 0
    pick = np.minimum(pick, max(t_key.size - 1, 0))
    named_start = np.where(has, named_lo[pick] if t_key.size else 0, 0).astype(_U64)
    named_size = np.where(has, (named_hi[pick] - named_lo[pick]) if t_key.size else 0, 0).astype(_U64)
    return Operands(accesses, starts, stops, first, count, named_start, named_size)


def refusal_text(refused: dict[str, int]) -> str:
    """What memcheck says of the declarations it refused in one kernel."""
    total = sum(refused.values())
    reasons = ", ".join(f"{n} {REFUSALS[reason]}" for reason, n in refused.items())
    return (
        f"tensors_refused: {total} local tensor declaration(s) of this kernel were refused ({reasons}); accesses "
        "in their bytes were judged as if they had not been declared (docs/security.md)"
    )

