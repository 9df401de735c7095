"""Windows converted straight from their words (``_records.direct``, issue 29: docs/design.md, "Compiled hot
loops") against the grouped path and numpy's, side by side: whole slots of the usual types' records, hostile and
usual, mixed with records that have no plan or that share the serial of the record before, fed whole or in the
pieces a connection gives, in every block type and on a chip that aligns by element; then the C function itself on
buffers that do not fit, plans that point outside their records and starts outside the words.

Both paths run in this one process: the compiled module is imported directly (whatever SANITIZERD_NATIVE says),
numpy's is chosen by setting ``slots.compiled`` and ``base.compiled`` to None, and the grouped compiled path by
making ``slots.direct_plans`` give none."""

from __future__ import annotations

import dataclasses
import importlib
import struct
from collections.abc import Callable

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sanitizerd.chips import CHIPS
from sanitizerd.compat import wire
from sanitizerd.compat.records import slots as rb
from sanitizerd.compat.records.convert import base
from sanitizerd.compat.records.convert.base import CONVERTERS, BlockContext, RecordPlaces
from sanitizerd.compat.records.convert.bounds import ExpansionBudget
from sanitizerd.compat.records.numbering import RecordTable, record_table
from sanitizerd.compat.records.types import MEMTYPE_TO_SPACE, PIPE_OF_PAIR, RecordType
from tests.test_native_records import fed_in_pieces, hostile_records

try:
    COMPILED = importlib.import_module("sanitizerd.native._records")
except ImportError:  # no C compiler at install: numpy's path is the only one (CI's first pass requires it built)
    COMPILED = None

pytestmark = pytest.mark.skipif(COMPILED is None, reason="sanitizerd.native._records is not built")

R = RecordType
APRIL = wire.MSSANITIZER_4A419F05
TABLES = {"april": (APRIL, record_table(APRIL))}
LATER = wire.LAYOUTS["mssanitizer-1e040de1"]
TABLES["master"] = (LATER, record_table(LATER))
# The types with a plan (their converters' usual cases), and beside them: a type whose records join the serial of
# the record before (MSTX_STUB, then DMA_MOV or BINARY_OP: RecordTable.merges), converted types with no plan
# (TERNARY_OP, UNARY_OP) and a type with no converter.
PLANNED = [R.DMA_MOV, R.SET_FLAG, R.SET_FLAGI, R.SET_FLAG_V, R.SET_FLAGI_V, R.WAIT_FLAG, R.WAIT_FLAGI, R.WAIT_FLAG_V,
           R.WAIT_FLAGI_V, R.PIPE_BARRIER, R.BINARY_OP, R.VREDUCEV2_BINARY]  # fmt: skip
OTHERS = [R.MSTX_STUB, R.TERNARY_OP, R.UNARY_OP]

GROUPED = "grouped"  # the compiled loops without direct: the grouped path


