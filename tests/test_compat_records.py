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
