"""The record buffer decoder against an independent byte-level model of msSanitizer's rules (reference §1.7)."""

from __future__ import annotations

import dataclasses
import struct

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sanitizerd.chips import CHIPS
from sanitizerd.compat import wire as _wire
from sanitizerd.compat.records import slots as rb
from sanitizerd.compat.records.convert.base import BlockContext
from sanitizerd.compat.records.convert.bounds import ExpansionBudget
from sanitizerd.compat.records.numbering import record_table as _record_table
from sanitizerd.compat.records.types import PAYLOAD_SIZE
from sanitizerd_protocol.records import EventKind
from tests import compat_model as cm

APRIL = _wire.MSSANITIZER_4A419F05
APRIL_RECORDS = _record_table(APRIL)

CONTEXT = BlockContext(block_type=0, chip=CHIPS["910B1"])


def decode(data: bytes, first_serial: int = 0, chunks: list[int] | None = None) -> tuple[np.ndarray, rb.SlotDecoder]:
    """Decode a whole slot, feeding its record region in ``chunks`` (sizes) as a connection would."""
    heads = rb.read_heads(data, APRIL)
    decoder = rb.SlotDecoder(heads, dataclasses.replace(CONTEXT, budget=ExpansionBudget()), first_serial)  # a launch
    region = memoryview(data)[APRIL.heads_size :]
    out = []
    pending = b""
    at = 0
    sizes = list(chunks or [])
    while True:
        take = sizes.pop(0) if sizes else len(region) - at
        piece = bytes(region[at : at + take])
        at += len(piece)
        final = at >= len(region)
        pending += piece
        events, used = decoder.feed(memoryview(pending), final)
        assert 0 <= used <= len(pending)
        pending = pending[used:]
        out.append(events)
        if final:
            break
    return np.concatenate(out), decoder


def check(records: list[tuple[str, dict[str, int]]], **head: int) -> rb.SlotDecoder:
    data = cm.slot([cm.record(name, **fields) for name, fields in records], **head)
    events, decoder = decode(data, first_serial=7)
    assert decoder.problems() == []
    assert decoder.records == len(records)
    assert cm.expand(events, 7, len(records)) == cm.model(records)
    assert decoder.next_serial == 7 + len(records) + 1  # + BLOCK_FINISH
    assert events[-1]["kind"] == cm.K["BLOCK_FINISH"]
    return decoder


def test_heads_layout() -> None:
    data = cm.slot([], block_id=5, block_type=1, vec_sub_block_dim=2, record_count=9, record_write_count=4,
                   offset=1000, write_offset=0, cache_size=7, total_block_dim=24)  # fmt: skip
    h = rb.read_heads(data, APRIL)
    assert APRIL.heads_size == 38_528 + 128
    assert (h.security_ok, h.block_id, h.block_type, h.vec_sub_block_dim) == (True, 5, 1, 2)
    assert (h.record_count, h.record_write_count, h.offset, h.write_offset) == (9, 4, 1000, 0)
    assert (h.cache_size_mb, h.total_block_dim) == (7, 24)


GM, UB, L1 = cm.MEM["GM"], cm.MEM["UB"], cm.MEM["L1"]


def test_dma_mov_family() -> None:
    check([
        ("DMA_MOV", dict(src=0x1000, dst=0x40, n_burst=3, len_burst=2, src_stride=1, dst_stride=0, src_mem=GM,
                         dst_mem=UB, block_id=1, pc=0x10)),
        ("DMA_MOV", dict(src=0x40, dst=0x2000, n_burst=2, len_burst=33, src_stride=2, dst_stride=1, src_mem=UB,
                         dst_mem=GM, byte_mode=1)),
        ("DMA_MOV", dict(src=0x1000, dst=0x100, n_burst=4, src_mem=GM, dst_mem=UB, pad_mode=2, dst_stride=1)),
        ("DMA_MOV", dict(src=0x100, dst=0x1000, n_burst=4, src_mem=UB, dst_mem=GM, pad_mode=7, src_stride=3)),
        ("DMA_MOV", dict(src=0x0, dst=0x0, n_burst=1, len_burst=1, src_mem=L1, dst_mem=cm.MEM["L0A"])),
    ])  # fmt: skip


def test_sync_flags() -> None:
    p = cm.PIPE
    check([
        ("SET_FLAG", dict(src=p["MTE2"], dst=p["V"], event_id=3, block_id=2)),
        ("WAIT_FLAG", dict(src=p["MTE2"], dst=p["V"], event_id=3, block_id=2)),
        ("SET_FLAGI_V", dict(src=p["V"], dst=p["MTE3"], event_id=1)),
        ("WAIT_FLAGI_V", dict(src=p["V"], dst=p["MTE3"], event_id=1)),
    ])  # fmt: skip


def test_move_without_pipe_is_dropped_and_counted() -> None:
    data = cm.slot([cm.record("DMA_MOV", src=0, dst=0, n_burst=1, len_burst=1, src_mem=GM, dst_mem=GM)])
    events, decoder = decode(data)
    assert [int(k) for k in events["kind"]] == [cm.K["BLOCK_FINISH"]]
    assert decoder.problems() == ["1 DMA_MOV records dropped: no pipe moves data between their memory kinds"]


