"""Building device-event batches: fill fields by name, scalars or arrays, broadcast numpy-style."""

from __future__ import annotations

import numpy as np

from sanitizerd_protocol.records import (
    DCCI_ENTIRE,
    DCCI_SINGLE_LINE,
    EVENT_DTYPE,
    FLAG_ATOMIC,
    REGISTER_OBSERVED,
    REGISTER_WRITTEN,
    TENSOR_OF_BLOCK,
    TENSOR_OPERAND_READ,
    TENSOR_OPERAND_WRITE,
    BlockType,
    DcciTarget,
    EventKind,
    InstrName,
    Pipe,
    Register,
    Space,
    empty_events,
)

__all__ = [
    "EVENT_DTYPE",
    "REGISTER_OBSERVED",
    "REGISTER_WRITTEN",
    "TENSOR_OF_BLOCK",
    "TENSOR_OPERAND_READ",
    "TENSOR_OPERAND_WRITE",
    "BlockType",
    "DcciTarget",
    "EventKind",
    "InstrName",
    "Pipe",
    "Register",
    "Space",
    "accesses",
    "dccis",
    "make_events",
    "register_writes",
    "syncs",
    "tensors",
]


def make_events(**fields: object) -> np.ndarray:
    """A batch whose length is that of the longest array given; unnamed fields take neutral values."""
    unknown = set(fields) - set(EVENT_DTYPE.names or ())
    if unknown:
        raise TypeError(f"unknown event fields: {', '.join(sorted(unknown))}")
    n = max((np.size(v) for v in fields.values() if np.ndim(v)), default=1)
    events = empty_events(n)
    for name, value in fields.items():
        events[name] = value
    return events


def accesses(
    kind: EventKind,
    space: Space,
    address: object,
    block_size: object,
    *,
    block_num: object = 1,
    block_stride: object = 1,
    repeat: object = 1,
    repeat_stride: object = 0,
    pipe: Pipe = Pipe.S,
    block_id: object = 0,
    block_type: BlockType = BlockType.AIV,
    serial: object = 0,
    pc: object = 0,
    location: object = 0,
    atomic: bool = False,
    align: object = 0,
    thread: object = 0,
) -> np.ndarray:
    """Memory accesses with msSanitizer's strided pattern (docs/protocol.md, "Device events"); ``thread``: a SIMT
    thread's linear index + 1 (0: not a SIMT thread)."""
    return make_events(
        kind=kind, space=space, address=address, block_size=block_size, block_num=block_num,
        block_stride=block_stride, repeat=repeat, repeat_stride=repeat_stride, pipe=pipe, block_id=block_id,
        block_type=block_type, serial=serial, pc=pc, location=location, flags=FLAG_ATOMIC if atomic else 0,
        align=align, thread=thread,
    )  # fmt: skip


def syncs(
    kind: EventKind,
    src_pipe: Pipe,
    dst_pipe: Pipe = Pipe.S,
    event_id: object = 0,
    *,
    block_id: object = 0,
    block_type: BlockType = BlockType.AIV,
    serial: object = 0,
    pc: object = 0,
    location: object = 0,
    mode: int = 0,
    address: object = 0,
    block_num: object = 1,
    thread: object = 0,
) -> np.ndarray:
    """Synchronization events (set_flag, wait_flag, pipe_barrier, cross-core set/wait, set_atomic, soft and mstx
    syncs, buffer get/release, SIMT sections and __syncthreads()). ``address`` and ``block_num`` carry the kinds
    that use them (docs/protocol.md §7.4): the waited block or block count of soft syncs, the flag address of mstx
    syncs, the sub-blocks of CROSS_SET, SIMT_START's thread dims; ``thread`` a SYNC_THREADS' thread."""
    return make_events(
        kind=kind, pipe=src_pipe, dst_pipe=dst_pipe, event_id=event_id, block_id=block_id,
        block_type=block_type, serial=serial, pc=pc, location=location, mode=mode, block_size=0,
        address=address, block_num=block_num, thread=thread,
    )  # fmt: skip


def register_writes(
    register: Register,
    value: object,
    *,
    block_id: object = 0,
    block_type: BlockType = BlockType.AIV,
    serial: object = 0,
    pc: object = 0,
    location: object = 0,
    observed: bool = False,
) -> np.ndarray:
    """Writes of a control register (set_vector_mask, set_ctrl, ...), for registercheck; ``observed``: the value
    the register held at the block's next instruction, not written by the kernel (memcheck's register trace)."""
    return make_events(
        kind=EventKind.SET_REGISTER, event_id=register, address=value, block_id=block_id, block_type=block_type,
        serial=serial, pc=pc, location=location, block_size=0, mode=REGISTER_OBSERVED if observed else REGISTER_WRITTEN,
    )  # fmt: skip


def tensors(
    space: Space,
    address: object,
    size: object,
    *,
    block_id: object = 0,
    block_type: BlockType = BlockType.AIV,
    serial: object = 0,
    pc: object = 0,
    location: object = 0,
    mode: int = TENSOR_OF_BLOCK,
) -> np.ndarray:
    """Local tensor declarations (``TENSOR``, docs/protocol.md §7.3): ``size`` bytes of ``space`` at ``address``,
    the block's (``mode`` TENSOR_OF_BLOCK: on-chip accesses that start inside it are checked against it, until the
    block's BLOCK_FINISH or a later tensor of the block that overlaps it) or an operand of instruction ``serial``
    (TENSOR_OPERAND_READ/WRITE, for its TENSOR_READ/TENSOR_WRITE accesses)."""
    return make_events(
        kind=EventKind.TENSOR, space=space, address=address, block_size=size, block_id=block_id,
        block_type=block_type, serial=serial, pc=pc, location=location, mode=mode,
    )  # fmt: skip


def dccis(
    address: object,
    *,
    entire: bool = False,
    target: DcciTarget = DcciTarget.CACHE_LINE_ALL,
    space: Space = Space.GM,
    **instruction: object,
) -> np.ndarray:
    """dcci instructions on PIPE_S: the data cache line holding ``address`` (the whole data cache when ``entire``)
    cleaned and invalidated, for racecheck's --check-dcci (docs/protocol.md). ``instruction``: its ``block_id``,
    ``block_type``, ``serial``, ``pc`` and ``location``, as the other builders take them."""
    return make_events(
        kind=EventKind.DCCI, pipe=Pipe.S, space=space, address=address,
        mode=DCCI_ENTIRE if entire else DCCI_SINGLE_LINE, event_id=target, block_size=0, **instruction,
    )  # fmt: skip
