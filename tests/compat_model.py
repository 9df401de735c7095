"""Test helpers for msSanitizer record buffers: a BUILDER that packs slots from field dicts, and a byte-level MODEL of
reference §1.7 that says, record by record, which bytes of which space each one reads and writes, on which pipe.

Both are written independently of ``sanitizerd.compat``: the builder packs with ``struct`` at the offsets measured
on msSanitizer's headers (not with the decoder's numpy dtypes), and the model follows msSanitizer's MemOpInfo
formulas in plain Python loops (byte = addr + r*repeatStride*blockSize + i*blockStride*blockSize + k), so that a
mistake in the decoder shows as a difference rather than being repeated here.

Other families add their layouts to ``LAYOUTS`` and their rules to ``RULES`` (``layout(...)``, ``rule(...)``).
"""

from __future__ import annotations

import struct
from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import numpy as np

SECURITY = 0x5A5A5A5A5A5A5A5A
GLOBAL_HEAD = 38_528
BLOCK_HEAD = 128

# RecordType values (msSanitizer record_defs.h), spelled out here so the tests do not lean on the decoder's enum.
T = {
    "LOAD": 0, "STORE": 1, "LD": 2, "LD_IO": 3, "ST": 4, "ST_IO": 5, "STP": 6, "STI": 7, "STI_IO": 8, "LDP": 9,
    "ST_ATOMIC": 10, "STI_ATOMIC": 11, "ST_DEV": 12, "LD_DEV": 13,
    "DMA_MOV": 100, "MOV_ALIGN": 101, "MOV_ALIGN_V2": 102, "VEC_DUP": 103, "DMA_MOV_ND2NZ": 114, "MOV_BT": 115,
    "MOV_FP": 117, "DMA_MOV_CONV_RELU": 121, "DMA_MOV_DEPTH_WISE": 124, "ND_DMA_OUT_TO_UB": 125, "DC_PRELOAD": 126,
    "DMA_MOV_ND2NZ_D": 127, "DMA_MOV_DN2NZ_D": 128, "SCALAR_RED": 129, "SCALAR_ATOM": 130, "LDVA": 131,
    "MOV_L1_TO_UB": 132, "MOV_UB_TO_L1": 133, "MOV_UB_TO_UB": 134, "MOV_CBUF_TO_BT": 135, "MOV_CBUF_TO_FB": 136,
    "FIX_L0C_TO_L1": 140, "FIX_L0C_TO_UB": 141,
    "UNARY_OP": 10000, "BINARY_OP": 10003,
    "SET_FLAG": 20000, "WAIT_FLAG": 20001, "HSET_FLAG": 20002, "HWAIT_FLAG": 20003, "PIPE_BARRIER": 20004,
    "FFTS_SYNC": 20005, "WAIT_FLAG_DEV": 20006, "SET_ATOMIC": 20007, "IB_SET_STUB": 20008, "IB_WAIT_STUB": 20009,
    "SYNC_ALL_STUB": 20010, "WAIT_FLAG_DEV_PIPE": 20011, "WAIT_FLAG_DEVI_PIPE": 20012, "SET_INTRA_BLOCK": 20013,
    "WAIT_INTRA_BLOCK": 20014, "SET_INTRA_BLOCKI": 20015, "WAIT_INTRA_BLOCKI": 20016, "MSTX_STUB": 20017,
    "GET_BUF": 20021, "GET_BUFI": 20022, "RLS_BUF": 20023, "RLS_BUFI": 20024, "SET_FLAGI": 20025,
    "WAIT_FLAGI": 20026, "HSET_FLAGI": 20027, "HWAIT_FLAGI": 20028, "SET_FLAG_V": 20029, "SET_FLAGI_V": 20030,
    "WAIT_FLAG_V": 20031, "WAIT_FLAGI_V": 20032, "FFTS_SYNC_V": 20033, "WAIT_FLAG_DEV_PIPE_V": 20034,
    "WAIT_FLAG_DEVI_PIPE_V": 20035, "SET_INTRA_BLOCK_V": 20036, "SET_INTRA_BLOCKI_V": 20037,
    "WAIT_INTRA_BLOCK_V": 20038, "WAIT_INTRA_BLOCKI_V": 20039, "GET_BUF_V": 20040, "GET_BUFI_V": 20041,
    "RLS_BUF_V": 20042, "RLS_BUFI_V": 20043, "ONLINE_ERROR": 60000,
    "SET_VECTOR_MASK_0": 70001, "SET_VECTOR_MASK_1": 70002, "SET_CTRL": 70003, "SET_FFTS_BASE_ADDR": 70004,
    "SET_FPC": 70005, "SET_QUANT_PRE": 70006, "SET_QUANT_POST": 70007, "SET_LRELU_ALPHA": 70008,
}  # fmt: skip
NAME = {v: k for k, v in T.items()}

# MemType (u8 in records) and the event Space (= msSanitizer AddressSpace) numbering.
MEM = {"L1": 0, "L0A": 1, "L0B": 2, "L0C": 3, "UB": 4, "BT": 5, "GM": 6, "PRIVATE": 7, "FB": 8, "INVALID": 9}
SPACE = {"PRIVATE": 0, "GM": 1, "L1": 2, "L0A": 3, "L0B": 4, "L0C": 5, "UB": 6, "BT": 7, "FB": 8}
MEM_SPACE = {MEM[k]: SPACE[k] for k in SPACE}
PIPE = {"S": 0, "V": 1, "M": 2, "MTE1": 3, "MTE2": 4, "MTE3": 5, "ALL": 6, "MTE4": 7, "MTE5": 8, "V2": 9,
        "FIX": 10, "S_CAL": 11}  # fmt: skip

# Event kinds (sanitizerd_protocol.records.EventKind), spelled out for the same reason.
READ, WRITE = 0, 1
TENSOR, TENSOR_READ, TENSOR_WRITE = 33, 34, 35  # a local tensor; an annotated instruction's accesses of its operands
K = {"SET_FLAG": 16, "WAIT_FLAG": 17, "PIPE_BARRIER": 18, "CROSS_SET": 19, "CROSS_WAIT": 20, "SET_ATOMIC": 21,
     "SET_REGISTER": 22, "BLOCK_FINISH": 23, "HSET_FLAG": 24, "HWAIT_FLAG": 25, "SOFT_SET": 26, "SOFT_WAIT": 27,
     "SOFT_SYNC_ALL": 28, "MSTX_CROSS_SET": 29, "MSTX_CROSS_WAIT": 30, "GET_BUF": 31, "RLS_BUF": 32}  # fmt: skip