def test_scalar_family() -> None:
    sp = cm.SPACE
    check([
        ("LOAD", dict(addr=0x100, size=4, space=sp["UB"], align=4, block_id=3)),
        ("STORE", dict(addr=0x2000, size=8, space=sp["GM"], align=8)),
        ("LD", dict(addr=0x10, size=2, space=sp["PRIVATE"], align=2)),
        ("LD_IO", dict(addr=0x10, size=1, space=sp["GM"])),
        ("ST", dict(addr=0x10, size=2, space=sp["L1"], align=2)),
        ("ST_IO", dict(addr=0x10, size=4, space=sp["GM"])),
        ("STP", dict(addr=0x40, size=16, space=sp["UB"])),
        ("STI", dict(addr=0x40, size=4, space=sp["UB"])),
        ("STI_IO", dict(addr=0x40, size=4, space=sp["GM"])),
        ("LDP", dict(addr=0x40, size=16, space=sp["UB"])),
        ("ST_ATOMIC", dict(addr=0x80, size=4, space=sp["GM"])),
        ("STI_ATOMIC", dict(addr=0x80, size=4, space=sp["GM"])),
        ("ST_DEV", dict(addr=0x80, size=8, space=sp["GM"])),
        ("LD_DEV", dict(addr=0x80, size=8, space=sp["GM"])),
        ("SCALAR_RED", dict(addr=0x3000, size=4)),
        ("SCALAR_ATOM", dict(addr=0x3008, size=8, is_atom=1)),
        ("LDVA", dict(addr=0x200, size=32, space=sp["GM"])),
        ("DC_PRELOAD", dict(addr=0x5000, offset=-16)),
    ])  # fmt: skip


def test_scalar_alignment_and_preload_address() -> None:
    data = cm.slot([cm.record("STORE", addr=0x2001, size=4, space=cm.SPACE["GM"], align=4),
                    cm.record("DC_PRELOAD", addr=0x5000, offset=-16)])  # fmt: skip
    events, _ = decode(data)
    assert int(events[0]["align"]) == 4
    assert (int(events[1]["address"]), int(events[1]["block_size"])) == (0x5000 - 16, 0)


def test_sync_family() -> None:
    p = cm.PIPE
    check([
        ("PIPE_BARRIER", dict(pipe=p["V"])),
        ("PIPE_BARRIER", dict(pipe=p["ALL"])),
        ("FFTS_SYNC", dict(dst=p["MTE3"], mode=2, flag=5, block_id=1)),
        ("FFTS_SYNC_V", dict(dst=p["V"], mode=1, flag=6)),
        ("WAIT_FLAG_DEV", dict(flag=5)),
        ("WAIT_FLAG_DEV_PIPE", dict(flag=7, pipe=p["MTE2"])),
        ("WAIT_FLAG_DEVI_PIPE_V", dict(flag=8, pipe=p["V"])),
        ("SET_INTRA_BLOCK", dict(pipe=p["MTE3"], sync_id=9)),
        ("WAIT_INTRA_BLOCKI_V", dict(pipe=p["V"], sync_id=9)),
        ("SET_ATOMIC", dict(mode=1)),
        ("SET_ATOMIC", dict(mode=7)),  # SUM: no event
        ("SET_ATOMIC", dict(mode=0)),
        ("IB_SET_STUB", dict(event_id=3)),
        ("IB_WAIT_STUB", dict(event_id=3, wait_core=4)),
        ("SYNC_ALL_STUB", dict(used_cores=8)),
        ("SYNC_ALL_STUB", dict(used_cores=-1)),
        ("GET_BUF", dict(pipe=p["MTE2"], buf_id=2)),
        ("GET_BUFI", dict(pipe=p["MTE2"], buf_id=3, mode=1)),  # NONBLOCK_MODE
        ("RLS_BUFI_V", dict(pipe=p["V"], buf_id=2)),
    ])  # fmt: skip


def test_cross_sets_carry_the_sub_blocks_of_the_block_head() -> None:
    data = cm.slot([cm.record("FFTS_SYNC", dst=cm.PIPE["V"], mode=1, flag=1),
                    cm.record("SET_INTRA_BLOCK", pipe=cm.PIPE["V"], sync_id=2)], vec_sub_block_dim=1)  # fmt: skip
    events, _ = decode(data)
    assert events["block_num"][:2].tolist() == [1, 1]


def test_hardware_flags_are_cube_only_and_checked() -> None:
    p, m = cm.PIPE, cm.MEM
    check([
        ("HSET_FLAG", dict(src=p["MTE1"], dst=p["M"], event_id=1, memory=m["L0A"])),
        ("HWAIT_FLAGI", dict(src=p["MTE1"], dst=p["M"], event_id=1, memory=m["L0A"])),
    ], block_type=1)  # fmt: skip
    bad = [cm.record("HSET_FLAG", src=p["V"], dst=p["M"], event_id=1, memory=m["L0A"]),
           cm.record("HSET_FLAG", src=p["MTE1"], dst=p["M"], event_id=4, memory=m["L0A"]),
           cm.record("HWAIT_FLAG", src=p["MTE1"], dst=p["M"], event_id=1, memory=m["UB"])]  # fmt: skip
    events, decoder = decode(cm.slot(bad, block_type=1))
    assert len(events) == 1  # BLOCK_FINISH only
    assert sorted(decoder.problems()) == [
        "1 HWAIT_FLAG records dropped: not a valid hardware flag",
        "2 HSET_FLAG records dropped: not a valid hardware flag",
    ]
    events, decoder = decode(cm.slot([cm.record("HSET_FLAG", src=p["MTE1"], dst=p["M"], memory=m["L1"])]))
    assert len(events) == 1  # on a vector block: dropped
    assert decoder.problems() == ["1 HSET_FLAG records dropped: not a valid hardware flag"]


def test_register_family() -> None:
    check([(name, dict(value=0xFFFF_0000_0000_0000 + i, core_slot=30)) for i, name in enumerate(cm._REGS)])


def test_mov_align() -> None:
    check([
        ("MOV_ALIGN", dict(src=0x1000, dst=0x40, len_burst=45, n_burst=3, src_gap=7, dst_gap=1, src_mem=GM,
                           dst_mem=UB, data_type=2, left_pad=3, right_pad=2)),
        ("MOV_ALIGN", dict(src=0x40, dst=0x1000, len_burst=45, n_burst=2, src_gap=1, dst_gap=9, src_mem=UB,
                           dst_mem=GM)),
        ("MOV_ALIGN", dict(src=0x40, dst=0x1000, len_burst=64, n_burst=1, src_mem=UB, dst_mem=L1)),
    ])  # fmt: skip
    _, decoder = decode(cm.slot([cm.record("MOV_ALIGN", src_mem=GM, dst_mem=UB, n_burst=1)]))
    assert decoder.problems() == ["1 MOV_ALIGN records dropped: lenBurst is 0"]


