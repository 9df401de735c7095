"""A small AscendC-style kernel emulator: describe a kernel in Python, stream the events an instrumented
kernel would send (reference §1.7), with source locations from the Python call site.

    kernel = KernelEmulator(client, "add_custom", block_dim=8)
    x = kernel.gm(0x12C0C0000000, 8 * 4096)          # malloc + host copy-in
    def body(block: Block) -> None:
        ub = block.ub(0, 512)                                   # declares a 512-byte UB tensor of the block
        block.data_copy(ub, x.tile(block.idx * 4096, 512))   # GM -> UB on MTE2 (the source, whole)
        block.set_flag(Pipe.MTE2, Pipe.V, 0)
        block.wait_flag(Pipe.MTE2, Pipe.V, 0)
        block.vector(ub, [ub], repeat=2)                        # on PIPE_V
    verdict = kernel.run(body)

Local tensors: ``block.ub``/``l1``/``l0``/``tensor`` declare a tensor of the block (a ``TENSOR`` event, as AscendC's
TPipe/TQue/LocalMemAllocator allocate one): an on-chip access that starts inside it is checked against it, not the
whole space, as msSanitizer checks AscendC's annotated LocalTensors. ``Tensor.tile`` is a view (AscendC's
``tensor[offset]``): it declares nothing, and its accesses are judged by the tensor it lies in.

Instruction mappings, as msSanitizer's record parser makes them:
- ``data_copy`` (DMA_MOV, AscendC's ``DataCopy(dst, src, count)``): ``count`` elements, or ``n_burst`` bursts of
  ``len_burst`` 32-byte blocks, gaps (``src_stride``, ``dst_stride``) in 32-byte units; given neither, the whole
  source. A READ of the source and a WRITE of the destination; it never shortens itself to fit the destination.
- ``get_value`` / ``set_value`` (``GlobalTensor::GetValue``/``SetValue``): one scalar read or write of one element
  on PIPE_S (msSanitizer's scalar compute pipe, ``S_CAL``), aligned to its width.
- ``data_copy_pad`` (MOV_ALIGN, DataCopyPad): byte-granular bursts of ``len_bytes``; on UB each burst occupies
  ``ceil32(len_bytes)`` (data and pad), gaps in 32-byte units there and in bytes on GM.
- ``vector``: 8 blocks of 32 bytes per repeat per operand, strides per operand; ``count`` (MASK_COUNT) covers
  that many elements: full repeats, then full blocks, then a partial tail block; ``mask`` (MASK_NORM, element
  bits ≥ 16) covers each repeat up to its highest set bit.
- the pipe of a move follows its spaces (L1->L0/UB: MTE1, GM->local: MTE2, UB->GM/L1 and L1->GM: MTE3,
  L0C->UB and UB->UB: V, L0C->L1: FIX).
- synchronization instructions are one event each (docs/protocol.md §7.3): set/wait flags, hardware flags,
  FFTS cross-core set and wait, soft syncs (IB_SET, IB_WAIT, SyncAll), mstx cross-core set and wait, buffer
  get/release; ``sync_all`` is AscendC's SyncAll as msSanitizer sees it (a PIPE_ALL barrier, then an FFTS
  mode-0 set and a wait on the virtual flag 31).

A MIX kernel (``kernel_type="mix"``) runs ``body`` for its ``block_dim`` cube blocks (``block.block_type`` AIC,
``block.idx`` 0..block_dim-1), then for its ``2 * block_dim`` vector blocks (AIV, 0..2*block_dim-1).
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

import numpy as np

from client_shim.client import Client
from client_shim.events import (
    BlockType,
    EventKind,
    InstrName,
    Pipe,
    Register,
    Space,
    accesses,
    dccis,
    make_events,
    register_writes,
    syncs,
    tensors,
)
from sanitizerd_protocol import messages as m
from sanitizerd_protocol.records import CompareOp, signal_value, simt_dims_address, thread_position

_MOVE_PIPES = {
    (Space.L1, Space.L0A): Pipe.MTE1, (Space.L1, Space.L0B): Pipe.MTE1, (Space.L1, Space.L0C): Pipe.MTE1,
    (Space.L1, Space.UB): Pipe.MTE1, (Space.GM, Space.L0A): Pipe.MTE2, (Space.GM, Space.L0B): Pipe.MTE2,
    (Space.GM, Space.L1): Pipe.MTE2, (Space.GM, Space.UB): Pipe.MTE2, (Space.UB, Space.GM): Pipe.MTE3,
    (Space.UB, Space.L1): Pipe.MTE3, (Space.UB, Space.L0C): Pipe.MTE3, (Space.L1, Space.GM): Pipe.MTE3,
    (Space.L0C, Space.UB): Pipe.V, (Space.UB, Space.UB): Pipe.V, (Space.L0C, Space.L1): Pipe.FIX,
}  # fmt: skip


_L0 = (Space.L0A, Space.L0B, Space.L0C)
_FRACTAL = 512  # bytes a cube-side block (fractal) holds


def _ceil32(n: int) -> int:
    return -(-n // 32) * 32


def acl_size(size: int) -> int:
    """What msSanitizer's ACL hooks report for an ``aclrtMalloc`` of ``size`` bytes: ceil32(size) + 32 (reference
    §1.9: a 32 768-byte allocation leaks as 32 800 bytes in its report)."""
    return _ceil32(size) + 32


@dataclass(frozen=True, slots=True)
class Tensor:
    space: Space
    address: int
    size: int  # bytes
    dtype_bytes: int = 2

    def tile(self, offset: int, size: int) -> Tensor:
        """The ``size`` bytes at byte ``offset`` (not bounds-checked: that is the detectors' job). A view: a local
        tensor's tile declares nothing."""
        return replace(self, address=self.address + offset, size=size)

    @property
    def elements(self) -> int:
        return self.size // self.dtype_bytes


class KernelEmulator:
    """``acl_padding``: allocate as msSanitizer's ACL hooks report ``aclrtMalloc`` (``acl_size``), so that the
    sizes in leak and unused-memory reports are msSanitizer's numbers for the same program."""

    def __init__(
        self, client: Client, name: str, block_dim: int, kernel_type: str = "aiv", *, acl_padding: bool = False
    ) -> None:
        self.client = client
        self.name = name
        self.block_dim = block_dim
        self.kernel_type = kernel_type
        self.acl_padding = acl_padding

    def gm(self, address: int, size: int, dtype_bytes: int = 2, *, initialized: bool = True) -> Tensor:
        """A global tensor: allocated (padded as the ACL hooks pad it, with ``acl_padding``), and copied in from
        the host unless ``initialized`` is false. The tensor is the ``size`` bytes asked for."""
        location = _call_site(self.client)
        self.client.malloc(address, acl_size(size) if self.acl_padding else size, location=location)
        if initialized:
            self.client.store(address, size, location=location)
        return Tensor(Space.GM, address, size, dtype_bytes)

    def here(self) -> int:
        """The location id of the caller's line, for host calls made around the kernel (``client.free``)."""
        return _call_site(self.client)

    def blocks(self) -> list[tuple[BlockType, int]]:
        """The (block type, block index) of every block ``run`` runs, in the order it runs them: a MIX kernel's
        cube blocks, then its two vector blocks per AI core; otherwise ``block_dim`` blocks of the kernel's type."""
        if self.kernel_type == "mix":
            return [(BlockType.AIC, i) for i in range(self.block_dim)] + [
                (BlockType.AIV, i) for i in range(2 * self.block_dim)
            ]
        block_type = BlockType.AIC if self.kernel_type == "aic" else BlockType.AIV
        return [(block_type, i) for i in range(self.block_dim)]

    def run(self, body: Callable[[Block], None], *, timeout: float = 60) -> m.Verdict:
        """Run ``body`` once per block, stream every block's events, and wait for the kernel's verdict."""
        kernel = self.client.kernel_begin(self.name, self.block_dim, self.kernel_type)
        for block_type, index in self.blocks():
            block = Block(self, index, block_type)
            body(block)
            block.finish()
            block.flush(kernel)
        self.client.kernel_end(kernel)
        return self.client.wait_kernel(kernel, timeout=timeout)

    def run_unended(self, body: Callable[[Block], None]) -> tuple[int, int]:
        """Run ``body`` once per block and stream every block's events, but neither finish the blocks nor end the
        launch: what a kernel that hangs has sent. The launch's id and the events sent; the caller decides how the
        program hangs."""
        kernel = self.client.kernel_begin(self.name, self.block_dim, self.kernel_type)
        sent = 0
        for block_type, index in self.blocks():
            block = Block(self, index, block_type)
            body(block)
            sent += sum(part.size for part in block._events)
            block.flush(kernel)
        self.client.flush()
        return kernel, sent


class Block:
    """One block (AI core) of a kernel launch: its on-chip tensors and its instructions, in program order."""

    def __init__(self, kernel: KernelEmulator, idx: int, block_type: BlockType | None = None) -> None:
        self.kernel = kernel
        self.idx = idx
        if block_type is None:  # by the kernel's type; a MIX kernel's blocks are given theirs by ``run``
            block_type = BlockType.AIC if kernel.kernel_type == "aic" else BlockType.AIV
        self.block_type = block_type
        self._events: list[np.ndarray] = []

    # --- local tensors ---
    def tensor(self, space: Space, offset: int, size: int, dtype_bytes: int = 2) -> Tensor:
        """Declare a local tensor of this block: ``size`` bytes of ``space`` at ``offset`` (AscendC's
        ``LocalMemAllocator::Alloc``, ``TPipe::InitBuffer``/``TQue::AllocTensor``). It is the block's until the block
        ends or a later tensor overlaps it; on-chip accesses that start inside it are checked against it."""
        return self._declare(space, offset, size, dtype_bytes, self._common())

    def ub(self, offset: int, size: int, dtype_bytes: int = 2) -> Tensor:
        return self._declare(Space.UB, offset, size, dtype_bytes, self._common())

    def l1(self, offset: int, size: int, dtype_bytes: int = 2) -> Tensor:
        return self._declare(Space.L1, offset, size, dtype_bytes, self._common())

    def l0(self, space: Space, offset: int, size: int, dtype_bytes: int = 2) -> Tensor:
        return self._declare(space, offset, size, dtype_bytes, self._common())

    def _declare(self, space: Space, offset: int, size: int, dtype_bytes: int, common: dict[str, object]) -> Tensor:
        self._emit(tensors(space, offset, size, **common))  # type: ignore[arg-type]
        return Tensor(space, offset, size, dtype_bytes)

    # --- instructions ---
    def data_copy(
        self, dst: Tensor, src: Tensor, count: int | None = None, *, n_burst: int = 1, len_burst: int | None = None,
        src_stride: int = 0, dst_stride: int = 0,
    ) -> None:  # fmt: skip
        """DataCopy: ``count`` elements of the source's type (AscendC's ``DataCopy(dst, src, count)``: whole 32-byte
        blocks), or ``n_burst`` bursts of ``len_burst`` 32-byte blocks, gaps in 32-byte units; given neither, the
        whole source. What the call says is what moves, whatever the tensors' sizes: a copy larger than its
        destination is the overrun the detectors report. An L0A/L0B/L0C side moves whole 512-byte fractals, so its
        blocks are fractals."""
        if count is not None and len_burst is not None:
            raise TypeError("data_copy takes count or len_burst, not both")
        if count is not None:
            if count * src.dtype_bytes % 32:
                raise ValueError("DataCopy moves whole 32-byte blocks: use data_copy_pad for other lengths")
            blocks = count * src.dtype_bytes // 32
        else:
            blocks = len_burst if len_burst is not None else -(-src.size // 32)
        pipe = _MOVE_PIPES[(src.space, dst.space)]
        common = self._common()

        def side(kind: EventKind, tensor: Tensor, gap: int) -> np.ndarray:
            unit = _FRACTAL if tensor.space in _L0 else 32
            per_unit = unit // 32
            if blocks % per_unit or gap % per_unit:
                raise ValueError(f"a {tensor.space.name} side moves whole {unit}-byte fractals")
            return accesses(kind, tensor.space, tensor.address, unit, block_num=blocks // per_unit, repeat=n_burst,
                            repeat_stride=(blocks + gap) // per_unit, pipe=pipe, **common)  # fmt: skip

        self._emit(side(EventKind.READ, src, src_stride), side(EventKind.WRITE, dst, dst_stride))

    def data_copy_pad(
        self, dst: Tensor, src: Tensor, *, len_bytes: int, n_burst: int = 1, src_gap: int = 0, dst_gap: int = 0
    ) -> None:
        """DataCopyPad: byte-granular bursts; on UB each burst occupies ceil32(len_bytes), gaps in 32 B units."""
        pipe = _MOVE_PIPES[(src.space, dst.space)]
        common = self._common()

        def side(kind: EventKind, tensor: Tensor, gap: int) -> np.ndarray:
            if tensor.space == Space.GM:
                length, stride = len_bytes, len_bytes + gap
            else:
                length = _ceil32(len_bytes) if kind == EventKind.WRITE else len_bytes
                stride = _ceil32(len_bytes) + gap * 32
            return accesses(kind, tensor.space, tensor.address, 1, block_num=length, repeat=n_burst,
                            repeat_stride=stride, pipe=pipe, **common)  # fmt: skip

        self._emit(side(EventKind.READ, src, src_gap), side(EventKind.WRITE, dst, dst_gap))

    def vector(
        self, dst: Tensor, srcs: Sequence[Tensor], *, repeat: int = 1, block_stride: int = 1,
        repeat_stride: int = 8, count: int | None = None, mask: int | None = None, instr: InstrName | str = "",
    ) -> None:  # fmt: skip
        """A vector instruction over UB: reads every source, writes ``dst``, on PIPE_V. ``instr`` names it
        (``"VADD"``, msSanitizer's InstrName) in its events, for memcheck's register trace: it ran with the vector
        mask the block's ``set_register`` calls left."""
        common = self._common()
        parts = []
        for kind, tensor in [(EventKind.READ, s) for s in srcs] + [(EventKind.WRITE, dst)]:
            parts.extend(self._vector_operand(kind, tensor, repeat, block_stride, repeat_stride, count, mask, common))
        if instr:
            name = InstrName[instr] if isinstance(instr, str) else instr
            for part in parts:
                part["instr"] = name
        self._emit(*parts)

    def _vector_operand(
        self, kind: EventKind, t: Tensor, repeat: int, block_stride: int, repeat_stride: int, count: int | None,
        mask: int | None, common: dict[str, object],
    ) -> list[np.ndarray]:  # fmt: skip
        def op(address: int, block_size: int, block_num: int, repeats: int) -> np.ndarray:
            return accesses(kind, t.space, address, block_size, block_num=block_num, block_stride=block_stride,
                            repeat=repeats, repeat_stride=repeat_stride, pipe=Pipe.V, **common)  # fmt: skip

        if count is None and (mask is None or t.dtype_bytes < 2):
            return [op(t.address, 32, 8, repeat)]
        if count is not None:  # MASK_COUNT: full repeats, then full blocks, then a partial tail block
            total = count * t.dtype_bytes
            full_repeats, rest = divmod(total, 256)
            blocks, tail = divmod(rest, 32)
            step = repeat_stride * 32
            out = [op(t.address, 32, 8, full_repeats)] if full_repeats else []
            after = t.address + full_repeats * step
            if blocks:
                out.append(op(after, 32, blocks, 1))
            if tail:
                out.append(op(after + blocks * block_stride * 32, tail, 1, 1))
            return out
        # MASK_NORM with 16-bit or wider elements: each repeat up to the highest set bit of the mask.
        assert mask is not None
        per_repeat = mask.bit_length() * t.dtype_bytes
        blocks, tail = divmod(per_repeat, 32)
        out = [op(t.address, 32, blocks, repeat)] if blocks else []
        if tail:
            out.append(op(t.address + blocks * block_stride * 32, tail, 1, repeat))
        return out

    def get_value(self, tensor: Tensor, index: int) -> None:
        """``GlobalTensor::GetValue(index)``: a scalar read of one element on PIPE_S (msSanitizer's LD record: the
        scalar compute pipe, aligned to the element's width)."""
        self._scalar(EventKind.READ, tensor, index, self._common())

    def set_value(self, tensor: Tensor, index: int) -> None:
        """``GlobalTensor::SetValue(index, value)``: a scalar write of one element on PIPE_S."""
        self._scalar(EventKind.WRITE, tensor, index, self._common())

    def _scalar(self, kind: EventKind, tensor: Tensor, index: int, common: dict[str, object]) -> None:
        width = tensor.dtype_bytes
        self._emit(accesses(kind, tensor.space, tensor.address + index * width, width, pipe=Pipe.S_CAL,
                            align=width, **common))  # fmt: skip

    def dcci(self, tensor: Tensor, index: int = 0, *, entire: bool = False) -> None:
        """``DataCacheCleanAndInvalid``: the data cache line holding ``tensor[index]`` (or, ``entire``, the whole
        data cache) written back and dropped, so that a scalar access meets what other cores see."""
        address = tensor.address + index * tensor.dtype_bytes
        self._emit(dccis(address, entire=entire, space=tensor.space, **self._common()))

    def load_2d(self, dst: Tensor, src: Tensor) -> None:
        """LOAD_2D: a fractal copy from L1 into L0A/L0B on MTE1 (contiguous, the smaller tensor's size)."""
        size = min(dst.size, src.size)
        pipe = _MOVE_PIPES[(src.space, dst.space)]
        common = self._common()
        self._emit(
            accesses(EventKind.READ, src.space, src.address, size, pipe=pipe, **common),
            accesses(EventKind.WRITE, dst.space, dst.address, size, pipe=pipe, **common),
        )

    def mmad(self, c: Tensor, a: Tensor, b: Tensor, *, m: int, k: int, n: int, accumulate: bool = False) -> None:
        """MMAD on the cube unit (PIPE_M): C[m x n] (fp32, L0C) = A[m x k] (L0A) x B[k x n] (L0B), plus C when
        ``accumulate``. Operands are dense fractal tiles, so each is one contiguous range."""
        common = self._common()
        parts = [
            accesses(EventKind.READ, a.space, a.address, m * k * a.dtype_bytes, pipe=Pipe.M, **common),
            accesses(EventKind.READ, b.space, b.address, k * n * b.dtype_bytes, pipe=Pipe.M, **common),
        ]
        if accumulate:
            parts.append(accesses(EventKind.READ, c.space, c.address, m * n * c.dtype_bytes, pipe=Pipe.M, **common))
        parts.append(accesses(EventKind.WRITE, c.space, c.address, m * n * c.dtype_bytes, pipe=Pipe.M, **common))
        self._emit(*parts)

    def set_flag(self, src: Pipe, dst: Pipe, event_id: int = 0) -> None:
        self._emit(syncs(EventKind.SET_FLAG, src, dst, event_id, **self._common()))

    def wait_flag(self, src: Pipe, dst: Pipe, event_id: int = 0) -> None:
        self._emit(syncs(EventKind.WAIT_FLAG, src, dst, event_id, **self._common()))

    def pipe_barrier(self, pipe: Pipe) -> None:
        self._emit(syncs(EventKind.PIPE_BARRIER, pipe, **self._common()))

    def set_register(self, register: Register, value: int) -> None:
        """set_vector_mask, set_ctrl, ...: a control register the kernel should restore before it ends."""
        self._emit(register_writes(register, value, **self._common()))

    def hset_flag(self, src: Pipe, dst: Pipe, event_id: int = 0) -> None:
        """A hardware flag set (cube side): as ``set_flag``, in its own flag space."""
        self._emit(syncs(EventKind.HSET_FLAG, src, dst, event_id, **self._common()))

    def hwait_flag(self, src: Pipe, dst: Pipe, event_id: int = 0) -> None:
        """The wait of a hardware flag, paired with ``hset_flag``."""
        self._emit(syncs(EventKind.HWAIT_FLAG, src, dst, event_id, **self._common()))

    def cross_set(self, pipe: Pipe, flag: int, *, mode: int = 0, sub_blocks: int = 2) -> None:
        """ffts_cross_core_sync on ``pipe``: FFTS ``mode`` 0 (all vector or all cube blocks), 1 (the vector pair of
        an AI core), 2 (vector <-> cube of an AI core) or 4 (set_intra_block); ``sub_blocks`` = vector sub-blocks
        per AI core (1 or 2), for modes 1, 2 and 4."""
        self._emit(syncs(EventKind.CROSS_SET, pipe, Pipe.S, flag, mode=mode, block_num=sub_blocks, **self._common()))

    def cross_wait(self, flag: int, *, pipe: Pipe = Pipe.S, intra: bool = False) -> None:
        """wait_flag_dev on ``flag`` (mode 0), or wait_intra_block when ``intra`` (mode 4), on ``pipe``."""
        self._emit(syncs(EventKind.CROSS_WAIT, pipe, Pipe.S, flag, mode=4 if intra else 0, **self._common()))

    def sync_all(self) -> None:
        """SyncAll: every block waits for every other, as msSanitizer sees it: ``pipe_barrier(PIPE_ALL)`` (AscendC's
        SyncAll drains the block's pipes first), then an FFTS mode-0 set on the virtual flag 31 and a
        wait_flag_dev on that flag, both on PIPE_S (one instruction, so one serial number)."""
        self._emit(syncs(EventKind.PIPE_BARRIER, Pipe.ALL, **self._common()))
        common = self._common()
        self._emit(
            syncs(EventKind.CROSS_SET, Pipe.S, Pipe.S, 31, mode=0, **common),
            syncs(EventKind.CROSS_WAIT, Pipe.S, Pipe.S, 31, **common),
        )

    def ib_set(self, event_id: int) -> None:
        """IB_SET (soft sync): releases the IB_WAITs on ``event_id`` that name this block."""
        self._emit(syncs(EventKind.SOFT_SET, Pipe.S, Pipe.S, event_id, **self._common()))

    def ib_wait(self, event_id: int, block: int) -> None:
        """IB_WAIT (soft sync): waits for the IB_SET on ``event_id`` of ``block`` (a block of this block's type)."""
        self._emit(syncs(EventKind.SOFT_WAIT, Pipe.S, Pipe.S, event_id, address=block, **self._common()))

    def soft_sync_all(self, used: int = 0) -> None:
        """Software SyncAll over the blocks 0..used-1 of this block's type (0 = all of them)."""
        self._emit(syncs(EventKind.SOFT_SYNC_ALL, Pipe.S, Pipe.S, address=used, **self._common()))

    def mstx_cross_set(self, address: int, flag: int, pipe: Pipe = Pipe.S) -> None:
        """mstx cross-core set of the flag ``flag`` at ``address``, on ``pipe``."""
        self._emit(syncs(EventKind.MSTX_CROSS_SET, pipe, Pipe.S, flag, address=address, **self._common()))

    def mstx_cross_wait(self, address: int, flag: int, pipe: Pipe = Pipe.S, more: bool = False) -> None:
        """mstx cross-core wait for the flag ``flag`` at ``address``, on ``pipe``; ``more``: skippable when no set
        is pending ("is more", mode bit 0)."""
        self._emit(
            syncs(EventKind.MSTX_CROSS_WAIT, pipe, Pipe.S, flag, address=address, mode=int(more), **self._common())
        )

    def npu_barrier(self) -> None:
        """A barrier across the NPUs of the job (msSanitizer's mstx cross-NPU barrier): the block goes on once every
        device's blocks have reached it, so their shared-memory accesses before it come before this block's after."""
        self._emit(syncs(EventKind.NPU_BARRIER, Pipe.S, Pipe.S, **self._common()))

    def signal_set(self, address: int, value: int) -> None:
        """mstx signal set: stores ``value`` (an i64) at the signal ``address``, on PIPE_S_CAL as msSanitizer parses
        it; a block of another device that waits for it comes after this block's shared-memory accesses before it."""
        self._emit(syncs(EventKind.NPU_SIGNAL_SET, Pipe.S_CAL, Pipe.S, address=address, pc=signal_value(value),
                         **self._common()))  # fmt: skip

    def signal_wait(self, address: int, cmp_value: int, op: str | int = "EQ") -> None:
        """mstx signal wait on PIPE_S: goes on once the value stored at ``address`` compares true with ``cmp_value``
        under ``op`` (``EQ``, ``NE``, ``GT``, ``GE``, ``LT``, ``LE``: stored <op> cmp_value), or a CompareOp number
        (any u8: a native client may send what it likes)."""
        mode = int(CompareOp[op]) if isinstance(op, str) else op
        self._emit(syncs(EventKind.NPU_SIGNAL_WAIT, Pipe.S, Pipe.S, address=address, pc=signal_value(cmp_value),
                         mode=mode, **self._common()))  # fmt: skip

    def get_buf(self, buffer: int, pipe: Pipe) -> None:
        """GET_BUF (950): acquire ``buffer`` on ``pipe``, after the block's previous release of it."""
        self._emit(syncs(EventKind.GET_BUF, pipe, Pipe.S, buffer, **self._common()))

    def rls_buf(self, buffer: int, pipe: Pipe) -> None:
        """RLS_BUF (950): release ``buffer`` on ``pipe``."""
        self._emit(syncs(EventKind.RLS_BUF, pipe, Pipe.S, buffer, **self._common()))

    def queue(self, producer: Pipe, consumer: Pipe, event_id: int = 0) -> Queue:
        """A TQue between two pipes: ``enque`` after the producer's work, ``deque`` before the consumer's."""
        return Queue(self, producer, consumer, event_id)

    def set_atomic(self, on: bool) -> None:
        self._emit(syncs(EventKind.SET_ATOMIC, Pipe.S, **self._common(), mode=int(on)))

    def finish(self) -> None:
        """The block's end (msSanitizer's BLOCK_FINISH): its on-chip memory is gone. ``run`` calls it."""
        self._emit(make_events(kind=EventKind.BLOCK_FINISH, block_id=self.idx, block_type=self.block_type,
                               block_size=0, serial=self.kernel.client.next_serial()))  # fmt: skip

    # --- plumbing ---
    # --- SIMT (950 family) ---
    def simt(
        self, dims: int | tuple[int, int, int], thread_body: Callable[[SimtThread], None], *,
        alongside: Callable[[Block], None] | None = None,
    ) -> None:  # fmt: skip
        """Launch a SIMT function on this block: a ``SIMT_START`` with the thread dims, ``thread_body`` once per
        thread (x fastest, then y, then z), what the block's main scalar does while they run (``alongside``), then
        ``SIMT_END``. Each thread's instructions are its own (docs/protocol.md §7.8): threads are ordered among
        themselves only by ``SimtThread.syncthreads``, and not at all against the main scalar until the end."""
        x, y, z = (dims, 1, 1) if isinstance(dims, int) else dims
        self._emit(syncs(EventKind.SIMT_START, Pipe.S, address=simt_dims_address(x, y, z), **self._common()))
        threads = [SimtThread(self, linear, thread_position(linear, (x, y, z))) for linear in range(x * y * z)]
        for thread in threads:
            thread_body(thread)
        # Streamed barrier by barrier, as the threads run: what each thread did before its n-th __syncthreads()
        # precedes what any did after it, so order-reading checks (initcheck) see a write before a read it orders.
        for phase in range(max(len(thread.phases) for thread in threads)):
            for thread in threads:
                if phase < len(thread.phases):
                    self._events.extend(thread.phases[phase])
        if alongside is not None:
            alongside(self)
        self._emit(syncs(EventKind.SIMT_END, Pipe.S, **self._common()))

    def _common(self) -> dict[str, object]:
        """What every event of one instruction shares: block, serial number, source location."""
        client = self.kernel.client
        return {"block_id": self.idx, "block_type": self.block_type, "serial": client.next_serial(),
                "location": _call_site(client, depth=3)}  # fmt: skip

    def _emit(self, *parts: np.ndarray) -> None:
        self._events.extend(parts)

    def flush(self, kernel: int) -> None:
        if self._events:
            self.kernel.client.events(kernel, np.concatenate(self._events))
            self._events = []


class SimtThread:
    """One thread of a SIMT function on a block: ``x``, ``y``, ``z`` its position, ``linear`` its index (x fastest).
    Its loads and stores are one element each, as msSanitizer's SIMT load/store probes record them."""

    def __init__(self, block: Block, linear: int, position: tuple[int, int, int]) -> None:
        self.block, self.linear = block, linear
        self.x, self.y, self.z = position
        self.phases: list[list[np.ndarray]] = [[]]  # its events, split after each __syncthreads()

    def load(self, tensor: Tensor, index: int) -> None:
        """A thread's load of element ``index`` of a GM or UB tensor (LDG / LDS)."""
        self._access(EventKind.READ, tensor, index, False, self._common())

    def store(self, tensor: Tensor, index: int) -> None:
        """A thread's store of element ``index`` (STG / STS)."""
        self._access(EventKind.WRITE, tensor, index, False, self._common())

    def atomic_add(self, tensor: Tensor, index: int) -> None:
        """A thread's atomic read-modify-write of element ``index`` (SIMT_ATOM): atomic against other atomics."""
        self._access(EventKind.WRITE, tensor, index, True, self._common())

    def syncthreads(self) -> None:
        """``__syncthreads()``: its call site is the barrier; every thread of the block must reach it as often."""
        self.phases[-1].append(syncs(EventKind.SYNC_THREADS, Pipe.S, **self._common()))
        self.phases.append([])

    def _access(self, kind: EventKind, tensor: Tensor, index: int, atomic: bool, common: dict[str, object]) -> None:
        width = tensor.dtype_bytes
        self.phases[-1].append(accesses(kind, tensor.space, tensor.address + index * width, width, pipe=Pipe.S,
                                        align=width, atomic=atomic, **common))  # fmt: skip

    def _common(self) -> dict[str, object]:
        client = self.block.kernel.client
        return {"block_id": self.block.idx, "block_type": self.block.block_type, "serial": client.next_serial(),
                "location": _call_site(client, depth=3), "thread": self.linear + 1}  # fmt: skip


class Queue:
    """AscendC's TQue hand-over between two pipes: EnQue is a set_flag from the producer's pipe to the consumer's,
    DeQue the matching wait_flag, as the library emits them."""

    def __init__(self, block: Block, producer: Pipe, consumer: Pipe, event_id: int) -> None:
        self.block, self.producer, self.consumer, self.event_id = block, producer, consumer, event_id

    def enque(self) -> None:
        self.block._emit(syncs(EventKind.SET_FLAG, self.producer, self.consumer, self.event_id, **self.block._common()))

    def deque(self) -> None:
        self.block._emit(
            syncs(EventKind.WAIT_FLAG, self.producer, self.consumer, self.event_id, **self.block._common())
        )


def _call_site(client: Client, depth: int = 2) -> int:
    """The location id of the user's line that called the emulator (``depth`` frames up)."""
    frame = sys._getframe(depth)
    return client.location(frame.f_code.co_filename, frame.f_lineno, 0, frame.f_code.co_name)
