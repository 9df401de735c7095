"""The record decoder's compiled loops (sanitizerd/native/_records.c, issue 29) against numpy's reference path
(sanitizerd/compat/records/slots.py), side by side on random and hostile inputs: the walk, the numbering and
grouping, the gathers and the merge, each compared exactly; then whole slots through the decoder, fed in pieces,
and racecheck's and memcheck's findings on a stream decoded both ways.

Both paths run in this one process: the compiled module is imported directly, and numpy's is chosen by setting
``slots.compiled`` to None (whatever SANITIZERD_NATIVE says)."""

from __future__ import annotations

import dataclasses
import importlib
import struct
from collections.abc import Iterator
from contextlib import contextmanager

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sanitizerd.chips import CHIPS
from sanitizerd.compat import wire
from sanitizerd.compat.records import slots as rb
from sanitizerd.compat.records.convert import base, moves, sync, vector
from sanitizerd.compat.records.convert.base import CONVERTERS, BlockContext
from sanitizerd.compat.records.convert.bounds import ExpansionBudget
from sanitizerd.compat.records.numbering import RecordTable, record_table
from sanitizerd.compat.records.types import MEMTYPE_TO_SPACE, NO_PIPE, NO_SPACE, PIPE_OF_PAIR, RecordType
from sanitizerd_protocol.records import EVENT_DTYPE, BlockType, EventKind

try:
    COMPILED = importlib.import_module("sanitizerd.native._records")
except ImportError:  # no C compiler at install: numpy's path is the only one (CI's first pass requires it built)
    COMPILED = None

pytestmark = pytest.mark.skipif(COMPILED is None, reason="sanitizerd.native._records is not built")

APRIL = wire.MSSANITIZER_4A419F05
MASTER = wire.LAYOUTS["mssanitizer-1e040de1"]  # a wire with serial merges (record_serials' rules)
TABLES = {"april": record_table(APRIL), "master": record_table(MASTER)}


@pytest.fixture(autouse=True)
def _compiled_side(monkeypatch: pytest.MonkeyPatch) -> None:
    """The compiled side is the module imported above whatever SANITIZERD_NATIVE says (CI's numpy pass too)."""
    monkeypatch.setattr(rb, "compiled", COMPILED)
    monkeypatch.setattr(base, "compiled", COMPILED)


@contextmanager
def path(chosen: object) -> Iterator[None]:
    """The decoder (``slots``) and the converters' ``pack`` (``base``) on the compiled loops (``COMPILED``) or
    numpy's (None), for the block."""
    before = rb.compiled, base.compiled
    rb.compiled = base.compiled = chosen  # type: ignore[assignment]
    try:
        yield
    finally:
        rb.compiled, base.compiled = before


def known_types(table: RecordTable) -> np.ndarray:
    return np.flatnonzero(table.step_words > 0).astype(np.uint32)


def region(table: RecordTable, rng: np.random.Generator, records: int, hostile: float, period: int) -> np.ndarray:
    """u32 words of ``records`` records of known types (a loop of ``period`` types where > 0), payloads of small
    values, type values and random words (what leads a speculative walk astray), with probability ``hostile`` a
    word that is no type (0xFFFFFFFF, one past the table, a type the table cannot step over) in between."""
    known = known_types(table)
    unknown = [0xFFFFFFFF, table.table_len, table.table_len - 1, *np.flatnonzero(table.step_words == 0)[:4].tolist()]
    loop = rng.choice(known, size=period) if period else None
    parts = []
    for i in range(records):
        if hostile and rng.random() < hostile:
            parts.append(np.array([rng.choice(unknown)], dtype=np.uint32))
        t = int(loop[i % period]) if loop is not None else int(rng.choice(known))
        size = int(table.step_words[t]) - 1
        kind = rng.integers(0, 3)
        if kind == 0:
            payload = rng.integers(0, 14, size)
        elif kind == 1:
            payload = rng.choice(known, size=size)
        else:
            payload = rng.integers(0, 1 << 32, size)
        parts.append(np.concatenate(([t], payload)).astype(np.uint32))
    return np.concatenate([np.zeros(0, dtype=np.uint32), *parts])