# --- the builder -------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Layout:
    size: int  # sizeof(payload struct)
    location: int | None  # offset of Location {u64 fileNo, lineNo, pc; u16 blockId}
    fields: dict[str, tuple[str, int]]  # name -> (struct format, offset)


LAYOUTS: dict[int, Layout] = {}


def layout(names: Iterable[str], struct_size: int, location: int | None, **fields: tuple[str, int]) -> None:
    """Register the payload layout of record types ``names``: ``struct_size`` = sizeof(struct)."""
    for name in names:
        LAYOUTS[T[name]] = Layout(struct_size, location, fields)


_SCALAR = ("LOAD", "STORE", "LD", "LD_IO", "ST", "ST_IO", "STP", "STI", "STI_IO", "LDP", "ST_ATOMIC", "STI_ATOMIC",
           "ST_DEV", "LD_DEV", "LDVA")  # fmt: skip
layout(_SCALAR, 56, 16, addr=("<Q", 0), size=("<Q", 8), space=("<i", 48), data_type=("B", 52), align=("B", 53))
layout(("SCALAR_RED", "SCALAR_ATOM"), 56, 16, addr=("<Q", 0), size=("<Q", 8), is_atom=("B", 48))
layout(("DC_PRELOAD",), 48, 0, addr=("<Q", 32), offset=("<q", 40))
layout(
    ("DMA_MOV",), 64, 16, dst=("<Q", 0), src=("<Q", 8), n_burst=("<H", 48), len_burst=("<H", 50),
    src_stride=("<H", 52), dst_stride=("<H", 54), dst_mem=("B", 56), src_mem=("B", 57), pad_mode=("B", 58),
    byte_mode=("B", 59),
)  # fmt: skip
_SYNC = ("SET_FLAG", "WAIT_FLAG", "SET_FLAGI", "WAIT_FLAGI", "SET_FLAG_V", "WAIT_FLAG_V", "SET_FLAGI_V",
         "WAIT_FLAGI_V")  # fmt: skip
layout(_SYNC, 56, 0, src=("<I", 32), dst=("<I", 36), event_id=("<Q", 40), generated=("B", 48))

layout(("HSET_FLAG", "HWAIT_FLAG", "HSET_FLAGI", "HWAIT_FLAGI"), 56, 0, src=("<I", 32), dst=("<I", 36),
       event_id=("<Q", 40), memory=("B", 48), v=("B", 49))  # fmt: skip
layout(("PIPE_BARRIER",), 40, 0, pipe=("<I", 32))
layout(("FFTS_SYNC", "FFTS_SYNC_V"), 40, 0, dst=("<I", 32), mode=("B", 36), flag=("B", 37), sub_blocks=("B", 38))
layout(("WAIT_FLAG_DEV",), 40, 0, flag=("B", 32))
layout(("WAIT_FLAG_DEV_PIPE", "WAIT_FLAG_DEVI_PIPE", "WAIT_FLAG_DEV_PIPE_V", "WAIT_FLAG_DEVI_PIPE_V"), 40, 0,
       flag=("B", 32), pipe=("<I", 36))  # fmt: skip
_INTRA = ("SET_INTRA_BLOCK", "SET_INTRA_BLOCKI", "SET_INTRA_BLOCK_V", "SET_INTRA_BLOCKI_V", "WAIT_INTRA_BLOCK",
          "WAIT_INTRA_BLOCKI", "WAIT_INTRA_BLOCK_V", "WAIT_INTRA_BLOCKI_V")  # fmt: skip
layout(_INTRA, 56, 0, pipe=("<I", 32), sync_id=("<Q", 40), sub_blocks=("B", 48))
layout(("SET_ATOMIC",), 40, 0, mode=("B", 32))
layout(("IB_SET_STUB", "IB_WAIT_STUB", "SYNC_ALL_STUB"), 48, 0, wait_core=("<H", 32), used_cores=("<i", 36),
       event_id=("<i", 40), aiv_only=("B", 44))  # fmt: skip
_BUF = ("GET_BUF", "GET_BUFI", "GET_BUF_V", "GET_BUFI_V", "RLS_BUF", "RLS_BUFI", "RLS_BUF_V", "RLS_BUFI_V")
layout(_BUF, 56, 0, pipe=("<I", 32), buf_id=("<Q", 40), mode=("B", 48))
_REGS = ("SET_VECTOR_MASK_0", "SET_VECTOR_MASK_1", "SET_CTRL", "SET_FFTS_BASE_ADDR", "SET_FPC", "SET_QUANT_PRE",
         "SET_QUANT_POST", "SET_LRELU_ALPHA")  # fmt: skip
layout(_REGS, 56, 0, value_type=("<Q", 32), value=("<Q", 40), core_slot=("<q", 48))

layout(("MOV_ALIGN",), 72, 16, dst=("<Q", 0), src=("<Q", 8), src_gap=("<I", 48), dst_gap=("<I", 52),
       len_burst=("<I", 56), n_burst=("<H", 60), dst_mem=("B", 62), src_mem=("B", 63), data_type=("B", 64),
       left_pad=("B", 65), right_pad=("B", 66))  # fmt: skip

layout(("MOV_L1_TO_UB", "MOV_UB_TO_L1", "MOV_UB_TO_UB"), 64, 16, dst=("<Q", 0), src=("<Q", 8), n_burst=("<H", 48),
       len_burst=("<H", 50), src_gap=("<H", 52), dst_gap=("<H", 54), dst_mem=("B", 56), src_mem=("B", 57))  # fmt: skip
layout(("MOV_BT",), 64, 16, dst=("<Q", 0), src=("<Q", 8), src_gap=("<H", 48), dst_gap=("<H", 50),
       len_burst=("<H", 52), n_burst=("<H", 54), conv_control=("<H", 56), dst_mem=("B", 58),
       src_mem=("B", 59))  # fmt: skip
layout(("MOV_CBUF_TO_BT",), 64, 0, dst=("<Q", 32), src=("<Q", 40), n_burst=("<H", 48), len_burst=("<H", 50),
       src_gap=("<H", 52), dst_gap=("<H", 54), data_type=("B", 56), cvt_enable=("B", 57))  # fmt: skip
layout(("MOV_CBUF_TO_FB",), 64, 0, dst=("<Q", 32), src=("<Q", 40), n_burst=("<H", 48), len_burst=("<H", 50),
       src_stride=("<H", 52), dst_stride=("<H", 54), dst_mem_block=("B", 56))  # fmt: skip