def test_local_moves() -> None:
    check([
        ("MOV_L1_TO_UB", dict(src=0x100, dst=0x200, n_burst=2, len_burst=3, src_gap=1, dst_gap=2, src_mem=L1,
                              dst_mem=UB)),
        ("MOV_UB_TO_L1", dict(src=0x100, dst=0x200, n_burst=1, len_burst=2, src_mem=UB, dst_mem=L1)),
        ("MOV_UB_TO_UB", dict(src=0x100, dst=0x800, n_burst=3, len_burst=1, src_gap=3, src_mem=UB, dst_mem=UB)),
        ("MOV_BT", dict(src=0x40, dst=0x0, n_burst=2, len_burst=1, src_gap=1, src_mem=L1, dst_mem=cm.MEM["BT"])),
        ("MOV_CBUF_TO_BT", dict(src=0x40, dst=0x0, n_burst=2, len_burst=2, src_gap=1, dst_gap=2, data_type=12)),
        ("MOV_CBUF_TO_BT", dict(src=0x40, dst=0x0, n_burst=1, len_burst=2, data_type=18)),
        ("MOV_CBUF_TO_FB", dict(src=0x40, dst=0x0, n_burst=3, len_burst=2, src_stride=1, dst_stride=4)),
        ("MOV_CBUF_TO_FB", dict(src=0x40, dst=0x0, n_burst=2, len_burst=1, src_stride=5, dst_stride=1,
                                dst_mem_block=1)),
    ])  # fmt: skip
    bad = [cm.record("MOV_CBUF_TO_BT", len_burst=3, data_type=18), cm.record("MOV_CBUF_TO_FB", dst_mem_block=2),
           cm.record("MOV_L1_TO_UB", src_mem=L1, dst_mem=UB)]  # fmt: skip
    _, decoder = decode(cm.slot(bad))
    assert decoder.problems() == [
        "1 MOV_CBUF_TO_BT records dropped: lenBurst, dstGap or conversion not allowed",
        "1 MOV_CBUF_TO_FB records dropped: lenBurst, dstStride or dstMemBlock not allowed",
        "1 MOV_L1_TO_UB records dropped: lenBurst is 0",
    ]


def test_nd2nz() -> None:
    check([
        ("DMA_MOV_ND2NZ", dict(src=0x1000, dst=0x0, nd_num=2, n_value=3, d_value=20, src_nd_matrix_stride=100,
                               src_d_value=24, dst_nz_c0_stride=4, dst_nz_n_stride=1, dst_nz_matrix_stride=64,
                               src_mem=GM, dst_mem=L1, data_type=2)),
        ("DMA_MOV_ND2NZ", dict(src=0x1000, dst=0x0, nd_num=0, n_value=3, d_value=8, src_mem=GM, dst_mem=L1)),
        ("DMA_MOV_ND2NZ", dict(src=0x1000, dst=0x0, nd_num=1, n_value=2, d_value=40, src_d_value=40,
                               dst_nz_c0_stride=2, dst_nz_n_stride=2, src_mem=GM, dst_mem=L1, data_type=1)),
    ])  # fmt: skip


def test_mov_align_v2() -> None:
    check([
        ("MOV_ALIGN_V2", dict(src=0x1000, dst=0x40, len_burst=45, n_burst=3, src_stride=50, dst_stride=64,
                              src_mem=GM, dst_mem=UB, data_type=2, left_pad=3, right_pad=2)),
        ("MOV_ALIGN_V2", dict(src=0x1000, dst=0x40, len_burst=45, n_burst=3, src_stride=45, dst_stride=45,
                              src_mem=GM, dst_mem=UB)),  # compact
        ("MOV_ALIGN_V2", dict(src=0x40, dst=0x1000, len_burst=40, n_burst=2, src_stride=64, dst_stride=100,
                              loop1_size=2, loop2_size=3, loop1_src_stride=256, loop2_src_stride=1024,
                              loop1_dst_stride=500, loop2_dst_stride=3000, src_mem=UB, dst_mem=GM)),
        ("MOV_ALIGN_V2", dict(src=0x40, dst=0x1000, len_burst=40, n_burst=2, src_stride=70_000 * 32,
                              dst_stride=1 << 39, src_mem=UB, dst_mem=GM)),  # strides past the event's 16 bits
    ])  # fmt: skip
    _, decoder = decode(cm.slot([cm.record("MOV_ALIGN_V2", len_burst=40, n_burst=1, src_stride=33, src_mem=UB,
                                           dst_mem=GM)]))  # fmt: skip
    assert decoder.problems() == ["1 MOV_ALIGN_V2 records dropped: lenBurst, stride, loop or padding not allowed"]


def test_conv_relu_and_depth_wise() -> None:
    L0C = cm.MEM["L0C"]
    check([
        (name, dict(src=0x0, dst=0x100, n_burst=2, len_burst=2, src_stride=1, dst_stride=1, src_mem=L0C,
                    dst_mem=UB, src_type=t, cr_mode=mode))
        for name in ("DMA_MOV_CONV_RELU",)
        for t, mode in ((2, 0), (2, 1), (3, 0), (3, 2), (3, 8), (3, 4), (1, 0))
    ] + [
        ("DMA_MOV_DEPTH_WISE", dict(src=0x0, dst=0x100, n_burst=1, len_burst=2, dst_stride=3, src_mem=L0C,
                                    dst_mem=UB, src_type=t, cr_mode=mode))
        for t, mode in ((2, 0), (3, 0), (3, 1), (1, 0))
    ])  # fmt: skip
    _, decoder = decode(cm.slot([
        cm.record("DMA_MOV_DEPTH_WISE", n_burst=2, len_burst=1, src_mem=L0C, dst_mem=UB),
        cm.record("DMA_MOV_DEPTH_WISE", n_burst=1, len_burst=1, src_mem=L0C, dst_mem=UB, src_type=3, cr_mode=9),
    ]))  # fmt: skip
    assert decoder.problems() == [
        "1 DMA_MOV_DEPTH_WISE records dropped: nBurst is not 1",
        "1 DMA_MOV_DEPTH_WISE writes dropped: ConvRelu mode does not match",
    ]