walks = st.fixed_dictionaries(
    {
        "table": st.sampled_from(sorted(TABLES)),
        "seed": st.integers(0, 2**32 - 1),
        "records": st.sampled_from([0, 1, 2, 5, 50, 300, 1500]),
        "hostile": st.sampled_from([0.0, 0.0, 0.001, 0.05]),
        "period": st.sampled_from([0, 0, 1, 3, 11]),
        "cut": st.integers(-3, 40),  # words cut off the end (a record not all there), or a limit past the words
    }
)


def walked(draw: dict[str, object]) -> tuple[RecordTable, np.ndarray, int]:
    table = TABLES[str(draw["table"])]
    rng = np.random.default_rng(int(draw["seed"]))  # type: ignore[call-overload]
    words = region(table, rng, int(draw["records"]), float(draw["hostile"]), int(draw["period"]))  # type: ignore[call-overload]
    cut = int(draw["cut"])  # type: ignore[call-overload]
    limit = words.size - cut
    return table, words, limit


@settings(max_examples=200, deadline=None)
@given(draw=walks)
def test_the_walk_is_numpys(draw: dict[str, object]) -> None:
    table, words, limit = walked(draw)
    with path(COMPILED):
        got, got_stop = rb.walk_compiled(table, words, limit)
    want, want_stop = rb.walk(table, words, limit)
    assert got.tolist() == want.tolist()
    assert got_stop == want_stop
    # a window cut mid-record (as a connection's piece ends), at every few words
    for end in range(0, min(words.size, 64), 7):
        got, got_stop = rb.walk_compiled(table, words[:end], end)
        want, want_stop = rb.walk(table, words[:end], end)
        assert (got.tolist(), got_stop) == (want.tolist(), want_stop)


@settings(max_examples=100, deadline=None)
@given(draw=walks, most=st.integers(0, 60))
def test_the_walk_stops_after_most_records(draw: dict[str, object], most: int) -> None:
    table, words, limit = walked(draw)
    want, want_stop = rb.walk(table, words, limit)
    got, got_stop = rb.walk_compiled(table, words, limit, most)
    if want.size <= most:
        assert (got.tolist(), got_stop) == (want.tolist(), want_stop)
    else:
        assert got.tolist() == want[:most].tolist()
        assert got_stop == int(want[most])  # the next record's start: where the last one taken ends


def numpy_groups(table: RecordTable, words: np.ndarray, starts: np.ndarray) -> list[list[int]]:
    codes = table.type_code[words[starts]]
    return [np.flatnonzero(codes == c).tolist() for c in range(len(table.code_type))]


@settings(max_examples=200, deadline=None)
@given(
    draw=walks,
    last=st.integers(-1, 400),
    next_serial=st.sampled_from([0, 1, 7, 2**32, 2**63 - 1, 2**62 + 5]),
)
def test_the_numbering_and_grouping_are_numpys(draw: dict[str, object], last: int, next_serial: int) -> None:
    table, words, limit = walked(draw)
    starts, _ = rb.walk(table, words, limit)
    last_type = last if last < 0 or table.step(last) else -1  # the walk's last type: -1 or a known one
    serials, order, offsets = rb.group_compiled(table, words, starts, last_type, next_serial)
    if starts.size:
        assert serials.tolist() == rb.record_serials(table, words[starts], last_type, next_serial).tolist()
    else:
        assert serials.size == 0
    groups = [order[offsets[c] : offsets[c + 1]].tolist() for c in range(len(table.code_type))]
    assert groups == numpy_groups(table, words, starts)
    assert offsets[-1] == starts.size