layout(("DMA_MOV_ND2NZ",), 72, 16, dst=("<Q", 0), src=("<Q", 8), nd_num=("<H", 48), n_value=("<H", 50),
       d_value=("<H", 52), src_nd_matrix_stride=("<H", 54), src_d_value=("<H", 56), dst_nz_c0_stride=("<H", 58),
       dst_nz_n_stride=("<H", 60), dst_nz_matrix_stride=("<H", 62), src_mem=("B", 64), dst_mem=("B", 65),
       data_type=("B", 66))  # fmt: skip

layout(("MOV_ALIGN_V2",), 120, 16, dst=("<Q", 0), src=("<Q", 8), loop1_dst_stride=("<Q", 48),
       loop2_dst_stride=("<Q", 56), dst_stride=("<Q", 64), src_stride=("<Q", 72), loop1_src_stride=("<Q", 80),
       loop2_src_stride=("<Q", 88), n_burst=("<I", 96), len_burst=("<I", 100), loop1_size=("<I", 104),
       loop2_size=("<I", 108), dst_mem=("B", 112), src_mem=("B", 113), data_type=("B", 114), left_pad=("B", 115),
       right_pad=("B", 116))  # fmt: skip

layout(("DMA_MOV_CONV_RELU", "DMA_MOV_DEPTH_WISE"), 64, 16, dst=("<Q", 0), src=("<Q", 8), n_burst=("<H", 48),
       len_burst=("<H", 50), src_stride=("<H", 52), dst_stride=("<H", 54), cr_mode=("B", 56), dst_mem=("B", 57),
       src_mem=("B", 58), src_type=("B", 59), dst_type=("B", 60))  # fmt: skip

layout(("MOV_FP", "FIX_L0C_TO_L1", "FIX_L0C_TO_UB"), 80, 16, dst=("<Q", 0), src=("<Q", 8), dst_stride=("<I", 48),
       dst_nd_stride=("<I", 52), src_stride=("<H", 56), n_size=("<H", 58), m_size=("<H", 60), nd_num=("<H", 62),
       src_nd_stride=("<H", 64), src_nz_c0_stride=("<H", 66), quant_pre_bits=("<H", 68), unit_flag=("B", 70),
       int8_merge=("B", 71), int4_merge=("B", 72), channel_split=("B", 73), nz2nd=("B", 74), nz2dn=("B", 75),
       c310=("B", 76))  # fmt: skip

layout(("DMA_MOV_ND2NZ_D", "DMA_MOV_DN2NZ_D"), 88, 16, dst=("<Q", 0), src=("<Q", 8), loop4_src_stride=("<Q", 48),
       loop1_src_stride=("<Q", 56), d_value=("<I", 64), n_value=("<H", 68), nd_num=("<H", 70),
       loop2_dst_stride=("<H", 72), loop3_dst_stride=("<H", 74), loop4_dst_stride=("<H", 76), small_c0=("B", 78),
       src_mem=("B", 79), dst_mem=("B", 80), data_type=("B", 81))  # fmt: skip

_ND_LOOPS: dict[str, tuple[str, int]] = {}
for _k in range(5):
    _at = 48 + 24 * _k
    _ND_LOOPS |= {f"src_stride{_k}": ("<Q", _at), f"dst_stride{_k}": ("<I", _at + 8), f"size{_k}": ("<I", _at + 12),
                  f"left{_k}": ("B", _at + 16), f"right{_k}": ("B", _at + 17)}  # fmt: skip
layout(("ND_DMA_OUT_TO_UB",), 176, 16, dst=("<Q", 0), src=("<Q", 8), data_type=("B", 168), **_ND_LOOPS)


def record(name: str | int, **values: int) -> bytes:
    """``[u32 type][payload]`` with ``values`` at their offsets (unnamed fields are zero). Location fields:
    ``file_no``, ``line_no``, ``pc``, ``block_id``."""
    rtype = T[name] if isinstance(name, str) else int(name)
    lay = LAYOUTS[rtype]
    payload = bytearray(lay.size)
    for key, value in values.items():
        if key in ("file_no", "line_no", "pc", "block_id"):
            assert lay.location is not None
            at = lay.location + {"file_no": 0, "line_no": 8, "pc": 16, "block_id": 24}[key]
            struct.pack_into("<H" if key == "block_id" else "<Q", payload, at, value)
            continue
        fmt, at = lay.fields[key]
        struct.pack_into(fmt, payload, at, value)
    return struct.pack("<I", rtype) + bytes(payload)


def heads(
    *,
    record_count: int,
    record_write_count: int | None = None,
    offset: int,
    write_offset: int | None = None,
    block_id: int = 0,
    block_type: int = 0,
    vec_sub_block_dim: int = 2,
    security: int = SECURITY,
    cache_size: int = 100,
    total_block_dim: int = 3,
) -> bytes:
    """RecordGlobalHead + RecordBlockHead."""
    g = bytearray(GLOBAL_HEAD)
    struct.pack_into("<Q", g, 0, security)
    struct.pack_into("<Ih", g, 8, cache_size, -1)
    struct.pack_into("<Q", g, 24, total_block_dim)
    b = bytearray(BLOCK_HEAD)
    wc = record_count if record_write_count is None else record_write_count
    wo = offset if write_offset is None else write_offset
    struct.pack_into("<QQQQ", b, 0, record_count, wc, offset, wo)
    struct.pack_into("<H", b, 40, block_id)
    struct.pack_into("<BB", b, 48, block_type, vec_sub_block_dim)
    return bytes(g) + bytes(b)


def slot(records: list[bytes], **head: int) -> bytes:
    """A whole slot: heads (counts and offsets from ``records`` unless given) and the record region."""
    region = b"".join(records)
    head.setdefault("record_count", len(records))
    head.setdefault("offset", len(region))
    return heads(**head) + region


# --- the model ---------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Access:
    kind: int  # READ / WRITE
    space: int
    pipe: int
    block: int
    nbytes: frozenset[int]


@dataclass(frozen=True)
class Sync:
    kind: int
    pipe: int
    dst_pipe: int = 0
    event_id: int = 0
    mode: int = 0
    address: int = 0
    block: int = 0


def pattern(addr: int, block_num: int, block_size: int, block_stride: int, repeat: int, repeat_stride: int) -> set[int]:
    """msSanitizer's MemOpInfo as a byte set."""
    out: set[int] = set()
    for r in range(repeat):
        for i in range(block_num):
            start = addr + r * repeat_stride * block_size + i * block_stride * block_size
            out.update(range(start, start + block_size))
    return out


Rule = Callable[[str, dict[str, int]], list[Access | Sync]]
RULES: dict[str, Rule] = {}


def rule(*names: str) -> Callable[[Rule], Rule]:
    def register(fn: Rule) -> Rule:
        for name in names:
            RULES[name] = fn
        return fn

    return register


def _f(fields: dict[str, int], key: str) -> int:
    return int(fields.get(key, 0))