FIX_MODES = [dict(), dict(nz2nd=1, nd_num=2), dict(nz2dn=1, nd_num=2, src_nz_c0_stride=3), dict(channel_split=1),
             dict(int4_merge=1), dict(int8_merge=1), dict(int4_merge=1, c310=1), dict(int8_merge=1, c310=1),
             dict(c310=1), dict(unit_flag=1)]  # fmt: skip


@pytest.mark.parametrize("name", ["MOV_FP", "FIX_L0C_TO_L1", "FIX_L0C_TO_UB"])
def test_fixpipe(name: str) -> None:
    base = dict(src=0x0, dst=0x2000, m_size=3, n_size=40, src_stride=16, dst_stride=64, quant_pre_bits=16,
                src_nd_stride=2, dst_nd_stride=256)  # fmt: skip
    check([(name, base | mode) for mode in FIX_MODES] + [(name, base | dict(quant_pre_bits=4, nz2nd=1, nd_num=1))],
          block_type=1)  # fmt: skip
    _, decoder = decode(cm.slot([cm.record(name, m_size=0, n_size=16)], block_type=1))
    assert decoder.problems() == [f"1 {name} records dropped: M, N or ND count is 0 (a no-op)"]


@pytest.mark.parametrize("name", ["DMA_MOV_ND2NZ_D", "DMA_MOV_DN2NZ_D"])
def test_nd2nz_950(name: str) -> None:
    base = dict(
        src=0x1000,
        dst=0x0,
        loop4_src_stride=4096,
        loop1_src_stride=96,
        d_value=20,
        n_value=3,
        nd_num=2,
        loop2_dst_stride=1,
        loop3_dst_stride=5,
        loop4_dst_stride=20,
        src_mem=GM,
        dst_mem=L1,
        data_type=2,
    )
    variants = [dict(), dict(small_c0=1, d_value=4), dict(nd_num=0), dict(small_c0=1, d_value=0, n_value=0),
                dict(n_value=0, d_value=0)]  # fmt: skip
    check([(name, base | variant) for variant in variants])
    _, decoder = decode(cm.slot([cm.record(name, **(base | dict(loop1_src_stride=3)))]))
    assert decoder.problems() == [f"1 {name} records dropped: loop1 stride or small-C0 D not allowed"]


def test_nd_dma_out_to_ub() -> None:
    loops = dict(size0=5, src_stride0=1, dst_stride0=1, left0=1, right0=2, size1=3, src_stride1=7, dst_stride1=9,
                 size2=2, src_stride2=30, dst_stride2=40, left2=1, size3=1, dst_stride3=200, size4=1,
                 dst_stride4=300)  # fmt: skip
    wide = loops | dict(src_stride0=70_000)
    check([("ND_DMA_OUT_TO_UB", dict(src=0x1000, dst=0x0, data_type=2, **loops)),
           ("ND_DMA_OUT_TO_UB", dict(src=0x1000, dst=0x0, data_type=3, **wide))])  # fmt: skip
    far = loops | dict(src_stride1=1 << 40)
    _, decoder = decode(cm.slot([cm.record("ND_DMA_OUT_TO_UB", data_type=0, **loops),
                                 cm.record("ND_DMA_OUT_TO_UB", data_type=1, **far)]))  # fmt: skip
    assert decoder.problems() == ["2 ND_DMA_OUT_TO_UB records dropped: data type or loop strides not allowed"]


# --- malformed buffers: each gives a clear problem for its block, never an exception -------------------------


def one_dma(**over: int) -> bytes:
    fields = dict(src=0x1000, dst=0x40, n_burst=1, len_burst=1, src_mem=GM, dst_mem=UB) | over
    return cm.record("DMA_MOV", **fields)


def test_short_heads_raise_a_clear_error() -> None:
    with pytest.raises(rb.RecordBufferError, match="shorter than its heads"):
        rb.read_heads(b"\0" * 100, APRIL)


def test_overwritten_security_value() -> None:
    data = cm.slot([one_dma()], security=0x1234)
    events, decoder = decode(data)
    assert [int(k) for k in events["kind"]] == [cm.K["BLOCK_FINISH"]]
    assert decoder.problems() == [rb.SECURITY_TEXT]
    assert decoder.loss() is None


def test_unknown_record_type_ends_the_block_with_its_offset_and_count() -> None:
    region = [one_dma(), one_dma(), struct.pack("<I", 4242) + b"\0" * 60, one_dma()]
    events, decoder = decode(cm.slot(region))
    assert decoder.records == 2
    assert decoder.problems() == [
        "block 0 (aiv): unknown record type 4242 at byte 136 of the record region; 2 records not decoded"
    ]
    assert len(events) == 2 * 2 + 1


def test_online_error_records_cannot_be_walked() -> None:
    _, decoder = decode(cm.slot([one_dma(), struct.pack("<I", 60000) + b"\0" * 32]))
    assert decoder.problems() == [
        "block 0 (aiv): unknown record type ONLINE_ERROR at byte 68 of the record region; 1 records not decoded"
    ]