def test_merge_rules_number_as_numpy_across_windows() -> None:
    """The record before the window's first is the last window's: a record of a rule after it takes its serial."""
    table = TABLES["master"]
    records, after = table.merges[0]
    t, before = int(records[0]), int(after[0])
    words = np.array([t] + [0] * (int(table.step_words[t]) - 1), dtype=np.uint32)
    starts = np.array([0], dtype=np.int64)
    for last in (before, -1, t):
        serials, _, _ = rb.group_compiled(table, words, starts, last, 10)
        assert serials.tolist() == rb.record_serials(table, words[starts], last, 10).tolist()
    assert rb.group_compiled(table, words, starts, before, 10)[0].tolist() == [9]


def test_group_refuses_starts_that_are_not_the_walks() -> None:
    table = TABLES["april"]
    words = np.array([0xFFFFFFFF, 1, 2, 3], dtype=np.uint32)
    for bad in ([0], [4], [-1], [1 << 40]):
        with pytest.raises(ValueError):
            rb.group_compiled(table, words, np.array(bad, dtype=np.int64), -1, 0)


@settings(max_examples=100, deadline=None)
@given(draw=walks)
def test_the_gathers_are_numpys(draw: dict[str, object]) -> None:
    table, words, limit = walked(draw)
    starts, _ = rb.walk(table, words, limit)
    for record_type, dtype in table.dtypes.items():
        wire_type = table.wire(record_type)
        assert wire_type is not None
        mine = starts[words[starts] == wire_type]
        if not mine.size:  # the decoder gathers only the types it walked (numpy's view needs a whole payload)
            continue
        size = table.payload_size[record_type]
        got = rb.gather_compiled(words, mine, size, record_type, dtype)
        want = rb._gather(words, mine, size, record_type, dtype)
        assert got.dtype == want.dtype
        assert got.tobytes() == np.ascontiguousarray(want).tobytes()