QUERY_PIPE = {
    ("L1", "L0A"): "MTE1", ("L1", "L0B"): "MTE1", ("L1", "L0C"): "MTE1", ("L1", "UB"): "MTE1", ("L1", "BT"): "MTE1",
    ("L1", "GM"): "MTE3", ("GM", "L0A"): "MTE2", ("GM", "L0B"): "MTE2", ("GM", "L1"): "MTE2", ("GM", "UB"): "MTE2",
    ("UB", "GM"): "MTE3", ("UB", "L1"): "MTE3", ("UB", "L0C"): "MTE3", ("L0C", "UB"): "V", ("UB", "UB"): "V",
    ("L0C", "L1"): "FIX", ("L1", "FB"): "FIX",
}  # fmt: skip
_MEM_NAME = {v: k for k, v in MEM.items()}


def move_pipe(src_mem: int, dst_mem: int) -> int | None:
    pair = (_MEM_NAME.get(src_mem), _MEM_NAME.get(dst_mem))
    return PIPE[QUERY_PIPE[pair]] if pair in QUERY_PIPE else None  # type: ignore[index]


@rule(*_SCALAR[:-1])
def _scalar(name: str, f: dict[str, int]) -> list[Access | Sync]:
    space = _f(f, "space")
    if space not in SPACE.values():
        return []
    kind = READ if name in ("LOAD", "LD", "LD_IO", "LDP", "LD_DEV") else WRITE
    return [
        Access(
            kind, space, PIPE["S_CAL"], _f(f, "block_id"), frozenset(pattern(_f(f, "addr"), 1, _f(f, "size"), 1, 1, 1))
        )
    ]