def test_record_count_past_the_end() -> None:
    _, decoder = decode(cm.slot([one_dma()] * 3, record_count=10))
    assert decoder.records == 3
    assert decoder.problems() == [
        "block 0 (aiv): recordWriteCount is 10, but the 204 bytes of writeOffset hold 3 records"
    ]


def test_record_count_short_of_write_offset() -> None:
    _, decoder = decode(cm.slot([one_dma()] * 3, record_count=2))
    assert decoder.records == 2
    assert decoder.problems() == [
        "block 0 (aiv): 2 records (recordWriteCount) end at byte 136, but writeOffset is 204: the rest is not decoded"
    ]


@pytest.mark.parametrize("write_offset", [204 + 68, 100 << 30])
def test_write_offset_beyond_the_data(write_offset: int) -> None:
    _, decoder = decode(cm.slot([one_dma()] * 3, write_offset=write_offset, record_count=4))
    assert decoder.records == 3
    assert decoder.problems() == [
        f"block 0 (aiv): the record region ends after 204 bytes, but writeOffset is {write_offset}; "
        "1 records not decoded"
    ]


def test_truncated_region_mid_record() -> None:
    data = cm.slot([one_dma()] * 3)[:-10]
    _, decoder = decode(data, chunks=[50, 50])
    assert decoder.records == 2
    assert decoder.problems() == [
        "block 0 (aiv): the record region ends after 136 bytes, but writeOffset is 204; 1 records not decoded"
    ]


def test_bytes_after_write_offset_are_not_records() -> None:
    data = cm.slot([one_dma()] * 2, write_offset=68, record_count=1) + b"\xff" * 1000
    events, decoder = decode(data)
    assert decoder.records == 1 and decoder.problems() == []
    assert len(events) == 3


def test_overflow_is_a_loss_with_the_bytes_needed() -> None:
    _, decoder = decode(cm.slot([one_dma()] * 2, record_count=7, record_write_count=2, offset=7 * 68,
                                write_offset=136, block_id=3, block_type=1))  # fmt: skip
    loss = decoder.loss()
    assert loss is not None
    assert (loss.block_id, loss.block_type, loss.records, loss.bytes) == (3, 1, 5, 5 * 68)
    # offset before writeOffset (damage): no negative byte count
    _, decoder = decode(cm.slot([one_dma()], record_count=9, record_write_count=1, offset=0, write_offset=68))
    assert decoder.loss().bytes == 0  # type: ignore[union-attr]


def test_types_without_converter_are_counted_once_per_type() -> None:
    simt = struct.pack("<I", 40000) + b"\0" * 64  # SIMT_LDG: walkable, not modelled
    events, decoder = decode(cm.slot([one_dma(), simt, simt, one_dma(), simt]))
    assert decoder.records == 5
    assert decoder.problems() == ["3 SIMT_LDG records not converted (sanitizerd does not model this instruction yet)"]
    assert events["serial"].tolist() == [0, 0, 3, 3, 5]


