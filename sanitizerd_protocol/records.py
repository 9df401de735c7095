"""The packed device-event layout: one numpy dtype, defined once, shared by daemon, clients and docs.

A device event batch is a run of fixed-width little-endian records (56 bytes each, no padding). Memory
events carry msSanitizer's strided access pattern (reference §1.7): block ``i`` of repeat ``r`` covers
``[address + (r*repeat_stride + i*block_stride) * block_size, + block_size)``. Sync events travel in the
same ordered stream so that detectors see memory and synchronization in program order.
"""

from __future__ import annotations

import enum

import numpy as np


class EventKind(enum.IntEnum):
    READ = 0
    WRITE = 1
    SET_FLAG = 16
    WAIT_FLAG = 17
    PIPE_BARRIER = 18
    CROSS_SET = 19  # ffts_cross_core_sync on `pipe`; event_id = flag id, mode = FFTS mode (0, 1, 2, 4),
    #                 block_num = vector sub-blocks per AI core (1 or 2) for modes 1, 2 and 4
    CROSS_WAIT = 20  # wait_flag_dev (mode 0) or wait_intra_block (mode 4) on `pipe`; event_id = flag id
    SET_ATOMIC = 21  # mode = 0 off, non-zero on
    SET_REGISTER = 22  # event_id = Register, address = the value; mode REGISTER_OBSERVED: held, not written
    BLOCK_FINISH = 23  # the block has run its last instruction of this launch: its on-chip memory is gone
    HSET_FLAG = 24  # hardware flag (cube side): as SET_FLAG, in its own flag space
    HWAIT_FLAG = 25  # as WAIT_FLAG, pairs with HSET_FLAG
    SOFT_SET = 26  # IB_SET: event_id = event id; releases waits that name this block
    SOFT_WAIT = 27  # IB_WAIT: event_id = event id, address = the block id (same block type) whose IB_SET it awaits
    SOFT_SYNC_ALL = 28  # software SyncAll: address = blocks taking part (ids 0..n-1 of its type), 0 = all
    MSTX_CROSS_SET = 29  # mstx cross-core set on `pipe`: address = flag address, event_id = flag id
    MSTX_CROSS_WAIT = 30  # mstx cross-core wait on `pipe`: as MSTX_CROSS_SET; mode bit 0 = "is more" (skippable)
    GET_BUF = 31  # acquire buffer event_id on `pipe` (950): waits for the block's previous RLS_BUF of that buffer
    RLS_BUF = 32  # release buffer event_id on `pipe` (950)
    # A local tensor (AscendC's TPipe/TQue/TBuf/LocalMemAllocator buffer) of the block: `space`, `address` its
    # start, `block_size` its bytes. mode 0: the block's, until its BLOCK_FINISH or a later tensor of the block
    # that overlaps it; on-chip accesses that start inside it are checked against it, not the whole space.
    # mode TENSOR_OPERAND_READ/WRITE: an operand of the annotated instruction `serial` (msSanitizer's mstx
    # local-tensor annotation), for that instruction's TENSOR_READ/TENSOR_WRITE only.
    TENSOR = 33
    TENSOR_READ = 34  # an annotated instruction's read of its operands: memcheck checks it against them only
    TENSOR_WRITE = 35  # an annotated instruction's write of its operands: as TENSOR_READ
    # dcci (data cache clean and invalidate) on PIPE_S: `space` and `address` the line it names, mode DCCI_ENTIRE
    # for the whole data cache (else the one cache line holding `address`), event_id a DcciTarget. racecheck with
    # check_dcci: a scalar GM read needs one as the instruction just before it, a scalar GM write just after it.
    DCCI = 36
    # A barrier across the NPUs of the job (msSanitizer's mstx cross-NPU barrier): the block waits until every
    # device of the job has reached the same barrier. Cross-NPU racecheck orders accesses to shared memory by it.
    NPU_BARRIER = 48
    # A signal between the NPUs of the job (msSanitizer's mstx signal set / wait): SET stores `pc` (an i64 as its
    # two's complement) at the signal `address`; WAIT goes on once the value stored there compares true with `pc`
    # under the CompareOp in `mode` (stored <op> pc). Their `pc` is the value, not a program counter (a signal
    # locates nothing but by `location`). Cross-NPU racecheck orders a setter's earlier accesses before the
    # waiter's later ones by them.
    NPU_SIGNAL_SET = 40
    NPU_SIGNAL_WAIT = 41
    # SIMT (950 family): a block's SIMT section (one launch of a SIMT function, msSanitizer's SIMT entry). Between
    # SIMT_START and SIMT_END of a block, accesses with a non-zero `thread` are its threads', unordered among
    # themselves except by SYNC_THREADS, and unordered against the block's main-scalar accesses (thread 0).
    SIMT_START = 37  # address = thread dims x | y << 16 | z << 32 (each >= 1, product <= MAX_SIMT_THREADS)
    SYNC_THREADS = 38  # __syncthreads() by `thread`; pc (or location) names the barrier
    SIMT_END = 39  # the block's SIMT section ended: every thread has run to its end