@pytest.fixture(autouse=True)
def _compiled_side(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(rb, "compiled", COMPILED)
    monkeypatch.setattr(base, "compiled", COMPILED)


def record_bytes(table: RecordTable, rng: np.random.Generator, record_type: int, usual: float) -> bytes:
    """One record of ``record_type`` as the wire has it: its type word, then its payload (fields at their extremes
    or, with probability ``usual``, made what the usual cases take), padded to its step."""
    wire_type = table.wire(record_type)
    assert wire_type is not None
    size = (int(table.step_words[wire_type]) - 1) * 4
    dtype = table.dtypes.get(record_type)
    if dtype is None:
        payload = rng.integers(0, 14, size // 4).astype("<u4").tobytes()
    else:
        payload = hostile_records(rng, dtype, 1, usual).tobytes()
        if "src1_block_num" in (dtype.names or ()) and rng.random() < usual:  # usual operands: masks kept as they are
            payload = _usual_binary(rng, dtype, payload)
    return struct.pack("<I", wire_type) + payload[:size].ljust(size, b"\0")


def _usual_binary(rng: np.random.Generator, dtype: np.dtype, payload: bytes) -> bytes:
    record = np.frombuffer(payload, dtype=dtype).copy()
    record["mask0"], record["mask1"], record["mask_mode"] = 2**64 - 1, 2**64 - 1, 0
    record["repeat"] = max(int(record["repeat"][0]), 1)
    for op in ("src0", "src1", "dst"):
        record[f"{op}_block_num"] = max(int(record[f"{op}_block_num"][0]), 1)
        record[f"{op}_block_size"] = max(int(record[f"{op}_block_size"][0]), 1)
    return record.tobytes()


def slot(layout: wire.WireLayout, region: bytes, records: int, write_offset: int | None = None) -> bytes:
    head = bytearray(layout.heads_size)
    struct.pack_into("<Q", head, 0, rb.SECURITY_VALUE)
    write = len(region) if write_offset is None else write_offset
    struct.pack_into("<QQQQ", head, layout.global_head.size, records + 3, records, len(region), write)
    struct.pack_into("<I", head, 24, 1)
    return bytes(head) + region


def decoded(
    layout: wire.WireLayout, table: RecordTable, data: bytes, piece: int | None, chosen: object,
    context: BlockContext, monkeypatch: pytest.MonkeyPatch, places: RecordPlaces | None = None,
) -> tuple[bytes, list[str], int, dict]:  # fmt: skip
    """The slot's events, problems, records and the budget's refusals, decoded ``chosen``'s way (where
    ``context`` has places, into ``places`` or new ones with a resolve)."""
    with monkeypatch.context() as patch:
        patch.setattr(rb, "compiled", None if chosen is None else COMPILED)
        patch.setattr(base, "compiled", None if chosen is None else COMPILED)
        if chosen == GROUPED:
            patch.setattr(rb, "direct_plans", lambda table, context: None)
        context = dataclasses.replace(context, budget=ExpansionBudget())
        if context.places is not None:
            places = places if places is not None else RecordPlaces(resolve=lambda key: 1000 + key)
            context = dataclasses.replace(context, places=places)
        decoder = rb.SlotDecoder(rb.read_heads(data, layout), context, 5, table)
        events = fed_in_pieces(decoder, memoryview(data)[layout.heads_size :], piece)
    return events.tobytes(), decoder.problems(), decoder.records, dict(context.budget.refused)


@pytest.fixture
def direct_windows(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    return _count_direct(monkeypatch)


def _count_direct(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Counts the windows ``direct_compiled`` converted (1) and gave back (0)."""
    seen: list[int] = []
    real: Callable = rb.direct_compiled

    def counted(*args: object) -> object:
        got = real(*args)
        seen.append(int(got is not None))
        return got

    monkeypatch.setattr(rb, "direct_compiled", counted)
    return seen


@settings(max_examples=150, deadline=None)
@given(
    seed=st.integers(0, 2**32 - 1),
    table_name=st.sampled_from(sorted(TABLES)),
    records=st.sampled_from([0, 1, 2, 11, 200, 1500]),
    usual=st.sampled_from([1.0, 1.0, 1.0, 0.995, 0.5, 0.0]),
    others=st.sampled_from([0.0, 0.0, 0.002, 0.05]),
    piece=st.sampled_from([None, 4, 68, 1000, 4096]),
    count_delta=st.integers(-3, 3),
    cut=st.integers(0, 9),
    block_type=st.sampled_from([0, 1, 2, 255]),
    chip=st.sampled_from(["910B1", "910B1", "310P"]),
    places=st.booleans(),
)
def test_a_slot_decodes_alike_all_three_ways(
    seed: int, table_name: str, records: int, usual: float, others: float, piece: int | None, count_delta: int,
    cut: int, block_type: int, chip: str, places: bool,
) -> None:  # fmt: skip
    """Records of the planned types (every field at its extremes, or usual), with records of other types between
    them now and then (an MSTX_STUB joins the next DMA_MOV or BINARY_OP to its serial), recordWriteCount short or
    long, the region cut short of writeOffset, fed whole or in pieces (a piece can end just after an MSTX_STUB),
    in every block type (the cube's binary ops are not planned), on 310P (whose vector ops align by element), with
    places marked or not: events, problems, records and refusals identical straight, grouped and on numpy's path."""
    layout, table = TABLES[table_name]
    rng = np.random.default_rng(seed)
    kinds = [t for t in PLANNED if table.wire(t) is not None]
    other = [t for t in OTHERS if table.wire(t) is not None]
    parts = []
    for _ in range(records):
        if other and rng.random() < others:
            parts.append(record_bytes(table, rng, int(rng.choice(other)), usual))
        parts.append(record_bytes(table, rng, int(rng.choice(kinds)), usual))
    region = b"".join(parts)
    write_offset = len(region)
    region = region[: max(len(region) - 4 * cut, 0)]
    data = slot(layout, region, max(len(parts) + count_delta, 0), write_offset)
    context = BlockContext(block_type, CHIPS[chip], places=RecordPlaces() if places else None)
    with pytest.MonkeyPatch.context() as monkeypatch:
        seen = _count_direct(monkeypatch)
        straight = decoded(layout, table, data, piece, COMPILED, context, monkeypatch)
        assert straight == decoded(layout, table, data, piece, GROUPED, context, monkeypatch)
        assert straight == decoded(layout, table, data, piece, None, context, monkeypatch)
    if table_name == "april" and usual == 1.0 and not others and records >= 11 and block_type != 1 and chip != "310P":
        assert any(seen) or places  # the straight path was compared, not only its giving back


def test_the_tile_loop_converts_straight(direct_windows: list[int], monkeypatch: pytest.MonkeyPatch) -> None:
    """benchmarks/compat.py's tile loop (April's wire, an AIV block) takes the straight path in every window, and
    gives what the grouped path and numpy's give."""
    from tests.test_native_records import tile_slot

    data = tile_slot(300)
    table = record_table(APRIL)
    context = BlockContext(0, CHIPS["910B1"])
    straight = decoded(APRIL, table, data, 1000, COMPILED, context, monkeypatch)
    assert direct_windows and all(direct_windows)
    assert straight == decoded(APRIL, table, data, 1000, GROUPED, context, monkeypatch)
    assert straight == decoded(APRIL, table, data, 1000, None, context, monkeypatch)


def test_an_exhausted_budget_or_marked_places_take_the_grouped_path(
    direct_windows: list[int], monkeypatch: pytest.MonkeyPatch
) -> None:
    from tests.test_native_records import tile_slot

    data = tile_slot(30)
    table = record_table(APRIL)
    layout = APRIL
    budget = ExpansionBudget()
    budget.exhausted = True
    context = dataclasses.replace(BlockContext(0, CHIPS["910B1"]), budget=budget)
    decoder = rb.SlotDecoder(rb.read_heads(data, layout), context, 5, table)
    events, _ = decoder.feed(memoryview(data)[layout.heads_size :], True)
    assert events.size == 1 and not direct_windows  # the block's end: every record refused, as convert_bounded does
    places = dataclasses.replace(BlockContext(0, CHIPS["910B1"]), places=RecordPlaces(resolve=lambda key: key))
    rb.SlotDecoder(rb.read_heads(data, layout), places, 5, table).feed(memoryview(data)[layout.heads_size :], True)
    assert not direct_windows


def test_a_converter_replaced_after_the_plans_were_made_is_called(
    direct_windows: list[int], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The plans are made once per table, block type and chip; a converter registered after them (a test's) is
    what converts its records, not the plan of the one before."""
    from tests.test_native_records import tile_slot

    data = tile_slot(30)
    table = record_table(APRIL)
    context = BlockContext(0, CHIPS["910B1"])
    decoded(APRIL, table, data, None, COMPILED, context, monkeypatch)
    assert direct_windows == [1]

    def failing(*args: object) -> np.ndarray:
        raise ValueError("planted")

    monkeypatch.setitem(CONVERTERS, R.DMA_MOV, dataclasses.replace(CONVERTERS[R.DMA_MOV], convert=failing))
    got = decoded(APRIL, table, data, None, COMPILED, context, monkeypatch)
    assert direct_windows == [1, 0]  # DMA_MOV has no plan now: the window is given back
    assert any("DMA_MOV records dropped: converter failed (planted)" in line for line in got[1])
    assert got == decoded(APRIL, table, data, None, None, context, monkeypatch)


# --- the C function itself: every buffer, plan and start checked ---------------------------------------------


def _plans() -> tuple[rb.DirectPlans, RecordTable, np.ndarray, np.ndarray]:
    table = record_table(APRIL)
    plans = rb.direct_plans(table, BlockContext(0, CHIPS["910B1"]))
    assert plans is not None
    shape = rb._compiled_table(table)
    assert shape is not None
    return plans, table, shape.rule_records, shape.rule_after


def _direct(words: np.ndarray, starts: np.ndarray, **changed: object) -> object:
    plans, _, rule_records, rule_after = _plans()
    args = dict(
        words=words, starts=starts, plan_of=plans.plan_of, plans=plans.plans, pairs=PIPE_OF_PAIR,
        spaces=MEMTYPE_TO_SPACE, rule_records=rule_records, rule_after=rule_after, last_type=-1, next_serial=0,
        serials=np.empty(starts.size, dtype=np.uint64), sites=np.zeros((0, 4), dtype=np.uint64), location=None,
    )  # fmt: skip
    args.update(changed)
    return COMPILED.direct(*args.values())


def _tile_words(tiles: int) -> tuple[np.ndarray, np.ndarray]:
    from tests.test_native_records import tile_slot

    data = tile_slot(tiles)
    words = np.frombuffer(data, dtype="<u4", offset=APRIL.heads_size).copy()
    starts, _ = rb.walk_compiled(record_table(APRIL), words, words.size)
    return words, starts


def test_direct_gives_back_starts_types_and_payloads_outside_what_they_index() -> None:
    words, starts = _tile_words(3)
    assert _direct(words, starts) is not None
    for bad in (-1, words.size, words.size + 10**9, -(2**62)):
        assert _direct(words, np.array([*starts[:3], bad], dtype=np.int64)) is None
    assert _direct(words, np.array([starts[-1] + 1], dtype=np.int64)) is None  # a payload word read as a type
    assert _direct(words[:-1], starts) is None  # the last record's payload past the words
    plans, *_ = _plans()
    short = plans.plan_of[: int(words[starts].min())]  # a type past the plan table
    assert _direct(words, starts, plan_of=short) is None
    for index in (plans.plans.shape[0], 2**40, -2):  # a plan index past the plans
        broken = plans.plan_of.copy()
        broken[int(words[starts[0]])] = index
        assert _direct(words, starts, plan_of=broken) is None
    empty = np.empty(0, dtype=np.int64)
    assert bytes(_direct(words, empty, serials=np.empty(0, dtype=np.uint64))) == b""


def test_direct_refuses_buffers_and_plans_that_do_not_fit() -> None:
    words, starts = _tile_words(2)
    plans, *_ = _plans()
    n = starts.size
    with pytest.raises(ValueError):  # not whole words
        _direct(words.view(np.uint8)[:-1], starts)
    with pytest.raises(ValueError):  # starts not whole i64
        _direct(words, starts.astype(np.int32)[:-1] if n % 2 == 0 else starts.astype(np.int32))
    for changed in (
        {"serials": np.empty(n - 1, dtype=np.uint64)},
        {"pairs": PIPE_OF_PAIR.reshape(-1)[:-1]},
        {"spaces": MEMTYPE_TO_SPACE[:-1]},
        {"plans": plans.plans.reshape(-1)[:-1]},
        {"plans": np.zeros((65, base.PLAN_WORDS), dtype=np.uint64)},  # more than MAX_PLANS
        {"rule_after": np.zeros(3, dtype=np.uint8)},
    ):
        with pytest.raises(ValueError):
            _direct(words, starts, **changed)
    for word, value in (
        (0, 0),  # no kind
        (0, 4),
        (0, 2**63),
        (1, 0),  # no payload
        (1, 2**40),
        (2, base.PLAN_MAX_FIELDS + 1),  # a fields plan of too many fields
    ):
        for k in range(plans.plans.shape[0]):
            broken = plans.plans.copy()
            broken[k, word] = value
            if word == 2 and broken[k, 0] != base.DIRECT_FIELDS:
                continue
            with pytest.raises(ValueError):
                _direct(words, starts, plans=broken)
    for k in range(plans.plans.shape[0]):
        kind, itemsize = int(plans.plans[k, 0]), int(plans.plans[k, 1])
        broken = plans.plans.copy()
        if kind == base.DIRECT_FIELDS:
            for at, value in ((0, itemsize), (0, 2**63), (1, 0), (1, 9), (3, 7), (4, 64)):
                field = broken.copy()
                field[k, base._PLAN_FIELDS + at] = value
                with pytest.raises(ValueError):
                    _direct(words, starts, plans=field)
        else:
            for value in (itemsize, itemsize - 1, 2**63, 2**64 - 1):
                member = broken.copy()
                member[k, base._PLAN_OFFSETS] = value  # an address member (8 bytes) past the record
                with pytest.raises(ValueError):
                    _direct(words, starts, plans=member)


def test_direct_numbers_as_group_does_and_gives_back_merged_records() -> None:
    """Serials from next_serial on, mod 2**64; a first record that joins the record before (after an
    MSTX_STUB) sends the window back."""
    words, starts = _tile_words(2)
    _, table, *_ = _plans()
    serials = np.empty(starts.size, dtype=np.uint64)
    assert _direct(words, starts, next_serial=2**64 - 3, serials=serials) is not None
    assert serials.tolist() == [(2**64 - 3 + i) % 2**64 for i in range(starts.size)]
    mstx = table.wire(R.MSTX_STUB)
    assert int(words[starts[0]]) == table.wire(R.DMA_MOV)
    assert _direct(words, starts, last_type=mstx) is None
    assert _direct(words, starts, last_type=2**40) is not None  # a type past the rules joins nothing


ODD = ["stride 0x10000", "dst stride 0x10000", "pad mode", "byte mode", "no pipe", "no space", "converted",
       "no repeat", "no blocks", "count mode"]  # fmt: skip


@pytest.mark.parametrize("odd", ODD)
@pytest.mark.parametrize("seed", range(6))
def test_one_odd_record_sends_the_window_back(
    odd: str, seed: int, direct_windows: list[int], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The tile loop with one record its plan must not take (a DMA stride one past 16 bits, a pad or byte mode, a
    pair of memory kinds with no pipe or a kind with no space; a vector operand msSanitizer cuts or skips): the
    window is given back, and decodes as the grouped path and numpy's decode it."""
    from tests.test_native_records import make_odd, tile_slot

    rng = np.random.default_rng(seed)
    table = record_table(APRIL)
    data = bytearray(tile_slot(40))
    words = np.frombuffer(data, dtype="<u4", offset=APRIL.heads_size)
    starts, _ = rb.walk_compiled(table, words, words.size)
    record_type = R.DMA_MOV if odd in ODD[:6] else R.BINARY_OP
    ours = starts[words[starts] == table.wire(record_type)]
    at = int(ours[int(rng.integers(0, ours.size))])
    dtype = table.dtypes[record_type]
    start = APRIL.heads_size + 4 * (at + 1)
    record = np.frombuffer(data, dtype=dtype, count=1, offset=start).copy()
    if record_type == R.BINARY_OP:
        make_odd(rng, record, odd)
    elif odd.endswith("0x10000"):
        record["len_burst"], record["dst_stride" if odd.startswith("dst") else "src_stride"] = 1, 0xFFFF
    elif odd in ("pad mode", "byte mode"):
        record["pad_mode" if odd == "pad mode" else "byte_mode"] = 1
    elif odd == "no pipe":
        pairs = np.argwhere(PIPE_OF_PAIR == 0xFF)
        record["src_mem"], record["dst_mem"] = pairs[int(rng.integers(0, len(pairs)))]
    else:
        record["src_mem"] = int(rng.choice(np.flatnonzero(MEMTYPE_TO_SPACE == 0xFF)))
    data[start : start + dtype.itemsize] = record.tobytes()
    data = bytes(data)
    context = BlockContext(0, CHIPS["910B1"])
    straight = decoded(APRIL, table, data, None, COMPILED, context, monkeypatch)
    assert straight == decoded(APRIL, table, data, None, GROUPED, context, monkeypatch)
    assert straight == decoded(APRIL, table, data, None, None, context, monkeypatch)
    assert direct_windows == [0]


# --- places marked straight: only where every record's place is resolved already ----------------------------------


def _relocated(data: bytes, table: RecordTable, rng: np.random.Generator, how: str) -> bytes:
    """The tile loop with some records' places changed: a new place (a pc not seen before) late in the slot, or a
    second place at a pc the loop already uses (another line), or a pc that is not a function of anything."""
    out = bytearray(data)
    words = np.frombuffer(data, dtype="<u4", offset=APRIL.heads_size)
    starts, _ = rb.walk_compiled(table, words, words.size)
    for at in starts[rng.integers(starts.size // 2, starts.size, 3)].tolist():
        record_type = int(table.canonical[int(words[at])])
        dtype = table.dtypes[record_type]
        start = APRIL.heads_size + 4 * (at + 1)
        record = np.frombuffer(out, dtype=dtype, count=1, offset=start).copy()
        if how == "new place":
            record["pc"] = 0x9000 + int(rng.integers(0, 1 << 20))
        elif how == "shared pc":
            record["line_no"] = int(record["line_no"][0]) + 1000
        else:
            record["pc"], record["file_no"], record["line_no"] = (int(v) for v in rng.integers(0, 2**63, 3))
        out[start : start + dtype.itemsize] = record.tobytes()
    return bytes(out)


@pytest.mark.parametrize("how", [None, "new place", "shared pc", "random"])
@pytest.mark.parametrize("piece", [700, 4096])
@pytest.mark.parametrize("seed", range(3))
def test_places_are_marked_straight_as_the_grouped_path_marks_them(
    how: str | None, piece: int, seed: int, direct_windows: list[int], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Through a connection's places (a resolve): the first window keys and resolves the loop's places on the
    grouped path, later windows are marked straight; one with a place not resolved yet, or with a pc that two
    places share, is given back. Events (with their location ids), problems and the places made identical."""
    from tests.test_native_records import tile_slot

    table = record_table(APRIL)
    data = tile_slot(120)
    if how is not None:
        data = _relocated(data, table, np.random.default_rng(seed), how)
    context = BlockContext(0, CHIPS["910B1"], places=RecordPlaces())
    made = []
    for chosen in (COMPILED, GROUPED, None):
        resolved: list[int] = []

        def resolve(key: int, resolved: list[int] = resolved) -> int:
            resolved.append(key)
            return 7000 + 3 * key

        places = RecordPlaces(resolve=resolve)
        got = decoded(APRIL, table, data, piece, chosen, context, monkeypatch, places)
        made.append((got, resolved, places.sites, places.over))
    assert made[0] == made[1] == made[2]
    assert any(direct_windows)  # marked straight where it could be
    if how is not None:
        assert not all(direct_windows[1:])  # and given back where a place was new or shared


def test_resolved_sites_are_the_resolved_places_of_pcs_with_one_place() -> None:
    rng = np.random.default_rng(5)
    places = RecordPlaces(resolve=lambda key: 100 + key)
    pc = rng.integers(0, 40, 500).astype(np.uint64)
    line = (pc % 5).astype(np.uint64)
    line[:3] += np.uint64(1)  # three records give their pc a second place
    places.locations(pc, np.ones(500, np.uint64), line)
    rows = places.resolved_sites()
    want = {}
    for (p, f, line_no), key in places._keys.items():
        want.setdefault(p, []).append((p, f, line_no, 100 + key))
    assert rows.tolist() == sorted(list(v[0]) for v in want.values() if len(v) == 1)
    assert places.resolved_sites() is rows  # kept while nothing changes
    places.bind("another binary")  # every id unresolved again
    assert places.resolved_sites().shape == (0, 4)
    places.locations(pc[:10], np.ones(10, np.uint64), line[:10])
    assert 0 < places.resolved_sites().shape[0] <= 10


def test_places_of_pcs_past_2_63_are_keyed_as_the_sort_keys_them() -> None:
    """``RecordPlaces.keys``' scatter over the span of the pcs added the lowest pc to intp offsets: a group whose
    pcs were all at or past 2**63 raised (its records were dropped), one that crossed it wrapped a pc negative
    (keyed apart from the same place met through the sort). Now each record gets its own place's key either way,
    as the straight path, which looks places up, needs."""
    top = 2**64 - 1
    places = RecordPlaces()
    wide = np.array([0, top, 2**63 - 1, 2**63, top - 5], dtype=np.uint64)  # too wide a span: the sort
    keys, _ = places.keys(wide, np.ones(5, np.uint64), np.full(5, 2, np.uint64))
    for group in ([top], [top, top - 5], [2**63 - 1, 2**63]):  # the scatter
        pcs = np.array(group, dtype=np.uint64)
        got, _ = places.keys(pcs, np.ones(pcs.size, np.uint64), np.full(pcs.size, 2, np.uint64))
        assert got.tolist() == [int(keys[wide.tolist().index(pc)]) for pc in group]
    assert len(places.sites) == 6
