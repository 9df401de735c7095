"""The record buffer decoder against an independent byte-level model of msSanitizer's rules (reference §1.7)."""

from __future__ import annotations

import numpy as np

from sanitizerd.chips import CHIPS
from sanitizerd.compat import record_buffer as rb
from sanitizerd.compat.convert.base import BlockContext
from tests import compat_model as cm

CONTEXT = BlockContext(block_type=0, chip=CHIPS["910B1"])


def decode(data: bytes, first_serial: int = 0, chunks: list[int] | None = None) -> tuple[np.ndarray, rb.SlotDecoder]:
    """Decode a whole slot, feeding its record region in ``chunks`` (sizes) as a connection would."""
    heads = rb.read_heads(data)
    decoder = rb.SlotDecoder(heads, CONTEXT, first_serial)
    region = memoryview(data)[rb.HEADS_SIZE :]
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
    h = rb.read_heads(data)
    assert rb.HEADS_SIZE == 38_528 + 128
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