# msSanitizer's SIMT_THREAD_MAX_SIZE: threads of one SIMT section; 16 bits of dims each would allow far more.
MAX_SIMT_THREADS = 2048


def simt_dims_address(x: int, y: int = 1, z: int = 1) -> int:
    """SIMT_START's ``address``: the section's thread dims packed, 16 bits each."""
    return (x & 0xFFFF) | (y & 0xFFFF) << 16 | (z & 0xFFFF) << 32


def thread_position(linear: int, dims: tuple[int, int, int]) -> tuple[int, int, int]:
    """(x, y, z) of thread ``linear`` (0-based, x fastest), as msSanitizer decomposes its thread ids."""
    x, y, _ = dims
    return linear % x, (linear % (x * y)) // x, linear // (x * y)


class CompareOp(enum.IntEnum):
    """NPU_SIGNAL_WAIT's ``mode``: how the stored value must compare with the wait's, numbered as msSanitizer's
    ``CompareOp``; another value is a bad event (cross-NPU racecheck counts it and orders nothing by it)."""

    EQ = 0
    NE = 1
    GT = 2
    GE = 3
    LT = 4
    LE = 5


def signal_value(value: int) -> int:
    """An i64 signal value as NPU_SIGNAL_SET/WAIT's ``pc`` carries it (two's complement in 64 bits)."""
    return value & 0xFFFF_FFFF_FFFF_FFFF


# TENSOR's mode: a block's tensor, or an operand of one annotated instruction, read or written by it.
TENSOR_OF_BLOCK = 0
TENSOR_OPERAND_READ = 1
TENSOR_OPERAND_WRITE = 2


# BLOCK_FINISH's mode: 0, the block ran its last instruction; BLOCK_RECORDS_ENDED, every record of the block came but
# whether it ran to its end is not known (msSanitizer's tool-made BLOCK_FINISH: the hooks read a killed kernel's
# record buffer as they read a finished one's), so a pipe left on a wait_flag nothing set is locked up at the
# kernel's end (issue 28).
BLOCK_RAN_TO_END = 0
BLOCK_RECORDS_ENDED = 1


# SOFT_SYNC_ALL's mode: 0, a SyncAll; SYNC_ALL_MSTX_BARRIER, msSanitizer's mstx cross-core barrier, which is one (a
# lock-up report names the instruction as msSanitizer's does).
SYNC_ALL_MSTX_BARRIER = 1

# GET_BUF's mode, msSanitizer's BufMode: 0, it waits for the buffer's release (block mode); GET_BUF_NONBLOCK, it does
# not wait (msSanitizer's replay lets it pass, and its race check orders nothing by it).
GET_BUF_NONBLOCK = 1


# DCCI's mode: the one cache line holding the address (msSanitizer's SINGLE_CACHE_LINE), or the whole data cache.
DCCI_SINGLE_LINE = 0
DCCI_ENTIRE = 1


class DcciTarget(enum.IntEnum):
    """Which cached data a DCCI cleans, numbered as msSanitizer's ``DcciDstType``: a UB line makes nothing of GM
    visible."""

    CACHE_LINE_ALL = 0
    CACHE_LINE_UB = 1
    CACHE_LINE_OUT = 2
    CACHE_LINE_ATOMIC = 3