def test_garbage_regions_never_raise() -> None:
    rng = np.random.default_rng(7)
    for size in (0, 3, 68, 1000, 100_000):
        for fill in ("random", "types"):
            if fill == "random":
                region = rng.integers(0, 2**32, size // 4, dtype=np.uint32).tobytes()
            else:
                region = rng.choice([0, 1, 100, 20000, 20001, 70001, 4242], size // 4).astype(np.uint32).tobytes()
            data = cm.heads(record_count=size, offset=size) + region
            _, decoder = decode(data, chunks=[1000, 17, 5000])
            assert decoder.records <= size


def test_decode_single() -> None:
    payload = one_dma(block_id=4)[4:]
    events, problem = rb.decode_single(100, memoryview(payload), 77, CONTEXT, APRIL_RECORDS)
    assert problem is None
    assert events["serial"].tolist() == [77, 77] and events["block_id"].tolist() == [4, 4]
    assert (
        rb.decode_single(100, payload[:10], 1, CONTEXT, APRIL_RECORDS)[1]
        == "DMA_MOV record of 10 bytes, its payload needs 64"
    )
    assert (
        rb.decode_single(4242, payload, 1, CONTEXT, APRIL_RECORDS)[1]
        == "unknown record type 4242 in a single kernel record"
    )
    assert rb.decode_single(40000, b"\0" * 64, 1, CONTEXT, APRIL_RECORDS)[1] == (
        "1 SIMT_LDG records not converted (sanitizerd does not model this instruction yet)"
    )


# --- property tests: random well-formed buffers against the model, and any chunking ----------------------------

small = st.integers(0, 4)
mem = st.sampled_from([GM, UB, L1, cm.MEM["L0A"], cm.MEM["L0C"], cm.MEM["FB"], cm.MEM["BT"], 9])
pipe = st.sampled_from(list(cm.PIPE.values()))
addr = st.integers(0, 1 << 12)
loc = {"block_id": st.integers(0, 3), "pc": st.integers(0, 1 << 20)}


def rec(name: str, **fields: st.SearchStrategy[int]) -> st.SearchStrategy[tuple[str, dict[str, int]]]:
    return st.fixed_dictionaries({**fields, **loc}).map(lambda f: (name, f))


RECORDS = st.one_of(
    rec("DMA_MOV", src=addr, dst=addr, n_burst=small, len_burst=small, src_stride=small, dst_stride=small,
        src_mem=mem, dst_mem=mem, pad_mode=st.integers(0, 9), byte_mode=st.integers(0, 1)),
    rec("MOV_ALIGN", src=addr, dst=addr, n_burst=small, len_burst=st.integers(0, 70), src_gap=small,
        dst_gap=small, src_mem=mem, dst_mem=mem, data_type=small, left_pad=small, right_pad=small),
    st.sampled_from(cm._SCALAR[:-1]).flatmap(
        lambda n: rec(n, addr=addr, size=st.integers(0, 16), space=st.integers(-1, 9), align=small)
    ),
    st.sampled_from(("SCALAR_RED", "SCALAR_ATOM", "LDVA")).flatmap(lambda n: rec(n, addr=addr, size=small)),
    rec("DC_PRELOAD", addr=addr, offset=st.integers(-64, 64)),
    st.sampled_from(("MOV_L1_TO_UB", "MOV_UB_TO_L1", "MOV_UB_TO_UB", "MOV_BT")).flatmap(
        lambda n: rec(n, src=addr, dst=addr, n_burst=small, len_burst=small, src_gap=small, dst_gap=small,
                      src_mem=mem, dst_mem=mem)
    ),
    rec("DMA_MOV_ND2NZ", src=addr, dst=addr, nd_num=small, n_value=small, d_value=st.integers(0, 40),
        src_nd_matrix_stride=st.integers(0, 64), src_d_value=st.integers(0, 40), dst_nz_c0_stride=small,
        dst_nz_n_stride=small, dst_nz_matrix_stride=st.integers(0, 64), src_mem=mem, dst_mem=mem, data_type=small),
    rec("MOV_ALIGN_V2", src=addr, dst=addr, len_burst=st.integers(0, 70), n_burst=small,
        src_stride=st.sampled_from([0, 32, 64, 45, 70]), dst_stride=st.sampled_from([0, 32, 64, 45, 70]),
        loop1_size=small, loop2_size=small, loop1_src_stride=st.sampled_from([0, 32, 96, 7]),
        loop2_src_stride=st.sampled_from([0, 256, 9]), loop1_dst_stride=st.sampled_from([0, 32, 96, 7]),
        loop2_dst_stride=st.sampled_from([0, 256, 9]), src_mem=mem, dst_mem=mem, data_type=small,
        left_pad=small, right_pad=st.integers(0, 20)),
    st.sampled_from(("DMA_MOV_CONV_RELU", "DMA_MOV_DEPTH_WISE")).flatmap(
        lambda n: rec(n, src=addr, dst=addr, n_burst=st.integers(0, 2), len_burst=small, src_stride=small,
                      dst_stride=small, src_mem=mem, dst_mem=mem, src_type=small, cr_mode=st.integers(0, 14))
    ),
    st.sampled_from(("MOV_FP", "FIX_L0C_TO_L1", "FIX_L0C_TO_UB")).flatmap(
        lambda n: rec(n, src=addr, dst=addr, m_size=small, n_size=st.integers(0, 70), nd_num=small,
                      src_stride=small, dst_stride=small, dst_nd_stride=small, src_nd_stride=small,
                      src_nz_c0_stride=small, quant_pre_bits=st.sampled_from([4, 8, 16, 32]),
                      unit_flag=st.integers(0, 1), int8_merge=st.integers(0, 1), int4_merge=st.integers(0, 1),
                      channel_split=st.integers(0, 1), nz2nd=st.integers(0, 1), nz2dn=st.integers(0, 1),
                      c310=st.integers(0, 1))
    ),
    st.sampled_from(("DMA_MOV_ND2NZ_D", "DMA_MOV_DN2NZ_D")).flatmap(
        lambda n: rec(n, src=addr, dst=addr, loop4_src_stride=st.integers(0, 512),
                      loop1_src_stride=st.integers(0, 128), d_value=st.integers(0, 40), n_value=small, nd_num=small,
                      loop2_dst_stride=small, loop3_dst_stride=small, loop4_dst_stride=small,
                      small_c0=st.integers(0, 1), src_mem=mem, dst_mem=mem, data_type=small)
    ),
    rec("ND_DMA_OUT_TO_UB", src=addr, dst=addr, data_type=small,
        **{f"{key}{k}": small for k in range(5) for key in ("size", "src_stride", "dst_stride", "left", "right")}),
    rec("MOV_CBUF_TO_BT", src=addr, dst=addr, n_burst=small, len_burst=small, src_gap=small, dst_gap=small,
        data_type=st.sampled_from([9, 12, 16, 18, 4]), cvt_enable=st.integers(0, 1)),
    rec("MOV_CBUF_TO_FB", src=addr, dst=addr, n_burst=small, len_burst=small, src_stride=small, dst_stride=small,
        dst_mem_block=st.integers(0, 2)),
    st.sampled_from(cm._SYNC).flatmap(lambda n: rec(n, src=pipe, dst=pipe, event_id=st.integers(0, 15))),
    rec("PIPE_BARRIER", pipe=pipe),
    rec("FFTS_SYNC", dst=pipe, mode=small, flag=st.integers(0, 15)),
    rec("WAIT_FLAG_DEV", flag=st.integers(0, 15)),
    rec("WAIT_FLAG_DEV_PIPE", flag=st.integers(0, 15), pipe=pipe),
    st.sampled_from(cm._INTRA).flatmap(lambda n: rec(n, pipe=pipe, sync_id=st.integers(0, 15))),
    rec("SET_ATOMIC", mode=st.integers(0, 9)),
    st.sampled_from(("IB_SET_STUB", "IB_WAIT_STUB", "SYNC_ALL_STUB")).flatmap(
        lambda n: rec(n, event_id=st.integers(0, 15), wait_core=small, used_cores=st.integers(-2, 8))
    ),
    st.sampled_from(cm._BUF).flatmap(lambda n: rec(n, pipe=pipe, buf_id=st.integers(0, 15))),
    st.sampled_from(cm._REGS).flatmap(lambda n: rec(n, value=st.integers(0, 2**64 - 1))),
)  # fmt: skip


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(records=st.lists(RECORDS, max_size=40), first=st.integers(0, 1 << 40))
def test_random_buffers_match_the_model(records: list[tuple[str, dict[str, int]]], first: int) -> None:
    data = cm.slot([cm.record(name, **fields) for name, fields in records])
    events, decoder = decode(data, first_serial=first)
    assert decoder.records == len(records)
    assert cm.expand(events, first, len(records)) == cm.model(records)
    assert all(line.endswith(("records dropped: no pipe moves data between their memory kinds",
                              "records dropped: unknown pad mode", "records dropped: lenBurst is 0",
                              "records dropped: no such address space or size",
                              "records dropped: lenBurst, dstGap or conversion not allowed",
                              "records dropped: lenBurst, dstStride or dstMemBlock not allowed",
                              "records dropped: lenBurst, stride, loop or padding not allowed",
                              "records dropped: nBurst is not 1", "writes dropped: ConvRelu mode does not match",
                              "records dropped: M, N or ND count is 0 (a no-op)",
                              "records dropped: loop1 stride or small-C0 D not allowed",
                              "records dropped: data type or loop strides not allowed"))
               for line in decoder.problems())  # fmt: skip


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(records=st.lists(RECORDS, min_size=1, max_size=60), data=st.data())
def test_any_chunking_gives_the_same_events(records: list[tuple[str, dict[str, int]]], data: st.DataObject) -> None:
    slot = cm.slot([cm.record(name, **fields) for name, fields in records])
    whole, one = decode(slot, first_serial=5)
    size = len(slot) - APRIL.heads_size
    chunks = data.draw(st.lists(st.integers(1, max(size, 1)), max_size=12))
    window = data.draw(st.sampled_from([rb.WINDOW_BYTES, 280, 1000]))  # windows smaller than a feed, too
    saved, rb.WINDOW_BYTES = rb.WINDOW_BYTES, window
    try:
        pieces, many = decode(slot, first_serial=5, chunks=chunks)
    finally:
        rb.WINDOW_BYTES = saved
    assert pieces.tobytes() == whole.tobytes()
    assert (many.records, many.next_serial, many.problems()) == (one.records, one.next_serial, one.problems())


def test_each_slot_has_its_own_state_kept_across_feeds() -> None:
    heads = rb.read_heads(cm.slot([one_dma()]), APRIL)
    first, second = rb.SlotDecoder(heads, CONTEXT, 0), rb.SlotDecoder(heads, CONTEXT, 0)
    first.context.state["x"] = 1
    assert second.context.state == {} and CONTEXT.state == {}
    first.feed(memoryview(one_dma()), False)
    assert first.context.state == {"x": 1}


def test_windows_smaller_than_a_feed_give_the_same_events(monkeypatch: pytest.MonkeyPatch) -> None:
    records = [one_dma(src=i * 64) if i % 3 else cm.record("SET_FLAG", src=4, dst=1) for i in range(200)]
    slot = cm.slot(records, record_count=150)  # recordWriteCount ends it inside a window
    whole, one = decode(slot)
    monkeypatch.setattr(rb, "WINDOW_BYTES", 300)
    pieces, many = decode(slot, chunks=[5, 3, 1000, 2])
    assert pieces.tobytes() == whole.tobytes()
    assert (many.records, many.problems()) == (one.records, one.problems()) == (150, [
        f"block 0 (aiv): 150 records (recordWriteCount) end at byte {len(b''.join(records[:150]))}, but writeOffset "
        f"is {len(b''.join(records))}: the rest is not decoded"
    ])  # fmt: skip


def test_a_huge_burst_count_is_refused_and_said() -> None:
    # 2**21 - 1 bursts whose stride does not fit an event would be one event per burst: past a record's bound, so
    # the record makes no event at all (only the block's end), and its kernel says which record and why
    record = cm.record("MOV_ALIGN_V2", src=0, dst=0x1000, len_burst=40, n_burst=(1 << 21) - 1, src_stride=1 << 30,
                       dst_stride=1 << 30, src_mem=UB, dst_mem=GM)  # fmt: skip
    events, decoder = decode(cm.slot([record]))
    assert events["kind"].tolist() == [EventKind.BLOCK_FINISH]
    assert decoder.problems() == []
    assert decoder.context.budget.problem_lines() == [
        "record_refused: MOV_ALIGN_V2 record serial 0 not checked: it would become up to 2 097 150 events, past the "
        "131 072 one record may"
    ]


def test_a_burst_count_within_the_bound_is_one_event_per_burst() -> None:
    # 65 535 bursts (nBurst is 16-bit in hardware) whose stride does not fit an event: one event per burst
    record = cm.record("MOV_ALIGN_V2", src=0, dst=0x1000, len_burst=40, n_burst=0xFFFF, src_stride=1 << 30,
                       dst_stride=1 << 30, src_mem=UB, dst_mem=GM)  # fmt: skip
    events, decoder = decode(cm.slot([record]))
    assert len(events) == 2 * 0xFFFF + 1
    assert decoder.problems() == [] and decoder.context.budget.problem_lines() == []


# --- the walk: loops predicted, anything else walked in lockstep; always the scalar walk's answer ----------------

_KINDS = sorted(PAYLOAD_SIZE)


def _scalar_reference(words: np.ndarray) -> tuple[list[int], int]:
    """Record starts by a plain walk, one record at a time (independent of the decoder's tables)."""
    starts, at = [], 0
    while at < words.size:
        size = PAYLOAD_SIZE.get(int(words[at]))
        if size is None or at + 1 + size // 4 > words.size:
            break
        starts.append(at)
        at += 1 + size // 4
    return starts, at


def _records(types: list[int], rng: np.random.Generator) -> list[np.ndarray]:
    out = []
    for t in types:
        payload = rng.integers(0, 4, PAYLOAD_SIZE[t] // 4, dtype=np.uint32)  # small values: they read as LOAD etc.
        out.append(np.concatenate(([t], payload)).astype(np.uint32))
    return out


@settings(max_examples=150, deadline=None)
@given(
    period=st.lists(st.sampled_from(_KINDS), min_size=1, max_size=12),
    repeats=st.integers(0, 400),
    breaks=st.lists(st.tuples(st.integers(0, 4000), st.sampled_from(_KINDS)), max_size=6),
    tail=st.sampled_from(["whole", "cut", "unknown"]),
    seed=st.integers(0, 2**32 - 1),
)
def test_walk_equals_a_scalar_walk(
    period: list[int], repeats: int, breaks: list[tuple[int, int]], tail: str, seed: int
) -> None:
    """Loops with breaks (the predicted path must stop exactly where the loop breaks and resume from the true
    record), then a cut record or a word that is no type."""
    rng = np.random.default_rng(seed)
    types = period * repeats
    for where, kind in sorted(breaks):
        types.insert(min(where, len(types)), kind)
    words = list(_records(types, rng))
    if tail == "cut":
        words.append(_records([period[0]], rng)[0][:1])
    elif tail == "unknown":
        words.append(np.array([99_999, 1, 2], dtype=np.uint32))
    buffer = np.concatenate([*words, np.zeros(0, dtype=np.uint32)]) if words else np.zeros(0, dtype=np.uint32)
    path, stop = rb.walk(APRIL_RECORDS, buffer, buffer.size)
    expected, expected_stop = _scalar_reference(buffer)
    assert path.tolist() == expected
    assert stop == expected_stop


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), n=st.integers(0, 3000))
def test_walk_of_a_random_mix_equals_a_scalar_walk(seed: int, n: int) -> None:
    rng = np.random.default_rng(seed)
    types = [int(t) for t in rng.choice(_KINDS, size=n)]
    buffer = np.concatenate([np.zeros(0, dtype=np.uint32), *_records(types, rng)])
    path, stop = rb.walk(APRIL_RECORDS, buffer, buffer.size)
    expected, expected_stop = _scalar_reference(buffer)
    assert path.tolist() == expected
    assert stop == expected_stop


# --- a SIMT chip's SIMT part (26.1.0 on) -----------------------------------------------------------------------

SIMT_LAYOUT = _wire.layout_named("26.1.0")


def simt_slot(thread_bytes: int, per_thread: int, entries: list[int], *, threads: int = rb.SIMT_THREADS) -> bytes:
    """A 26.1.0 slot of a SIMT chip with no SIMD records: the thread areas (each head's recordWriteCount at 8), then
    one entry block per count in ``entries``."""
    layout = SIMT_LAYOUT
    assert layout is not None
    head, shape = bytearray(layout.heads_size), rb.simt_shape(layout)
    assert shape is not None
    g = layout.global_head
    struct.pack_into("<Q", head, g.offset("securityVal"), rb.SECURITY_VALUE)
    struct.pack_into("<Q", head, g.offset("kernelInfo.totalBlockDim"), 1)
    struct.pack_into("<I", head, g.offset("offsetInfo.blockHeadSize"), 192)
    struct.pack_into("<Q", head, g.offset("offsetInfo.simtErrorInfo.size"), thread_bytes)
    head[g.offset("supportSimt")] = 1
    area = shape.thread_head + thread_bytes
    simt = bytearray(threads * area)
    for i in range(threads):
        struct.pack_into("<Q", simt, i * area + 8, per_thread)
    for n in entries:
        block = bytearray(shape.entry_head)
        struct.pack_into("<Q", block, 8, n)
        simt += bytes(block) + bytes(shape.entry_record * min(n, 64))  # a hostile count: the records are not all there
    return bytes(head) + bytes(simt)


def simt_problems(data: bytes, chunk: int) -> list[str]:
    layout = SIMT_LAYOUT
    assert layout is not None
    heads = rb.read_heads(data, layout)
    assert rb.wire_mismatch(heads, layout, len(data)) == ""  # a SIMT chip's slot runs past writeOffset
    decoder = rb.SlotDecoder(heads, CONTEXT, 0, _record_table(layout), rb.simt_shape(layout))
    body, tail, at = memoryview(data)[layout.heads_size :], b"", 0
    while at < len(body):
        piece = tail + bytes(body[at : at + chunk])
        at += chunk
        events, used = decoder.feed(memoryview(piece), at >= len(body))
        assert events.size == 1 or at < len(body)  # only the slot's BLOCK_FINISH: its thread areas hold no record
        tail = piece[used:]
    return decoder.problems()


@pytest.mark.parametrize("chunk", [1 << 20, 1000, 7])
def test_a_simt_part_is_decoded_and_counted_however_it_arrives(chunk: int) -> None:
    # Each head counts 3 records its writeOffset (0) does not hold: said, never read from the zeroed area.
    assert simt_problems(simt_slot(128, 3, [2, 5]), chunk) == [
        "6144 SIMT records counted by recordWriteCount but not within writeOffset",
        # the entry records are zeros: heads of dims (0, 0, 0)
        "7 SIMT entry records of a SIMT call whose thread dims are out of range (a zero, or over 2048 threads)",
    ]


def test_a_short_simt_part_says_where_it_ends() -> None:
    assert simt_problems(simt_slot(64, 1, [], threads=10), 4096) == [
        "10 SIMT records counted by recordWriteCount but not within writeOffset",
        "the SIMT part ends after 10 of 2048 thread areas",
    ]


def test_hostile_simt_counts_are_counted_not_followed() -> None:
    """An entry block that claims 2**64-1 records: the rest of the slot is taken as its records (69 whole ones;
    nothing is allocated for the count), the others are said to lie past the slot's end, and a thread head's count
    is summed without overflow."""
    problems = simt_problems(simt_slot(32, 2**64 - 1, [2**64 - 1, 3]), 1 << 16)
    assert problems == [
        f"{2048 * (2**64 - 1)} SIMT records counted by recordWriteCount but not within writeOffset",
        "69 SIMT entry records of a SIMT call whose thread dims are out of range (a zero, or over 2048 threads)",
        f"{2**64 - 1 - 69} SIMT entry records past the end of the slot",
    ]