@rule("DMA_MOV")
def _dma_mov(name: str, f: dict[str, int]) -> list[Access | Sync]:
    src, dst = _f(f, "src_mem"), _f(f, "dst_mem")
    pipe = move_pipe(src, dst)
    if pipe is None:
        return []
    nb, lb, ss, ds = _f(f, "n_burst"), _f(f, "len_burst"), _f(f, "src_stride"), _f(f, "dst_stride")
    block = _f(f, "block_id")
    if _f(f, "byte_mode"):
        rn = (lb + 31) // 32 * 32
        read = pattern(_f(f, "src"), rn, 1, 1, nb, rn + ss * 32)
        write = pattern(_f(f, "dst"), lb, 1, 1, nb, lb + ds * 32)
    elif 1 <= _f(f, "pad_mode") <= 5:
        scale = {1: 32, 2: 16, 3: 8, 4: 4, 5: 2}[_f(f, "pad_mode")]
        read = pattern(_f(f, "src"), 1, nb * 32 // scale, 1, 1, 0)
        write = pattern(_f(f, "dst"), 1, 32, 1, nb, 1 + ds)
    elif 6 <= _f(f, "pad_mode") <= 8:
        scale = {6: 8, 7: 4, 8: 2}[_f(f, "pad_mode")]
        read = pattern(_f(f, "src"), 1, 32, 1, nb, 1 + ss)
        write = pattern(_f(f, "dst"), 1, nb * 32 // scale, 1, 1, 0)
    elif _f(f, "pad_mode") == 0:
        read = pattern(_f(f, "src"), lb, 32, 1, nb, lb + ss)
        write = pattern(_f(f, "dst"), lb, 32, 1, nb, lb + ds)
    else:
        return []
    return [
        Access(READ, MEM_SPACE[src], pipe, block, frozenset(read)),
        Access(WRITE, MEM_SPACE[dst], pipe, block, frozenset(write)),
    ]


@rule("SET_FLAG", "SET_FLAGI", "SET_FLAG_V", "SET_FLAGI_V")
def _set_flag(name: str, f: dict[str, int]) -> list[Access | Sync]:
    return [Sync(K["SET_FLAG"], _f(f, "src"), _f(f, "dst"), _f(f, "event_id"), block=_f(f, "block_id"))]


@rule("WAIT_FLAG", "WAIT_FLAGI", "WAIT_FLAG_V", "WAIT_FLAGI_V")
def _wait_flag(name: str, f: dict[str, int]) -> list[Access | Sync]:
    return [Sync(K["WAIT_FLAG"], _f(f, "src"), _f(f, "dst"), _f(f, "event_id"), block=_f(f, "block_id"))]


def _c32(x: int) -> int:
    return (x + 31) // 32 * 32


@rule("MOV_ALIGN")
def _mov_align(name: str, f: dict[str, int]) -> list[Access | Sync]:
    src, dst = _f(f, "src_mem"), _f(f, "dst_mem")
    pipe = move_pipe(src, dst)
    lb, nb = _f(f, "len_burst"), _f(f, "n_burst")
    if pipe is None or lb == 0:
        return []
    rs = lb + _f(f, "src_gap") if src == MEM["GM"] else _c32(lb) + _f(f, "src_gap") * 32
    size = {1: 1, 2: 2, 3: 4}.get(_f(f, "data_type"), 1)
    ub = _c32(lb + (_f(f, "left_pad") + _f(f, "right_pad")) * size)
    wn = lb if dst == MEM["GM"] else ub
    ws = lb + _f(f, "dst_gap") if dst == MEM["GM"] else ub + _f(f, "dst_gap") * 32
    block = _f(f, "block_id")
    return [Access(READ, MEM_SPACE[src], pipe, block, frozenset(pattern(_f(f, "src"), lb, 1, 1, nb, rs))),
            Access(WRITE, MEM_SPACE[dst], pipe, block, frozenset(pattern(_f(f, "dst"), wn, 1, 1, nb, ws)))]  # fmt: skip


@rule("MOV_L1_TO_UB", "MOV_UB_TO_L1", "MOV_UB_TO_UB")
def _mov_l1_ub(name: str, f: dict[str, int]) -> list[Access | Sync]:
    src, dst = _f(f, "src_mem"), _f(f, "dst_mem")
    pipe = move_pipe(src, dst)
    lb, nb = _f(f, "len_burst"), _f(f, "n_burst")
    if pipe is None or lb == 0:
        return []
    block = _f(f, "block_id")
    read = pattern(_f(f, "src"), lb, 32, 1, nb, lb + _f(f, "src_gap"))
    write = pattern(_f(f, "dst"), lb, 32, 1, nb, lb + _f(f, "dst_gap"))
    return [Access(READ, MEM_SPACE[src], pipe, block, frozenset(read)),
            Access(WRITE, MEM_SPACE[dst], pipe, block, frozenset(write))]  # fmt: skip


@rule("MOV_BT")
def _mov_bt(name: str, f: dict[str, int]) -> list[Access | Sync]:
    src, dst = _f(f, "src_mem"), _f(f, "dst_mem")
    pipe = move_pipe(src, dst)
    lb, nb = _f(f, "len_burst"), _f(f, "n_burst")
    if pipe is None or lb == 0:
        return []
    nbytes = pattern(_f(f, "src"), lb * 2, 32, 1, nb, lb * 2 + _f(f, "src_gap"))
    return [Access(READ, MEM_SPACE[src], pipe, _f(f, "block_id"), frozenset(nbytes))]


@rule("MOV_CBUF_TO_BT")
def _cbuf_bt(name: str, f: dict[str, int]) -> list[Access | Sync]:
    lb, nb, dt = _f(f, "len_burst"), _f(f, "n_burst"), _f(f, "data_type")
    if (dt in (16, 18) and (lb % 2 or _f(f, "cvt_enable"))) or _f(f, "dst_gap") % 2:  # S32 / FLOAT
        return []
    wl = lb * 2 if dt in (9, 12) else lb  # B16 / F16
    block = _f(f, "block_id")
    read = pattern(_f(f, "src"), lb, 32, 1, nb, lb + _f(f, "src_gap"))
    write = pattern(_f(f, "dst"), wl, 32, 1, nb, wl + _f(f, "dst_gap"))
    return [Access(READ, SPACE["L1"], PIPE["MTE1"], block, frozenset(read)),
            Access(WRITE, SPACE["BT"], PIPE["MTE1"], block, frozenset(write))]  # fmt: skip


@rule("MOV_CBUF_TO_FB")
def _cbuf_fb(name: str, f: dict[str, int]) -> list[Access | Sync]:
    lb, nb, mb = _f(f, "len_burst"), _f(f, "n_burst"), _f(f, "dst_mem_block")
    if (mb == 0 and (lb % 2 or _f(f, "dst_stride") % 2)) or mb >= 2:
        return []
    read: set[int] = set()
    for i in range(nb):
        read |= pattern(_f(f, "src") + i * 32 * _f(f, "src_stride"), 1, lb * 64, 1, 1, 1)
    write = pattern(_f(f, "dst"), lb, 64, 1, nb, _f(f, "dst_stride"))
    block = _f(f, "block_id")
    return [Access(READ, SPACE["L1"], PIPE["FIX"], block, frozenset(read)),
            Access(WRITE, SPACE["FB"], PIPE["FIX"], block, frozenset(write))]  # fmt: skip


@rule("DMA_MOV_ND2NZ")
def _nd2nz(name: str, f: dict[str, int]) -> list[Access | Sync]:
    src, dst = _f(f, "src_mem"), _f(f, "dst_mem")
    pipe = move_pipe(src, dst)
    if pipe is None:
        return []
    size = {1: 1, 2: 2, 3: 4}.get(_f(f, "data_type"), 1)
    nd, n, d = _f(f, "nd_num"), _f(f, "n_value"), _f(f, "d_value")
    read: set[int] = set()
    for i in range(nd):
        read |= pattern(_f(f, "src") + _f(f, "src_nd_matrix_stride") * size * i, d, size, 1, n, _f(f, "src_d_value"))
    write: set[int] = set()
    for c in range((d * size + 31) // 32):
        write |= pattern(_f(f, "dst") + 32 * _f(f, "dst_nz_c0_stride") * c, n, 32, _f(f, "dst_nz_n_stride"), nd,
                         _f(f, "dst_nz_matrix_stride") * size // 32)  # fmt: skip
    block = _f(f, "block_id")
    columns = (d * size + 31) // 32
    # msSanitizer loops over the matrices (reads) and the columns (writes): none, no event at all.
    return ([Access(READ, MEM_SPACE[src], pipe, block, frozenset(read))] if nd else []) + (
        [Access(WRITE, MEM_SPACE[dst], pipe, block, frozenset(write))] if columns else [])  # fmt: skip


@rule("MOV_ALIGN_V2")
def _mov_align_v2(name: str, f: dict[str, int]) -> list[Access | Sync]:
    g = lambda key: _f(f, key)  # noqa: E731
    lb, nb, l1, l2 = g("len_burst"), g("n_burst"), g("loop1_size"), g("loop2_size")
    src, dst = g("src_mem"), g("dst_mem")
    if lb == 0:
        return []
    checked_loop = l1 > 0 and l2 > 1
    padded = g("left_pad") > 0 or g("right_pad") > 0
    size = {1: 1, 2: 2, 3: 4}.get(g("data_type"), 1)
    if src == MEM["GM"]:
        if checked_loop and padded:
            return []
        if padded and (not 1 <= g("data_type") <= 3 or g("left_pad") * size > 32 or g("right_pad") * size > 32):
            return []
        compact, ub, loop_ub = g("dst_stride") == lb, g("dst_stride"), g("loop1_dst_stride") | g("loop2_dst_stride")
    else:
        compact, ub, loop_ub = g("src_stride") == lb, g("src_stride"), g("loop1_src_stride") | g("loop2_src_stride")
    if (not compact and ub % 32) or (checked_loop and loop_ub % 32):
        return []
    pipe = move_pipe(src, dst)
    if pipe is None:
        return []
    looped = l1 > 1 and l2 > 1
    pad = 0 if looped else (g("left_pad") + g("right_pad")) * size
    read: set[int] = set()
    write: set[int] = set()
    for k in range(l2 if looped else 1):
        for j in range(l1 if looped else 1):
            s0 = g("src") + (k * g("loop2_src_stride") + j * g("loop1_src_stride") if looped else 0)
            d0 = g("dst") + (k * g("loop2_dst_stride") + j * g("loop1_dst_stride") if looped else 0)
            read |= pattern(s0, lb, 1, 1, nb, g("src_stride"))
            if src == MEM["GM"] and compact:
                write |= pattern(d0, _c32((pad + lb) * nb), 1, 1, 1, 1)
            elif src == MEM["GM"]:
                write |= pattern(d0, _c32(pad + lb), 1, 1, nb, g("dst_stride"))
            else:
                write |= pattern(d0, lb, 1, 1, nb, g("dst_stride"))
    block = g("block_id")
    return [Access(READ, MEM_SPACE[src], pipe, block, frozenset(read)),
            Access(WRITE, MEM_SPACE[dst], pipe, block, frozenset(write))]  # fmt: skip


@rule("DMA_MOV_CONV_RELU")
def _conv_relu(name: str, f: dict[str, int]) -> list[Access | Sync]:
    src, dst = _f(f, "src_mem"), _f(f, "dst_mem")
    pipe = move_pipe(src, dst)
    if pipe is None:
        return []
    lb, nb, cr, st = _f(f, "len_burst"), _f(f, "n_burst"), _f(f, "cr_mode"), _f(f, "src_type")
    bs, rs = (64, lb + _f(f, "src_stride") * 1024 // 64) if st == 3 else (32, lb + _f(f, "src_stride") * 512 // 32)
    read = pattern(_f(f, "src"), lb, bs, 1, nb, rs)
    wbs, wbn, wrs, ds = bs, lb, rs, _f(f, "dst_stride")
    if st == 2 and cr in (0, 5, 6):
        wrs = lb + ds
    elif st == 3 and cr in (0, 5):
        wbs, wbn, wrs = 32, lb * 2, lb * 2 + ds
    elif st == 3 and cr in (1, 2, 3, 7, 10, 11, 12, 13):
        wbs, wrs = 32, lb + ds
    elif st == 3 and cr in (8, 9):
        wbs, wrs = 16, lb + ds * 48 // 16
    write = pattern(_f(f, "dst"), wbn, wbs, 1, nb, wrs)
    block = _f(f, "block_id")
    return [Access(READ, MEM_SPACE[src], pipe, block, frozenset(read)),
            Access(WRITE, MEM_SPACE[dst], pipe, block, frozenset(write))]  # fmt: skip


@rule("DMA_MOV_DEPTH_WISE")
def _depth_wise(name: str, f: dict[str, int]) -> list[Access | Sync]:
    src, dst = _f(f, "src_mem"), _f(f, "dst_mem")
    pipe = move_pipe(src, dst)
    if pipe is None or _f(f, "n_burst") != 1:
        return []
    lb, cr, st = _f(f, "len_burst"), _f(f, "cr_mode"), _f(f, "src_type")
    bs = 1024 if st == 3 else 512
    block = _f(f, "block_id")
    out: list[Access | Sync] = [
        Access(READ, MEM_SPACE[src], pipe, block, frozenset(pattern(_f(f, "src"), lb, bs, 1, 1, 1)))
    ]
    if st == 2:
        if cr not in (0, 5, 6):
            return out
        wbs = lb * 512 // 2
    elif st == 3:
        if cr in (0, 5):
            wbs = lb * 1024 // 2
        elif cr in (1, 2):
            wbs = lb * 512 // 2
        else:
            return out
    else:
        wbs = bs
    write = pattern(_f(f, "dst"), 1, wbs, 1, 1, 1) | pattern(
        _f(f, "dst") + wbs + _f(f, "dst_stride") * 32, 1, wbs, 1, 1, 1
    )
    return [*out, Access(WRITE, MEM_SPACE[dst], pipe, block, frozenset(write))]


@rule("MOV_FP", "FIX_L0C_TO_L1", "FIX_L0C_TO_UB")
def _fixpipe(name: str, f: dict[str, int]) -> list[Access | Sync]:
    g = lambda key: _f(f, key)  # noqa: E731
    m, n, nd_num, bits = g("m_size"), g("n_size"), g("nd_num"), g("quant_pre_bits")
    if m == 0 or n == 0 or (g("nz2nd") and nd_num == 0):
        return []
    a5 = name != "MOV_FP"
    c0 = 32 if a5 else 64
    nd_size = 32 if a5 else (64 if g("c310") else 1024)
    nz = g("nz2nd") or g("nz2dn")
    read: set[int] = set()
    write: set[int] = set()
    if not nz:
        read |= pattern(g("src"), m, c0, 1, (n + 15) // 16, g("src_stride"))
    else:
        full = n // 16
        for nd in range(nd_num):
            at = g("src") + g("src_nd_stride") * nd * nd_size
            read |= pattern(at, m, c0, g("src_nz_c0_stride") if g("nz2dn") else 1, full, g("src_stride"))
            if n % 16:
                read |= pattern(at + g("src_stride") * full * c0, n % 16, 4, 1, m,
                                g("src_nz_c0_stride") * 16 if g("nz2dn") else 16)  # fmt: skip
    size = 1 if bits == 4 else bits // 8
    if nz:
        num = m if g("nz2dn") else n
        for nd in range(nd_num):
            at = g("dst") + g("dst_nd_stride") * nd * bits // 8
            write |= pattern(at, num // 2 if bits == 4 else num, size, 1, n if g("nz2dn") else m,
                             g("dst_stride") // 2 if bits == 4 else g("dst_stride"))  # fmt: skip
    else:
        bs = size if (a5 or g("c310")) else 32
        cols, c310, rs = (n + 15) // 16, g("c310"), g("dst_stride")
        if g("channel_split"):
            write |= pattern(g("dst"), m * 8 if c310 else m, bs, 1, (n + 7) // 8, rs)
        elif g("int4_merge"):
            if c310:
                write |= pattern(g("dst"), m * 32, bs, 1, (n + 63) // 64, rs // 2)
            else:
                write |= pattern(g("dst"), m, bs, 1, cols // 4, rs)
        elif g("int8_merge"):
            write |= pattern(g("dst"), m * 32 if c310 else m, bs, 1, cols // 2, rs)
            if cols % 2:
                write |= pattern(g("dst") + rs * (cols // 2) * bs, m * 16 if c310 else m, bs if c310 else 16, 1, 1,
                                 rs * 2)  # fmt: skip
        else:
            write |= pattern(g("dst"), m * 16 if c310 else m * bits // 8 // 2, bs, 1, cols, rs)
    out_space = {"MOV_FP": "GM", "FIX_L0C_TO_L1": "L1"}.get(name, "UB")
    block = g("block_id")
    items: list[Access | Sync] = []
    if not nz or nd_num:  # an NZ mode loops over the ND matrices: none, no events
        items = [Access(READ, SPACE["L0C"], PIPE["FIX"], block, frozenset(read)),
                 Access(WRITE, SPACE[out_space], PIPE["FIX"], block, frozenset(write))]  # fmt: skip
    if g("unit_flag"):
        items += [Sync(K["SET_FLAG"], PIPE["FIX"], PIPE["M"], 11, block=block),
                  Sync(K["WAIT_FLAG"], PIPE["FIX"], PIPE["M"], 11, block=block)]  # fmt: skip
    return items


@rule("DMA_MOV_ND2NZ_D", "DMA_MOV_DN2NZ_D")
def _nd2nz_dav(name: str, f: dict[str, int]) -> list[Access | Sync]:
    g = lambda key: _f(f, key)  # noqa: E731
    size = {1: 1, 2: 2, 3: 4}.get(g("data_type"), 1)
    src, dst = g("src_mem"), g("dst_mem")
    pipe = move_pipe(src, dst)
    if pipe is None or g("loop1_src_stride") % size or (g("small_c0") and g("d_value") > 4):
        return []
    nd_first = name == "DMA_MOV_ND2NZ_D"
    rows = g("n_value") if nd_first else g("d_value")
    row_bytes = (g("d_value") if nd_first else g("n_value")) * size
    read: set[int] = set()
    write: set[int] = set()
    reads = writes = 0
    for h in range(g("nd_num")):
        for i in range(rows):
            read |= pattern(g("src") + h * g("loop4_src_stride") + i * g("loop1_src_stride"), 1, row_bytes, 1, 1, 1)
            reads += 1
    if g("small_c0"):
        at = g("dst")
        align = 32 // (4 * size)
        for h in range(g("nd_num")):
            at = at + h * g("loop4_dst_stride") * 32
            write |= pattern(at, (g("n_value") + align - 1) // align * align, 4 * size, 1, 1, 1)
            writes += 1
    else:
        for i in range((g("d_value") * size + 31) // 32):
            for h in range(g("nd_num")):
                for k in range(rows):
                    at = g("dst") + i * g("loop3_dst_stride") * 32 + h * g("loop4_dst_stride") * 32
                    write |= pattern(at + k * g("loop2_dst_stride") * 32, 1, 32, 1, 1, 1)
                    writes += 1
    block = g("block_id")
    return ([Access(READ, MEM_SPACE[src], pipe, block, frozenset(read))] if reads else []) + (
        [Access(WRITE, MEM_SPACE[dst], pipe, block, frozenset(write))] if writes else [])  # fmt: skip


@rule("ND_DMA_OUT_TO_UB")
def _nd_out(name: str, f: dict[str, int]) -> list[Access | Sync]:
    g = lambda key: _f(f, key)  # noqa: E731
    if not 1 <= g("data_type") <= 3:
        return []
    mask = (1 << 64) - 1  # msSanitizer's size_t arithmetic
    increasing = all(g(f"dst_stride{k}") > g(f"dst_stride{k - 1}") for k in range(1, 5))
    cur, stride = 0, 1
    for k in range(5):
        span = (g(f"left{k}") + g(f"size{k}") + g(f"right{k}") - 1) & mask
        cur = (cur + span * (g(f"src_stride{k}") if k < 2 else g(f"dst_stride{k}"))) & mask
        if cur >= 1 << 40:
            return []
        if increasing:
            if g(f"dst_stride{k}") < stride:
                return []
            stride = (stride + span * g(f"dst_stride{k}")) & mask
    size = {1: 1, 2: 2, 3: 4}[g("data_type")]
    out: list[Access | Sync] = []
    for kind, base, key, padded in ((READ, g("src"), "src_stride", False), (WRITE, g("dst"), "dst_stride", True)):
        counts = [g(f"size{k}") + (g(f"left{k}") + g(f"right{k}") if padded else 0) for k in range(5)]
        if counts[1] * counts[2] * counts[3] * counts[4] > 65536 or 0 in counts:  # too many, or no element
            continue
        nbytes: set[int] = set()
        _nd_walk(nbytes, counts, [g(f"{key}{k}") for k in range(5)], size, 4, base)
        out.append(Access(kind, SPACE["GM"] if kind == READ else SPACE["UB"], PIPE["MTE2"], g("block_id"),
                          frozenset(nbytes)))  # fmt: skip
    return out


def _nd_walk(nbytes: set[int], counts: list[int], strides: list[int], size: int, level: int, offset: int) -> None:
    """msSanitizer's recursion over the five loops, innermost (0) elements."""
    for idx in range(counts[level]):
        at = offset + idx * strides[level] * size
        if level == 0:
            nbytes.update(range(at, at + size))
        else:
            _nd_walk(nbytes, counts, strides, size, level - 1, at)


def _sync(kind: str, pipe: int, dst_pipe: int = 0, event_id: int = 0, mode: int = 0, address: int = 0,
          block: int = 0) -> list[Access | Sync]:  # fmt: skip
    return [Sync(K[kind], pipe, dst_pipe, event_id, mode, address, block)]


@rule("SCALAR_RED", "SCALAR_ATOM")
def _scalar_red(name: str, f: dict[str, int]) -> list[Access | Sync]:
    nbytes = frozenset(pattern(_f(f, "addr"), 1, _f(f, "size"), 1, 1, 1))
    return [Access(READ, SPACE["GM"], PIPE["S"], _f(f, "block_id"), nbytes),
            Access(WRITE, SPACE["GM"], PIPE["S"], _f(f, "block_id"), nbytes)]  # fmt: skip


@rule("LDVA")
def _ldva(name: str, f: dict[str, int]) -> list[Access | Sync]:
    nbytes = frozenset(pattern(_f(f, "addr"), 1, _f(f, "size"), 0, 1, 0))
    return [Access(READ, SPACE["UB"], PIPE["V"], _f(f, "block_id"), nbytes)]


@rule("DC_PRELOAD")
def _dc_preload(name: str, f: dict[str, int]) -> list[Access | Sync]:
    return [Access(READ, SPACE["GM"], PIPE["S_CAL"], _f(f, "block_id"), frozenset())]  # blockSize 0


HARD_PIPES = (PIPE["MTE1"], PIPE["M"], PIPE["FIX"])


@rule("HSET_FLAG", "HSET_FLAGI", "HWAIT_FLAG", "HWAIT_FLAGI")
def _hard(name: str, f: dict[str, int]) -> list[Access | Sync]:
    # Valid only on the cube side (the tests' blocks are AIC when they use these), MTE1/M/FIX, not GM/UB/INVALID.
    if (
        _f(f, "src") not in HARD_PIPES or _f(f, "dst") not in HARD_PIPES or _f(f, "memory") in (4, 6)
        or _f(f, "memory") >= 9 or _f(f, "v") > 1 or _f(f, "event_id") > 3
    ):  # fmt: skip
        return []
    kind = "HSET_FLAG" if name.startswith("HSET") else "HWAIT_FLAG"
    return _sync(kind, _f(f, "src"), _f(f, "dst"), _f(f, "event_id"), block=_f(f, "block_id"))


@rule("PIPE_BARRIER")
def _barrier(name: str, f: dict[str, int]) -> list[Access | Sync]:
    return _sync("PIPE_BARRIER", _f(f, "pipe"), block=_f(f, "block_id"))


SUB_BLOCKS = 2  # the tests' block heads say vecSubBlockDim 2


@rule("FFTS_SYNC", "FFTS_SYNC_V")
def _ffts(name: str, f: dict[str, int]) -> list[Access | Sync]:
    return _sync("CROSS_SET", _f(f, "dst"), 0, _f(f, "flag"), _f(f, "mode"), block=_f(f, "block_id"))


@rule("WAIT_FLAG_DEV")
def _wait_dev(name: str, f: dict[str, int]) -> list[Access | Sync]:
    return _sync("CROSS_WAIT", PIPE["S"], 0, _f(f, "flag"), block=_f(f, "block_id"))


@rule("WAIT_FLAG_DEV_PIPE", "WAIT_FLAG_DEVI_PIPE", "WAIT_FLAG_DEV_PIPE_V", "WAIT_FLAG_DEVI_PIPE_V")
def _wait_dev_pipe(name: str, f: dict[str, int]) -> list[Access | Sync]:
    return _sync("CROSS_WAIT", _f(f, "pipe"), 0, _f(f, "flag"), block=_f(f, "block_id"))


@rule(*_INTRA)
def _intra(name: str, f: dict[str, int]) -> list[Access | Sync]:
    kind = "CROSS_SET" if name.startswith("SET") else "CROSS_WAIT"
    return _sync(kind, _f(f, "pipe"), 0, _f(f, "sync_id"), 4, block=_f(f, "block_id"))


@rule("SET_ATOMIC")
def _atomic(name: str, f: dict[str, int]) -> list[Access | Sync]:
    mode = _f(f, "mode")
    if mode > 6:  # SUM / MAX / MIN leave the state alone
        return []
    return _sync("SET_ATOMIC", PIPE["S"], 0, 0, int(mode != 0), block=_f(f, "block_id"))


@rule("IB_SET_STUB")
def _ib_set(name: str, f: dict[str, int]) -> list[Access | Sync]:
    return _sync("SOFT_SET", PIPE["S"], PIPE["S"], _f(f, "event_id"), block=_f(f, "block_id"))


@rule("IB_WAIT_STUB")
def _ib_wait(name: str, f: dict[str, int]) -> list[Access | Sync]:
    return _sync("SOFT_WAIT", PIPE["S"], PIPE["S"], _f(f, "event_id"), address=_f(f, "wait_core"),
                 block=_f(f, "block_id"))  # fmt: skip


@rule("SYNC_ALL_STUB")
def _sync_all(name: str, f: dict[str, int]) -> list[Access | Sync]:
    return _sync("SOFT_SYNC_ALL", PIPE["S"], PIPE["S"], address=max(_f(f, "used_cores"), 0), block=_f(f, "block_id"))


@rule(*_BUF)
def _buf(name: str, f: dict[str, int]) -> list[Access | Sync]:
    get = name.startswith("GET")
    nonblock = int(get and _f(f, "mode") != 0)  # a GET_BUF's BufMode other than BLOCK_MODE: GET_BUF_NONBLOCK
    return _sync("GET_BUF" if get else "RLS_BUF", _f(f, "pipe"), 0, _f(f, "buf_id"), nonblock, block=_f(f, "block_id"))


REGISTER = {name: i + 1 for i, name in enumerate(_REGS)}  # sanitizerd's Register numbering follows this order


@rule(*_REGS)
def _register(name: str, f: dict[str, int]) -> list[Access | Sync]:
    return [Sync(K["SET_REGISTER"], PIPE["S"], 0, REGISTER[name], 0, _f(f, "value"), _f(f, "block_id"))]


def model(records: list[tuple[str, dict[str, int]]]) -> list[list[Access | Sync]]:
    """Per record (in order): what msSanitizer's rules make of it. Accesses of one record with the same (kind,
    space, pipe, block) are merged into one byte set, so the comparison does not depend on how the decoder splits
    a pattern into events."""
    out = []
    for name, fields in records:
        items = RULES[name](name, fields)
        out.append(_merge(items))
    return out


def _merge(items: list[Access | Sync]) -> list[Access | Sync]:
    acc: dict[tuple[int, int, int, int], set[int]] = defaultdict(set)
    order: list[tuple[int, int, int, int]] = []
    rest: list[Access | Sync] = []
    for item in items:
        if isinstance(item, Access):
            key = (item.kind, item.space, item.pipe, item.block)
            if key not in acc:
                order.append(key)
            acc[key] |= item.nbytes
        else:
            rest.append(item)
    return [Access(*key, frozenset(acc[key])) for key in order] + rest


# msSanitizer's tool from 99e8c685 on (kernel_block.cpp ParseSimdRecord): a record of these types takes the serial
# number of the record before it in its block when that one is of the types named with it.
SHARES_SERIAL = {"ELEMENT": {"VGATHER", "ELEMENT"}, "VSEL_OP": {"CMPMASK_OP"}, "UNARY_OP": {"MSTX_STUB"},
                 "BINARY_OP": {"MSTX_STUB"}, "DMA_MOV": {"MSTX_STUB"}, "MOV_ALIGN": {"MSTX_STUB"}}  # fmt: skip


def by_serial(records: list[tuple[str, dict[str, int]]]) -> list[list[Access | Sync]]:
    """``model``'s per-record lists joined per serial number, as the tool numbers a block's records."""
    out: list[list[Access | Sync]] = []
    before = ""
    for (name, _), items in zip(records, model(records), strict=True):
        if out and before in SHARES_SERIAL.get(name, set()):
            out[-1] = _merge(out[-1] + items)
        else:
            out.append(items)
        before = name
    return out


def expand(events: np.ndarray, first_serial: int, nrecords: int) -> list[list[Access | Sync]]:
    """Decoder events as the model's per-record lists (BLOCK_FINISH left out)."""
    per: list[list[Access | Sync]] = [[] for _ in range(nrecords)]
    for e in events:
        kind = int(e["kind"])
        if kind == K["BLOCK_FINISH"]:
            continue
        i = int(e["serial"]) - first_serial
        if kind == TENSOR:  # an operand tensor: its bytes, its side in the kind (100 + mode)
            start, size = int(e["address"]), int(e["block_size"])
            per[i].append(Access(100 + int(e["mode"]), int(e["space"]), 0, int(e["block_id"]),
                                 frozenset(range(start, start + size))))  # fmt: skip
        elif kind in (READ, WRITE, TENSOR_READ, TENSOR_WRITE):
            nbytes = pattern(int(e["address"]), int(e["block_num"]), int(e["block_size"]), int(e["block_stride"]),
                             int(e["repeat"]), int(e["repeat_stride"]))  # fmt: skip
            per[i].append(Access(kind, int(e["space"]), int(e["pipe"]), int(e["block_id"]), frozenset(nbytes)))
        else:
            per[i].append(Sync(kind, int(e["pipe"]), int(e["dst_pipe"]), int(e["event_id"]), int(e["mode"]),
                               int(e["address"]), int(e["block_id"])))  # fmt: skip
    return [_merge(items) for items in per]