class Register(enum.IntEnum):
    """Control registers a kernel must leave at their defaults (msSanitizer's registercheck, reference §2.4)."""

    VECTOR_MASK_0 = 1
    VECTOR_MASK_1 = 2
    CTRL = 3
    FFTS_BASE_ADDR = 4
    FPC = 5
    QUANT_PRE = 6
    QUANT_POST = 7
    LRELU_ALPHA = 8


# SET_REGISTER's mode: the kernel wrote the value (set_vector_mask, set_ctrl, ...), or the value is what the
# register held when the block's next instruction ran (a client that reads it off that instruction's record, as
# msSanitizer's vector records carry their mask): an observed value traces that instruction (memcheck's
# --trace-non-default-spr-reg) but was not left by the kernel, so registercheck's end-of-kernel check ignores it.
REGISTER_WRITTEN = 0
REGISTER_OBSERVED = 1
# CTRL's bit that selects the vector mask's mode: 0 Normal (a bit mask), 1 Counter (mask0 counts elements).
CTRL_MASK_MODE_BIT = 56


class InstrName(enum.IntEnum):
    """A vector instruction's name in an access's ``instr``, numbered as msSanitizer's ``InstrName`` (master of
    August 2026, ``record_defs.h``), so that its records' ``instrName`` byte travels unchanged."""

    NONE = 0
    VABS = 1
    VADD = 2
    VADDRELU = 3
    VADDRELUCONV = 4
    VADDS = 5
    VAND = 6
    VAXPY = 7
    VCADD = 8
    VCGADD = 9
    VCGMAX = 10
    VCGMIN = 11
    VCMAX = 12
    VCMIN = 13
    VCMP = 14
    VCONV = 15
    VCOPY = 16
    VCPADD = 17
    VDIV = 18
    VECTOR_DUP = 19
    VEXP = 20
    VGATHER = 21
    VLN = 22
    VLRELU = 23
    VMADD = 24
    VMADDRELU = 25
    VMAX = 26
    VMAXS = 27
    VMIN = 28
    VMINS = 29
    VMLA = 30
    VMUL = 31
    VMULCONV = 32
    VMULS = 33
    VNOT = 34
    VOR = 35
    VREC = 36
    VREDUCE = 37
    VREDUCEV2 = 38
    VRELU = 39
    VRSQRT = 40
    VSEL = 41
    VSHL = 42
    VSHR = 43
    VSQRT = 44
    VSUB = 45
    VSUBRELU = 46
    VSUBRELUCONV = 47


def instr_name(instr: int) -> str:
    """``VADD``; an id this version does not know (a newer or hostile client's) as ``Unknown InstrName(<n>)``, as
    msSanitizer's FormatEnum prints an unknown one."""
    try:
        return InstrName(instr).name
    except ValueError:
        return f"Unknown InstrName({instr})"


class Space(enum.IntEnum):
    """Address spaces, numbered as msSanitizer's record ``AddressSpace``."""

    PRIVATE = 0
    GM = 1
    L1 = 2
    L0A = 3
    L0B = 4
    L0C = 5
    UB = 6
    BT = 7
    FB = 8


class Pipe(enum.IntEnum):
    S = 0
    V = 1
    M = 2
    MTE1 = 3
    MTE2 = 4
    MTE3 = 5
    ALL = 6
    MTE4 = 7
    MTE5 = 8
    V2 = 9
    FIX = 10
    S_CAL = 11  # msSanitizer's internal "scalar compute" pipe; prints as PIPE_S


class BlockType(enum.IntEnum):
    AIV = 0
    AIC = 1
    AICORE = 2


def pipe_name(pipe: int) -> str:
    """``PIPE_MTE2``; msSanitizer's internal scalar-compute pipe prints as ``PIPE_S``."""
    if pipe == Pipe.S_CAL:
        return "PIPE_S"
    try:
        return f"PIPE_{Pipe(pipe).name}"
    except ValueError:
        return f"PIPE_{pipe}"