def test_a_gather_past_the_words_is_refused() -> None:
    table = TABLES["april"]
    record_type, dtype = next(iter(table.dtypes.items()))
    size = table.payload_size[record_type]
    words = np.zeros(size // 4 + 1, dtype=np.uint32)
    assert rb.gather_compiled(words, np.array([0]), size, record_type, dtype).size == 1
    for start in (1, -1, words.size, 1 << 62):
        with pytest.raises(IndexError):
            rb.gather_compiled(words, np.array([start]), size, record_type, dtype)
    with pytest.raises(ValueError):
        rb.gather_compiled(words, np.array([0]), size + 4, record_type, dtype)


def numpy_merge(parts: list[np.ndarray]) -> np.ndarray:
    order = np.argsort(np.concatenate([p["serial"] for p in parts]), kind="stable")
    return np.concatenate(parts)[order]


@settings(max_examples=200, deadline=None)
@given(
    seed=st.integers(0, 2**32 - 1),
    parts=st.integers(0, 6),
    span=st.integers(1, 200),
    first=st.sampled_from([0, 5, 2**63, 2**64 - 300]),
    outside=st.booleans(),
)
def test_the_merge_is_a_stable_sort_by_serial(seed: int, parts: int, span: int, first: int, outside: bool) -> None:
    rng = np.random.default_rng(seed)
    arrays = []
    for p in range(parts):
        n = int(rng.integers(0, 3 * span))
        events = np.zeros(n, dtype=EVENT_DTYPE)
        events["serial"] = np.sort(rng.integers(0, span, n)).astype(np.uint64) + np.uint64(first)
        events["address"] = np.arange(n) + (p << 32)  # which part and which event: stability shows
        arrays.append(events)
    if outside and arrays and arrays[-1].size:
        past = first + span if rng.random() < 0.5 else first - 1  # just after the range, or just before it
        arrays[-1]["serial"][-1] = np.uint64(past % 2**64)
        assert rb.merge_compiled(arrays, first, span) is None
        return
    got = rb.merge_compiled(arrays, first, span)
    assert got is not None
    want = numpy_merge(arrays) if arrays else np.zeros(0, dtype=EVENT_DTYPE)
    assert got.tobytes() == want.tobytes()


# --- whole slots through the decoder, both ways ---------------------------------------------------------------


def april_slot(words: np.ndarray, record_write_count: int, write_offset: int | None = None) -> bytes:
    region_bytes = words.astype("<u4").tobytes()
    head = bytearray(APRIL.heads_size)
    struct.pack_into("<Q", head, 0, rb.SECURITY_VALUE)
    write = len(region_bytes) if write_offset is None else write_offset
    struct.pack_into("<QQQQ", head, APRIL.global_head.size, record_write_count + 3, record_write_count,
                     len(region_bytes), write)  # fmt: skip
    struct.pack_into("<I", head, 24, 1)
    return bytes(head) + region_bytes


def decoded(data: bytes, piece: int | None, chosen: object) -> tuple[bytes, list[str], int]:
    with path(chosen):
        context = dataclasses.replace(BlockContext(0, CHIPS["910B1"]), budget=ExpansionBudget())
        decoder = rb.SlotDecoder(rb.read_heads(data, APRIL), context, 5)
        assert (decoder._compiled_table is not None) == (chosen is not None)
        events = fed_in_pieces(decoder, memoryview(data)[APRIL.heads_size :], piece)
    return events.tobytes(), decoder.problems(), decoder.records


def fed_in_pieces(decoder: rb.SlotDecoder, body: memoryview, piece: int | None) -> np.ndarray:
    """The events ``decoder`` makes of a slot's ``body`` fed ``piece`` bytes at a time (None: at once), each feed
    with what the last one left over, as a connection feeds it."""
    out, pending, at = [], b"", 0
    step = piece or len(body) or 1
    while True:
        chunk = bytes(body[at : at + step])
        at += len(chunk)
        final = at >= len(body)
        pending += chunk
        events, used = decoder.feed(memoryview(pending), final)
        pending = pending[used:]
        out.append(events)
        if final:
            return np.concatenate(out)


@settings(max_examples=60, deadline=None)
@given(
    seed=st.integers(0, 2**32 - 1),
    records=st.sampled_from([0, 1, 3, 40, 400]),
    hostile=st.sampled_from([0.0, 0.0, 0.01]),
    period=st.sampled_from([0, 11]),
    piece=st.sampled_from([None, 4, 7, 68, 100, 4096]),
    count_delta=st.integers(-5, 5),
    cut=st.integers(0, 9),
)
def test_a_slot_decodes_alike_both_ways(
    seed: int, records: int, hostile: float, period: int, piece: int | None, count_delta: int, cut: int
) -> None:
    """Random record mixes (random payloads: hostile values for every converter), words that are no type,
    recordWriteCount short or long of the records, a record region cut short of writeOffset, fed whole or in the
    pieces a connection gives."""
    table = TABLES["april"]
    rng = np.random.default_rng(seed)
    words = region(table, rng, records, hostile, period)
    write_offset = words.size * 4
    words = words[: max(words.size - cut, 0)]
    data = april_slot(words, max(records + count_delta, 0), write_offset)
    assert decoded(data, piece, COMPILED) == decoded(data, piece, None)


def tile_slot(tiles: int) -> bytes:
    """benchmarks/compat.py's tile loop (DataCopy in x 2, flags, a binary op, DataCopy out, a barrier), each tile
    at its own addresses; every seventh tile without its waits (its copies and the vector op race)."""
    from benchmarks import compat as bench

    one = []
    for i in range(tiles):
        records = bench.tile(i)
        one += [r for k, r in enumerate(records) if i % 7 != 3 or k not in (3, 6)]
    region_bytes = b"".join(one)
    words = np.frombuffer(region_bytes, dtype="<u4")
    return april_slot(words, len(one))


@pytest.mark.parametrize("tool", ["racecheck", "memcheck"])
@pytest.mark.parametrize("piece", [None, 68, 1000])
def test_a_detector_finds_the_same_both_ways(tool: str, piece: int | None) -> None:
    from tests.detector_helpers import make_detector, run_kernel

    data = tile_slot(60)
    found = []
    for chosen in (COMPILED, None):
        events, problems, _ = decoded(data, piece, chosen)
        batch = np.frombuffer(events, dtype=EVENT_DTYPE).copy()
        findings = run_kernel(make_detector(tool), batch)
        found.append(([f.to_dict() if hasattr(f, "to_dict") else repr(f) for f in findings], problems))
    assert found[0] == found[1]
    if tool == "racecheck":
        assert found[0][0]  # the overlapping tiles race: the comparison is of findings, not of two empty lists


# --- base.pack: events built a column at a time ---------------------------------------------------------------

PACK_FIELDS = sorted(base._PACKING)
INTEGERS = ["<u1", "<i1", "<u2", "<i2", "<u4", "<i4", "<u8", "<i8", "?"]


def extreme_column(rng: np.random.Generator, dtype: np.dtype, n: int) -> np.ndarray:
    """Values at the dtype's bounds (0, -1, min, max, one past a field's width) and random ones."""
    if dtype.kind == "b":
        return rng.integers(0, 2, n).astype(bool)
    info = np.iinfo(dtype)
    edges = [0, 1, int(info.max), int(info.min), min(int(info.max), 255), min(int(info.max), 256)]
    edges = np.array([*edges, min(int(info.max), 65536), max(int(info.min), -1)], dtype=dtype)
    picks = rng.integers(0, edges.size + 1, n)
    wide = rng.integers(info.min, info.max, n, dtype=dtype, endpoint=True)
    return np.where(picks < edges.size, edges[np.minimum(picks, edges.size - 1)], wide).astype(dtype)


@settings(max_examples=300, deadline=None)
@given(
    seed=st.integers(0, 2**32 - 1),
    n=st.sampled_from([0, 1, 2, 255, 256, 257, 1000]),
    chosen=st.lists(st.tuples(st.sampled_from(PACK_FIELDS), st.sampled_from([*INTEGERS, "scalar", "strided",
                                                                             "broadcast"])), max_size=12),
    into=st.sampled_from(["new", "every other row"]),
)  # fmt: skip
def test_pack_is_numpys(seed: int, n: int, chosen: list[tuple[str, str]], into: str) -> None:
    rng = np.random.default_rng(seed)
    fields: dict[str, object] = {}
    for name, how in chosen:
        if how == "scalar":
            fields[name] = int(rng.choice([0, 1, -1, 2**63 - 1, -(2**63), 2**64 - 1, 65536, 255]))
        elif how == "strided":  # a field of a structured array, as converters read records
            records = np.zeros(n, dtype=[("a", "<u2"), ("v", "<i8"), ("pad", "V5")])
            records["v"] = extreme_column(rng, np.dtype("<i8"), n)
            fields[name] = records["v"]
        elif how == "broadcast":
            fields[name] = np.broadcast_to(np.asarray(int(rng.integers(-5, 1 << 20)), dtype=np.int64), n)
        else:
            fields[name] = extreme_column(rng, np.dtype(how), n)
    if into == "new":
        got = base.pack_compiled(n, None, fields)  # type: ignore[arg-type]
        want = base.pack_numpy(n, **fields)  # type: ignore[arg-type]
        assert got is not None
        assert got.tobytes() == want.tobytes()
    else:
        mine, theirs = (np.full((n, 2, 7), 0xAB, dtype=np.uint64) for _ in range(2))
        assert base.pack_compiled(n, mine[:, 1], fields) is not None  # type: ignore[arg-type]
        base.pack_numpy(n, theirs[:, 1], **fields)  # type: ignore[arg-type]
        assert mine.tobytes() == theirs.tobytes()


def test_pack_leaves_to_numpy_what_it_does_not_take() -> None:
    n = 4
    for column in (np.arange(n, dtype=np.float64), np.arange(n, dtype=">u4"), np.arange(n + 1), np.zeros((n, 1))):
        assert base.pack_compiled(n, None, {"address": column}) is None
    assert base.pack(n, address=np.arange(n, dtype=np.float64) + 0.5)["address"].tolist() == [0, 1, 2, 3]


# --- converters compiled whole: DMA_MOV's usual case, the flags and the barrier -----------------------------------

CONVERTED = {
    "DMA_MOV": RecordType.DMA_MOV,
    "SET_FLAG": RecordType.SET_FLAG,
    "WAIT_FLAGI_V": RecordType.WAIT_FLAGI_V,
    "PIPE_BARRIER": RecordType.PIPE_BARRIER,
    "BINARY_OP": RecordType.BINARY_OP,
    "VREDUCEV2_BINARY": RecordType.VREDUCEV2_BINARY,
    "TERNARY_OP": RecordType.TERNARY_OP,
}
USUAL_PAIRS = np.array(
    [(s, d) for s in range(256) for d in range(256)
     if PIPE_OF_PAIR[s, d] != NO_PIPE and MEMTYPE_TO_SPACE[s] != NO_SPACE and MEMTYPE_TO_SPACE[d] != NO_SPACE],
    dtype=np.uint8,
)  # fmt: skip


def hostile_records(rng: np.random.Generator, dtype: np.dtype, n: int, usual: float) -> np.ndarray:
    """``n`` records of ``dtype``: every field at its extremes (0, 1, max, one past 8 and 16 bits) or random;
    with probability ``usual`` a DMA_MOV record is made what the compiled pass takes (no pad or byte mode, memory
    kinds with spaces, small strides), so that batches are all usual as often as not."""
    records = np.zeros(n, dtype=dtype)
    raw = np.ascontiguousarray(records).view(np.uint8)
    raw[:] = rng.integers(0, 256, raw.size, dtype=np.uint8)  # the bytes between fields too
    for name in dtype.names:
        records[name] = extreme_column(rng, dtype.fields[name][0], n)
    if "pad_mode" in dtype.names:
        usual_rows = rng.random(n) < usual
        pairs = USUAL_PAIRS[rng.integers(0, len(USUAL_PAIRS), n)]
        for name, values in (("pad_mode", 0), ("byte_mode", 0), ("src_mem", pairs[:, 0]), ("dst_mem", pairs[:, 1])):
            records[name] = np.where(usual_rows, values, records[name])
        smalls = (("len_burst", [0, 1, 2, 0x8000]), ("src_stride", [0, 1, 0x7FFF]), ("dst_stride", [0, 0x7FFF]))
        for name, small in smalls:  # sums up to 0xFFFF exactly
            records[name] = np.where(usual_rows, rng.choice(small, n), records[name])
    if "mask_mode" in dtype.names and "src1_block_num" in dtype.names:  # BinaryOpRecord: kept masks
        usual_rows = rng.random(n) < usual
        full = rng.random(n) < 0.5
        for name in ("mask0", "mask1"):
            records[name] = np.where(usual_rows & full, np.uint64(2**64 - 1), records[name])
        records["mask_mode"] = np.where(usual_rows, 0, records["mask_mode"])
        records["repeat"] = np.where(usual_rows & (records["repeat"] == 0), 1, records["repeat"])
        for op in ("src0", "src1", "dst"):
            for member in ("block_num", "block_size"):
                column = records[f"{op}_{member}"]
                records[f"{op}_{member}"] = np.where(usual_rows & (column == 0), 8 if member == "block_num" else 32,
                                                     column)  # fmt: skip
            eligible = (records[f"{op}_block_num"] == 8) & (records[f"{op}_block_size"] == 32)
            eligible &= records[f"{op}_data_bits"] >= 16
            records[f"{op}_data_bits"] = np.where(usual_rows & ~full & eligible, 8, records[f"{op}_data_bits"])
    return records


def make_odd(rng: np.random.Generator, records: np.ndarray, odd: str) -> None:
    """One BinaryOpRecord of ``records`` made one that msSanitizer cuts or skips (the compiled pass refuses it)."""
    k, op = int(rng.integers(0, len(records))), str(rng.choice(["src0", "src1", "dst"]))
    if odd == "converted":  # a bit mask turned into "every element up to the last set bit"
        records["mask0"][k], records["mask1"][k] = rng.integers(0, 2**63), 0
        records[f"{op}_block_num"][k], records[f"{op}_block_size"][k], records[f"{op}_data_bits"][k] = 8, 32, 16
    elif odd == "no repeat":
        records["repeat"][k] = 0
    elif odd == "no blocks":
        records[f"{op}_block_num" if rng.random() < 0.5 else f"{op}_block_size"][k] = 0
    else:
        records["mask_mode"][k] = 1


def converted_both_ways(
    record_type: int, records: np.ndarray, serials: np.ndarray, block_type: int, chip: str = "910B1",
    refusing: bool = False,
) -> list:
    out = []
    for chosen in (COMPILED, None):
        with path(chosen):
            context = BlockContext(block_type, CHIPS[chip])
            if refusing and len(records):  # a call in which a record was refused already: later slots make nothing
                context.budget.begin("test", np.asarray(serials, dtype=np.uint64))
                context.budget._dead[0] = True
                assert context.budget.refusing
            events = CONVERTERS[record_type].convert(record_type, records, serials, context)
            out.append((events.dtype, events.tobytes(), context.dropped))
    return out


@settings(max_examples=300, deadline=None)
@given(
    seed=st.integers(0, 2**32 - 1),
    name=st.sampled_from(sorted(CONVERTED)),
    n=st.sampled_from([0, 1, 2, 7, 300]),
    usual=st.sampled_from([1.0, 1.0, 0.99, 0.5, 0.0]),
    block_type=st.sampled_from([0, 1, 2, 255]),
    chip=st.sampled_from(["910B1", "310P"]),
    serial_dtype=st.sampled_from(["<u8", "<i8", "<u4"]),
    sliced=st.booleans(),
    edge=st.sampled_from([None, 0xFFFF, 0x10000]),
    side=st.sampled_from(["src_stride", "dst_stride"]),
    refusing=st.booleans(),
    odd=st.sampled_from([None, "converted", "no repeat", "no blocks", "count mode"]),
)
def test_the_compiled_converters_are_numpys(
    seed: int, name: str, n: int, usual: float, block_type: int, chip: str, serial_dtype: str, sliced: bool,
    edge: int | None, side: str, refusing: bool, odd: str | None,
) -> None:
    """Each compiled converter against numpy's on the same records: every field at its extremes (addresses and
    pcs near 2**64, strides that overflow 16 bits when added, pipes and event ids past their fields, memory kinds
    with no pipe or no space, pad and byte modes), empty and one-record batches, serials of other dtypes, and
    records that are a strided slice: events and dropped counts identical."""
    rng = np.random.default_rng(seed)
    record_type = CONVERTED[name]
    dtype = CONVERTERS[record_type].dtype
    records = hostile_records(rng, dtype, 2 * n if sliced else n, usual)
    if sliced:
        records = records[::2]
    if edge is not None and n and "len_burst" in dtype.names:  # one record's stride at 16 bits' edge, or past it
        k = int(rng.integers(0, n))
        records["len_burst"][k], records[side][k] = 0x8000, edge - 0x8000
    if odd is not None and n and "src1_block_num" in dtype.names:
        make_odd(rng, records, odd)
    serials = np.sort(rng.integers(0, 2**63, n)).astype(serial_dtype)
    if n:
        serials[-1] = np.iinfo(serials.dtype).max
    got, want = converted_both_ways(record_type, records, serials, block_type, chip, refusing)
    assert got[1] == want[1] and got[2] == want[2]
    compiled_whole = usual == 1.0 and n and serial_dtype != "<u4" and edge != 0x10000 and odd is None
    if compiled_whole:  # the compiled pass itself was compared
        with path(COMPILED):
            context = BlockContext(block_type, CHIPS["910B1"])
            if record_type == RecordType.DMA_MOV:
                assert moves.dma_mov_compiled(records, serials, context) is not None
            elif record_type in (RecordType.BINARY_OP, RecordType.VREDUCEV2_BINARY):
                if block_type != BlockType.AIC:
                    assert vector.binary_compiled(record_type, records, serials, context) is not None
            elif record_type != RecordType.TERNARY_OP:  # TERNARY_OP: numpy's always
                assert base.sync_compiled(0, records, serials, context, {}) is not None


def test_the_compiled_converters_take_the_usual_batches() -> None:
    """The tile loop's records go through the compiled passes (not numpy's fallback), and a hostile record in a
    batch sends the whole batch to numpy."""
    rng = np.random.default_rng(1)
    context = BlockContext(1, CHIPS["910B1"])
    records = hostile_records(rng, moves.DMA_MOV, 50, 1.0)
    serials = np.arange(50, dtype=np.uint64)
    with path(COMPILED):
        assert moves.dma_mov_compiled(records, serials, context) is not None
        records["pad_mode"][17] = 1
        assert moves.dma_mov_compiled(records, serials, context) is None
        flags = hostile_records(rng, sync.SYNC, 50, 0.0)
        saturated = {"pipe": ("src", 255), "dst_pipe": ("dst", 255), "event_id": ("event_id", 0xFFFF)}
        assert base.sync_compiled(EventKind.SET_FLAG, flags, serials, context, saturated) is not None


def test_the_compiled_passes_refuse_buffers_that_do_not_fit() -> None:
    """The C checks every length and offset itself (whatever the wrapper does)."""
    out = np.zeros((2, 7), dtype=np.uint64)
    raw = np.zeros(64, dtype=np.uint8)
    serials = np.zeros(1, dtype=np.uint64)
    pairs, spaces, words = np.zeros(65536, np.uint8), np.zeros(256, np.uint8), np.zeros(7, np.uint64)
    with pytest.raises(ValueError):  # a member past the record
        COMPILED.dma_mov(out, raw, 64, serials, np.full(12, 60, dtype=np.int64), pairs, spaces, words, words)
    with pytest.raises(ValueError):  # out too short for the records
        COMPILED.dma_mov(out[:1], raw, 64, serials, np.zeros(12, dtype=np.int64), pairs, spaces, words, words)
    with pytest.raises(ValueError):  # a pipe table short of 256 x 256
        COMPILED.dma_mov(out, raw, 64, serials, np.zeros(12, dtype=np.int64), pairs[:-1], spaces, words, words)
    with pytest.raises(ValueError):  # a field past the record
        COMPILED.fields(out[:1], raw, 64, serials, words, [(60, 8, 0, 0, 0, 1)])
    with pytest.raises(ValueError):  # a field outside the event
        COMPILED.fields(out[:1], raw, 64, serials, words, [(0, 8, 0, 7, 0, 1)])
    with pytest.raises(ValueError):  # serials short of the records
        COMPILED.fields(out[:1], raw, 32, serials, words, [])
    with pytest.raises(ValueError):
        COMPILED.fields(out[:1], raw, 0, serials, words, [])


@pytest.mark.parametrize("odd", ["converted", "no repeat", "no blocks", "count mode", "stride 0x10000"])
@pytest.mark.parametrize("seed", range(12))
def test_one_odd_record_sends_the_batch_to_numpy(odd: str, seed: int) -> None:
    """A batch the compiled passes take, with one record they must not (a cut or skipped vector operand, a DMA
    stride one past 16 bits): converted alike both ways."""
    rng = np.random.default_rng(seed)
    if odd == "stride 0x10000":
        record_type, records = RecordType.DMA_MOV, hostile_records(rng, moves.DMA_MOV, 40, 1.0)
        k = int(rng.integers(0, 40))
        records["len_burst"][k], records[str(rng.choice(["src_stride", "dst_stride"]))][k] = 0x8000, 0x8000
    else:
        record_type, records = RecordType.BINARY_OP, hostile_records(rng, vector.BINARY_DTYPE, 40, 1.0)
        make_odd(rng, records, odd)
    serials = np.arange(40, dtype=np.uint64)
    got, want = converted_both_ways(record_type, records, serials, BlockType.AIV)
    assert got[1] == want[1] and got[2] == want[2]