BLOCK_TYPE_NAMES: dict[int, str] = {BlockType.AIV: "aiv", BlockType.AIC: "aic", BlockType.AICORE: "aicore"}


def space_name(space: int) -> str:
    """``UB``; a value version 1 does not define as its number."""
    try:
        return Space(space).name
    except ValueError:
        return str(space)


def block_type_name(block_type: int) -> str:
    """``aiv``; a value version 1 does not define (a hostile or newer client's) as its number."""
    return BLOCK_TYPE_NAMES.get(block_type, str(block_type))


FLAG_ATOMIC = 0x01
# A SIMT thread's write that only claims its bytes for the thread (docs/protocol.md §7.8): memcheck's inter-thread
# stomping check takes it as that thread's first write of them; every other check leaves it out. The compat door
# makes one for the owner a device-found THREAD_OVERLAP names, whose own write is not on the wire.
FLAG_CLAIM = 0x02
# A SIMT call's access as its block's PIPE_V issued it (docs/protocol.md §7.8; msSanitizer's SimtEntryRecord, one
# DYNAMIC_OP SIMT_ENTRY event on PIPE_V at the call): `thread` names the thread that made it. racecheck orders it as
# a PIPE_V access of the block, against the DMA, vector and scalar pipes; the threads' own check and memcheck leave
# it out (the device checked it against the other threads and the bounds).
FLAG_SIMT_ENTRY = 0x04

EVENT_DTYPE = np.dtype(
    [
        ("address", "<u8"),  # 0: start address; sync events: 0; SET_REGISTER: the value
        ("serial", "<u8"),  # 8: instruction serial number (msSanitizer serialNo)
        ("pc", "<u8"),  # 16: program counter, 0 when unknown
        ("block_size", "<u4"),  # 24: bytes per block
        ("location", "<u4"),  # 28: id in the session's location table, 0 = none
        ("block_num", "<u2"),  # 32: blocks per repeat
        ("block_stride", "<u2"),  # 34: in block_size units
        ("repeat", "<u2"),  # 36: repeat count; 0 = empty access
        ("repeat_stride", "<u2"),  # 38: in block_size units
        ("block_id", "<u2"),  # 40: logical block (core) index
        ("event_id", "<u2"),  # 42: sync: event id (set/wait flag) or flag id (cross-core); SET_REGISTER: Register
        ("kind", "u1"),  # 44: EventKind
        ("space", "u1"),  # 45: Space
        ("pipe", "u1"),  # 46: Pipe; sync: source pipe
        ("dst_pipe", "u1"),  # 47: sync: destination pipe
        ("block_type", "u1"),  # 48: BlockType
        ("flags", "u1"),  # 49: bit 0 atomic mode, bit 1 a SIMT thread's ownership claim, bit 2 a SIMT call's access
        ("align", "<u2"),  # 50: required alignment in bytes, 0 = by address space (§1.6)
        ("mode", "u1"),  # 52: cross-core sync mode
        ("instr", "u1"),  # 53: InstrName of the vector instruction an access belongs to; 0 = none (was reserved)
        ("thread", "<u2"),  # 54: SIMT thread (linear index + 1) inside a SIMT section; 0 = the block's main scalar
    ]
)
assert EVENT_DTYPE.itemsize == 56, EVENT_DTYPE.itemsize


def empty_events(n: int) -> np.ndarray:
    """A zeroed batch of ``n`` events with the neutral values a partial fill expects."""
    events = np.zeros(n, dtype=EVENT_DTYPE)
    events["block_num"] = 1
    events["repeat"] = 1
    events["block_stride"] = 1
    return events


def block_keys(events: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """Each event's block as one number, ``block_type << 16 | block_id`` (uint32), into ``out`` if given. Shifted
    and or-ed into one array straight from the records: widening each field first costs twice as much."""
    if out is None:
        out = np.empty(events.size, dtype=np.uint32)
    np.left_shift(events["block_type"], 16, out=out, dtype=np.uint32)
    out |= events["block_id"]
    return out


def as_events(buffer: memoryview | bytes) -> np.ndarray:
    """View a batch's bytes as events, without copying."""
    return np.frombuffer(buffer, dtype=EVENT_DTYPE)
