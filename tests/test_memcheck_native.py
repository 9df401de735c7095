"""memcheck's compiled loops (sanitizerd/native/_memcheck.c) against numpy's reference path, side by side: each loop on
random and hostile inputs (sizes at their bounds, addresses near 2**64 and 2**49, repeats and strides at 65 535, empty
and one-record batches), and the whole detector fed the same streams both ways. Both paths are chosen here, not by
the process's SANITIZERD_NATIVE: ``_intervals.native`` is the one handle every caller reads."""

from __future__ import annotations

import itertools
from unittest.mock import patch

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from client_shim.events import EventKind, Space
from sanitizerd import native as native_switch
from sanitizerd.detectors import _intervals, _page_owners, _runs, _stomping
from sanitizerd.detectors._batches import BatchFields, walked_pieces
from sanitizerd.detectors._intervals import IntervalSet
from sanitizerd.detectors.base import GM_WRITES, WIDE_ACCESS_PIECES, KernelLaunch
from sanitizerd.detectors.memcheck import Memcheck
from sanitizerd_protocol.messages import HostOp
from sanitizerd_protocol.model import Finding
from sanitizerd_protocol.patterns import extents
from sanitizerd_protocol.records import EVENT_DTYPE, FLAG_ATOMIC, FLAG_CLAIM, FLAG_SIMT_ENTRY
from tests.detector_helpers import make_detector, run_kernel

if native_switch.mode() == "required":
    from sanitizerd.native import _memcheck as compiled
else:
    compiled = pytest.importorskip("sanitizerd.native._memcheck")

U64 = np.uint64
TOP = 2**64 - 1
SETTINGS = settings(max_examples=150, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])
GM = 0x12C0_C000_0000


def u64(values: list[int]) -> np.ndarray:
    return np.array(values, dtype=U64)


# --- streams ---------------------------------------------------------------------------------------------------------

addresses = st.one_of(
    st.integers(GM, GM + 4096),  # inside the test allocations, mostly
    st.integers(0, 2**64 - 1),
    st.integers(2**64 - 4096, 2**64 - 1),  # near the top: ends saturate
    st.integers(2**48 - 4096, 2**49 + 4096),  # around ADDRESS_LIMIT and the owner keys' 49 bits
    st.sampled_from([0, 1, 31, 32, GM, GM + 1, 2**63]),
)
small = st.one_of(st.integers(0, 4), st.sampled_from([0, 1, 2, 3, 8, 16, 255, 65535]))


@st.composite
def records(draw: st.DrawFn, max_size: int = 24) -> np.ndarray:
    n = draw(st.integers(1, max_size))
    events = np.zeros(n, dtype=EVENT_DTYPE)
    for i in range(n):
        e = events[i : i + 1]
        e["address"] = draw(addresses)
        e["block_size"] = draw(st.one_of(st.sampled_from([0, 1, 2, 32, 512, 2**32 - 1]), st.integers(0, 64)))
        e["block_num"] = draw(small)
        e["block_stride"] = draw(small)
        e["repeat"] = draw(small)
        e["repeat_stride"] = draw(small)
        e["block_id"] = draw(st.integers(0, 3))
        e["block_type"] = draw(st.sampled_from([1, 2]))
        e["kind"] = draw(st.sampled_from([EventKind.READ, EventKind.WRITE, EventKind.WRITE, EventKind.SET_FLAG]))
        e["space"] = draw(st.sampled_from([Space.GM, Space.GM, Space.GM, Space.UB, Space.L1, Space.L0A]))
        e["flags"] = draw(st.sampled_from([0, 0, 0, FLAG_ATOMIC]))
        e["align"] = draw(st.sampled_from([0, 0, 0, 1, 3, 32, 100, 65535]))
        e["serial"] = i + 1
        e["pc"] = draw(st.integers(0, 3))
    # keep pieces listable: the numpy path lists every block of a scattered access too
    pieces = events["repeat"].astype(np.int64) * np.maximum(events["block_num"], 1)
    events["repeat"][pieces > 4096] = 2
    return events


@st.composite
def range_sets(draw: st.DrawFn) -> tuple[np.ndarray, np.ndarray]:
    bounds = sorted(set(draw(st.lists(addresses, max_size=8))))
    if len(bounds) % 2:
        bounds = bounds[:-1]
    starts, ends = bounds[0::2], bounds[1::2]
    while sum(e - s for s, e in zip(starts, ends, strict=True)) >= 2**63:  # IntervalSet counts bytes in 64 bits
        starts, ends = starts[1:], ends[1:]
    return u64(starts), u64(ends)


# --- each loop ------------------------------------------------------------------------------------------------------


@SETTINGS
@given(events=records())
def test_extents(events: np.ndarray) -> None:
    assert np.array_equal(np.frombuffer(compiled.extents(events), U64), extents(events))


def test_extents_saturate_as_numpy_does() -> None:
    """One hostile record makes numpy's whole batch take its float path: the compiled loop follows it bit for bit."""
    events = np.zeros(3, dtype=EVENT_DTYPE)
    events["block_size"] = [2**32 - 1, 2**31 + 1, 3]
    events["block_num"] = [65535, 65535, 7]
    events["block_stride"] = [65535, 3, 1]
    events["repeat"] = [65535, 65535, 0]
    events["repeat_stride"] = [65535, 65535, 5]
    assert np.array_equal(np.frombuffer(compiled.extents(events), U64), extents(events))
    assert np.array_equal(np.frombuffer(compiled.extents(events[:0]), U64), extents(events[:0]))


@pytest.mark.parametrize("other_size", [2**29, 2**30, 2**30 + 2**25, 2**31])
def test_batch_takes_numpys_float_extents_exactly_where_numpy_does(other_size: int) -> None:
    """Around numpy's line (the batch's largest units times its largest block_size reaching 2**62), where the
    bit lengths alone cannot tell: batch's extents are numpy's, float-rounded ones included."""
    events = np.zeros(2, dtype=EVENT_DTYPE)
    events["kind"], events["space"] = EventKind.WRITE, Space.GM
    events["block_size"] = [2**28 - 1, other_size]  # units 65534 * 65535 + 1 (32 bits), and 1
    events["block_num"], events["block_stride"] = 1, 1
    events["repeat"], events["repeat_stride"] = [65535, 1], [65535, 1]
    units = 65534 * 65535 + 1
    floats = units * other_size >= 2**62
    exact = units * (2**28 - 1)
    assert (int(extents(events)[0]) != exact) == floats, "record 0's extent shows which path numpy took"
    limits, align = np.full(256, TOP, dtype=U64), np.ones(256, dtype=U64)
    parts = compiled.batch(events, limits, align, u64([0]), u64([TOP]), WIDE_ACCESS_PIECES)
    assert np.array_equal(np.frombuffer(parts[0], U64), extents(events))


@SETTINGS
@given(events=records(), legal=range_sets(), threads=st.booleans(), switch=st.booleans())
def test_batch_first_look(
    events: np.ndarray, legal: tuple[np.ndarray, np.ndarray], threads: bool, switch: bool
) -> None:
    """memcheck's first look: the extents, the live records and claims, the kinds copied out, as numpy has them;
    bounds and alignment as the scan that the detector tests compare with numpy's whole path; the live GM writes
    and their summary as stomping's BatchWrites.of finds them."""
    events["flags"][::3] |= FLAG_CLAIM
    events["flags"][1::4] |= FLAG_SIMT_ENTRY
    if threads:
        events["thread"][-1] = 65535
    if switch:
        events["kind"][0] = EventKind.SET_ATOMIC
    within = IntervalSet(*legal)
    limits = np.full(256, TOP, dtype=U64)
    limits[Space.UB] = 192 << 10
    limits[Space.GM] = GM + 2048  # a limit for GM too: it counts only in a batch not all GM (numpy's rule)
    align = np.ones(256, dtype=U64)
    align[Space.UB] = 32
    parts = compiled.batch(events, limits, align, within.starts, within.ends, WIDE_ACCESS_PIECES)
    ext = extents(events)
    assert np.array_equal(np.frombuffer(parts[0], U64), ext)
    access = (ext > 0) & (events["kind"] <= EventKind.WRITE) & ((events["flags"] & FLAG_SIMT_ENTRY) == 0)
    claims = access & ((events["flags"] & FLAG_CLAIM) != 0)
    live = access & ~claims
    assert np.array_equal(np.frombuffer(parts[1], bool), live)
    assert np.array_equal(np.frombuffer(parts[2], np.uint8), events["kind"])
    assert np.array_equal(np.frombuffer(parts[3], np.int64), np.flatnonzero(claims))
    bad, misaligned, first = (np.frombuffer(part, dtype) for part, dtype in
                              zip(compiled.scan(events, ext, live, limits, align, within.starts, within.ends),
                                  (bool, bool, U64), strict=True))  # fmt: skip
    assert np.array_equal(np.frombuffer(parts[4], np.int64), np.flatnonzero(bad))
    assert np.array_equal(np.frombuffer(parts[5], np.int64), np.flatnonzero(misaligned))
    assert np.array_equal(np.frombuffer(parts[6], U64), first[misaligned])
    writes = _stomping.BatchWrites.of(events, live)
    assert np.array_equal(np.frombuffer(parts[7], np.int64), writes.index)
    walked = int(walked_pieces(events, GM_WRITES).sum())
    assert parts[8] == (
        writes.pieces_bound, bool((events["thread"] != 0).any()), writes.any_atomic, int(events["kind"].max()), walked
    )  # fmt: skip
    if parts[9] is not None:  # the writes merged in the same pass: list_merged's ranges, as numpy merges them
        expected = merged_reference(events, writes.index, within)[:3]
        for want, got in zip(expected, parts[9], strict=True):
            assert np.array_equal(want, np.frombuffer(got, U64)), (want, got)


def merged_reference(
    events: np.ndarray, index: np.ndarray, within: IntervalSet, atomic: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray, np.ndarray, bool]:
    """list_merged's answer by numpy: the pieces touching ``within``, keyed by block (tagged with the atomic mode
    where any piece's record is atomic) and merged per key."""
    event, start, stop = _runs.listed_touching_numpy(within, events, extents(events), index)
    keys = _stomping._piece_block_keys(events, event)
    tagged = atomic is not None and bool(atomic[event].any())
    if tagged:
        keys = (keys << U64(1)) | atomic[event].astype(U64)  # type: ignore[index]
    if not event.size:
        return np.empty(0, U64), np.empty(0, U64), np.empty(0, U64), tagged
    keys, lo, hi = (a.astype(U64) for a in _stomping._merge_by_block_numpy(keys, start, stop))
    return keys, lo, hi, tagged


HEAP = (GM, GM + (1 << 20), GM + (3 << 20), GM + (4 << 20))  # two heap ranges, apart


@st.composite
def writes_in_order(draw: st.DrawFn) -> tuple[np.ndarray, str]:
    """A kernel's GM writes as its blocks stream through their own slices, front to back (dense tiles and rows,
    touching, overlapping or apart, interleaved among blocks and mixed with reads and UB writes): the usual case
    list_merged and batch merge as the pieces come. ``upset``: one change that leaves it (or, for "none", not)."""
    blocks = draw(st.integers(1, 12))
    types = draw(st.lists(st.sampled_from([0, 1, 2]), min_size=blocks, max_size=blocks))
    threads = draw(st.booleans())
    n = draw(st.integers(1, 48))
    events = np.zeros(n, dtype=EVENT_DTYPE)
    slice_bytes = ((HEAP[1] - HEAP[0]) // blocks) & ~31
    cursor = [HEAP[0] + b * slice_bytes for b in range(blocks)]
    for i in range(n):
        b = draw(st.integers(0, blocks - 1))
        e = events[i : i + 1]
        e["block_id"], e["block_type"] = b, types[b]
        e["thread"] = b % 3 if threads else 0
        e["kind"] = draw(st.sampled_from([EventKind.WRITE, EventKind.WRITE, EventKind.WRITE, EventKind.READ]))
        e["space"] = draw(st.sampled_from([Space.GM, Space.GM, Space.GM, Space.UB]))
        e["serial"] = i + 1
        if e["space"][0] == Space.UB:
            e["address"], e["block_size"], e["block_num"], e["repeat"] = 0, 32, 1, 1
            continue
        shape = draw(st.sampled_from(["tile", "tile", "rows", "block"]))
        e["block_size"] = 32
        if shape == "tile":
            e["block_num"], e["block_stride"], e["repeat"] = draw(st.integers(1, 16)), 1, 1
        elif shape == "rows":
            e["block_num"], e["block_stride"], e["repeat"] = 2, 1, draw(st.integers(2, 4))  # the merger's room
            e["repeat_stride"] = draw(st.integers(3, 6))  # rows of 64 B every 96-192 B: apart
        else:
            e["block_num"], e["repeat"] = 1, 1
        step = draw(st.sampled_from([-32, 0, 0, 32, 64, 4096]))  # overlap, touch, leave a gap
        start = max(cursor[b] + step, HEAP[0] + b * slice_bytes)
        e["address"] = start
        end = start + int(extents(e)[0])
        assert end <= HEAP[0] + (b + 1) * slice_bytes, "the slices hold the stream"
        if e["kind"][0] == EventKind.WRITE:
            cursor[b] = max(cursor[b], end)
    upset = draw(
        st.sampled_from(["none", "none", "backwards", "outside", "straddles", "scattered", "many_blocks", "high"])
    )
    written = np.flatnonzero((events["kind"] == EventKind.WRITE) & (events["space"] == Space.GM))
    if upset != "none" and written.size:
        w = written[draw(st.integers(0, written.size - 1))]
        e = events[w : w + 1]
        if upset == "backwards":  # before the block's earlier pieces: list_merged must sort
            e["address"] = HEAP[0] + int(e["block_id"][0]) * slice_bytes
            e["block_size"], e["block_num"], e["repeat"] = 32, 1, 1
            if w == written[0]:
                upset = "none"
        elif upset == "outside":  # between the heap's ranges: an illegal write, which touches nothing
            e["address"] = HEAP[1] + 64
        elif upset == "straddles":  # from the first range's end into the gap: only its part inside counts
            e["address"], e["block_size"], e["block_num"], e["repeat"] = HEAP[1] - 32, 32, 2, 1
        elif upset == "scattered":  # blocks apart within a row
            e["block_num"], e["block_stride"], e["repeat"] = 4, 2, 1
        elif upset == "many_blocks":  # more block keys than the usual case's table holds (64), each in order
            events = np.tile(events, -(-70 // written.size))
            written = np.flatnonzero((events["kind"] == EventKind.WRITE) & (events["space"] == Space.GM))
            events["block_id"][written] = np.arange(written.size) + 7
        else:  # high: ranges at the owner keys' 49 bits, whose ends are clipped
            events["address"][written] += U64(2**49 - HEAP[3])
    return events, upset


def test_the_usual_case_is_merged_in_one_pass_and_only_it() -> None:
    """Two blocks writing 128-byte tiles in address order, block 0's touching, block 1's apart: merged in batch's
    pass; the same with a tile before its block's open range is left to list_merged's general path."""
    events = np.zeros(6, dtype=EVENT_DTYPE)
    events["kind"], events["space"] = EventKind.WRITE, Space.GM
    events["block_size"], events["block_num"], events["block_stride"], events["repeat"] = 32, 4, 1, 1
    events["block_id"] = [0, 1, 0, 1, 0, 1]
    events["address"] = GM + u64([0, 4096, 128, 4096 + 256, 256, 4096 + 512])
    within = IntervalSet(u64([HEAP[0], HEAP[2]]), u64([HEAP[1], HEAP[3]]))
    limits, align = np.full(256, TOP, dtype=U64), np.ones(256, dtype=U64)
    merged = compiled.batch(events, limits, align, within.starts, within.ends, WIDE_ACCESS_PIECES)[9]
    assert [np.frombuffer(a, U64).tolist() for a in merged] == [
        [0, 1, 1, 1],
        [GM, GM + 4096, GM + 4096 + 256, GM + 4096 + 512],
        [GM + 384, GM + 4096 + 128, GM + 4096 + 384, GM + 4096 + 640],
    ]
    inside = events.copy()  # a tile inside block 0's open range, if before its last: the same union
    inside["address"][4] = GM + 64
    merged = compiled.batch(inside, limits, align, within.starts, within.ends, WIDE_ACCESS_PIECES)[9]
    assert np.frombuffer(merged[2], U64)[0] == GM + 256
    backwards = events.copy()  # block 1's last tile before its open range, in the gap after its first
    backwards["address"][5] = GM + 4096 + 128
    assert compiled.batch(backwards, limits, align, within.starts, within.ends, WIDE_ACCESS_PIECES)[9] is None


@SETTINGS
@given(drawn=writes_in_order(), atomic_at=st.lists(st.integers(0, 47), max_size=3))
def test_writes_merged_in_order(drawn: tuple[np.ndarray, str], atomic_at: list[int]) -> None:
    """batch's merged writes and list_merged (its usual case and, past it, the general path) against numpy's
    merge of the listed pieces, on streams in the usual case and one change away from it."""
    events, upset = drawn
    within = IntervalSet(u64([HEAP[0], HEAP[2]]), u64([HEAP[1], HEAP[3]]))
    limits, align = np.full(256, TOP, dtype=U64), np.ones(256, dtype=U64)
    parts = compiled.batch(events, limits, align, within.starts, within.ends, WIDE_ACCESS_PIECES)
    index = np.frombuffer(parts[7], np.int64)
    expected = merged_reference(events, index, within)[:3]
    if upset == "none":
        assert parts[9] is not None, "the usual case is merged in batch's pass"
    if parts[9] is not None:
        for want, got in zip(expected, parts[9], strict=True):
            assert np.array_equal(want, np.frombuffer(got, U64)), (upset, want, got)
    ext = np.frombuffer(parts[0], U64)
    atomic = np.zeros(events.size, dtype=np.uint8)
    *found, tagged = compiled.list_merged(events, index, ext, within.starts, within.ends, atomic)
    assert tagged is False
    for want, got in zip(expected, found, strict=True):
        assert np.array_equal(want, np.frombuffer(got, U64)), (upset, want, got)
    atomic[[a for a in atomic_at if a < events.size]] = 1  # atomic writes: tagged, the general path's
    *found, tagged = compiled.list_merged(events, index, ext, within.starts, within.ends, atomic)
    *expected, expected_tagged = merged_reference(events, index, within, atomic.astype(bool))
    assert tagged == expected_tagged
    for want, got in zip(expected, found, strict=True):
        assert np.array_equal(want, np.frombuffer(got, U64)), (upset, want, got)


@SETTINGS
@given(events=records(), legal=range_sets(), data=st.data())
def test_list_touching(events: np.ndarray, legal: tuple[np.ndarray, np.ndarray], data: st.DataObject) -> None:
    ext = extents(events)
    index = np.array(data.draw(st.lists(st.integers(0, events.size - 1), max_size=events.size)), dtype=np.intp)
    within = IntervalSet(*legal)
    expected = _runs.listed_touching_numpy(within, events, ext, index)
    owner, start, stop = compiled.list_touching(events, index.astype(np.int64), ext, within.starts, within.ends)
    found = np.frombuffer(owner, np.int64), np.frombuffer(start, U64), np.frombuffer(stop, U64)
    for want, got in zip(expected, found, strict=True):
        assert np.array_equal(want, got), (want, got)


def test_list_touching_saturates_near_the_top() -> None:
    """Rows and blocks whose offsets pass 2**64 saturate (numpy's ``ends``), never wrap round to low addresses."""
    events = np.zeros(3, dtype=EVENT_DTYPE)
    events["address"] = [2**64 - 100, 2**64 - 4096, 2**64 - 64]
    events["block_size"] = [32, 512, 2**32 - 1]
    events["block_num"] = [1, 8, 3]
    events["block_stride"] = [1, 1, 65535]
    events["repeat"] = [65535, 4, 3]
    events["repeat_stride"] = [2, 65535, 65535]
    ext = extents(events)
    index = np.arange(3)
    for within in (IntervalSet(u64([0]), u64([2**63])), IntervalSet(u64([2**64 - 200]), u64([2**64 - 1]))):
        expected = _runs.listed_touching_numpy(within, events, ext, index)
        found = compiled.list_touching(events, index.astype(np.int64), ext, within.starts, within.ends)
        for want, got, dtype in zip(expected, found, (np.int64, U64, U64), strict=True):
            assert np.array_equal(want, np.frombuffer(got, dtype))


def test_list_touching_refuses_an_index_past_the_batch() -> None:
    events = np.zeros(2, dtype=EVENT_DTYPE)
    with pytest.raises(IndexError):
        compiled.list_touching(events, np.array([2], np.int64), extents(events), u64([0]), u64([1]))
    with pytest.raises(ValueError):
        compiled.list_touching(events, np.array([0], np.int64), extents(events)[:1], u64([0]), u64([1]))


ranges_drawn = st.lists(
    st.tuples(
        st.one_of(st.integers(0, 5), st.integers(0, 5), st.sampled_from([2**16 - 1, 2**16, 2**40])),  # far apart
        st.one_of(st.integers(0, 96).map(lambda a: a * 8), addresses),  # small ones touch and overlap often
        st.one_of(st.integers(0, 8).map(lambda n: n * 8), st.integers(0, 64), st.integers(0, 2**64 - 1)),
    ),
    max_size=40,
)


@SETTINGS
@given(drawn=ranges_drawn)
def test_merge_by_block(drawn: list[tuple[int, int, int]]) -> None:
    keys = u64([k for k, _, _ in drawn])
    lo = u64([a for _, a, _ in drawn])
    hi = u64([min(a + n, TOP) for _, a, n in drawn])
    if not drawn:  # numpy's needs one range at least (its callers never pass none)
        assert all(not np.frombuffer(a, U64).size for a in compiled.merge_by_block(keys, lo, hi))
        return
    expected = _stomping._merge_by_block_numpy(keys, lo, hi)
    found = [np.frombuffer(a, U64) for a in compiled.merge_by_block(keys, lo, hi)]
    for want, got in zip(expected, found, strict=True):
        assert np.array_equal(want.astype(U64), got), (want, got)


@SETTINGS
@given(drawn=ranges_drawn)
def test_merge_ranges(drawn: list[tuple[int, int, int]]) -> None:
    lo = u64([a for _, a, _ in drawn])
    hi = u64([min(a + n, TOP) if k else a - min(n, a) for k, a, n in drawn])  # some ends before their starts
    expected = _intervals.merge_ranges_numpy(lo, hi)
    found = [np.frombuffer(a, U64) for a in compiled.merge_ranges(lo, hi)]
    for want, got in zip(expected, found, strict=True):
        assert np.array_equal(want, got)


@pytest.mark.parametrize("seed", range(4))
def test_large_merges_with_keys_above_the_addresses(seed: int) -> None:
    """Tens of thousands of ranges keyed by owner above 49 address bits (stomping's log): the radix sort's split on
    its top digit, and the sorted run that merge_ranges keeps, against numpy's."""
    rng = np.random.default_rng(seed)
    n = 30_000
    owner = rng.integers(0, 48, n).astype(U64)
    lo = rng.integers(0, 1 << 28, n).astype(U64) * U64(32)
    hi = lo + rng.integers(1, 512, n).astype(U64)
    keyed_lo, keyed_hi = (owner << U64(49)) | lo, (owner << U64(49)) | hi
    merged = _intervals.merge_ranges_numpy(keyed_lo[: n // 2], keyed_hi[: n // 2])
    keyed_lo = np.concatenate((merged[0], keyed_lo[n // 2 :]))  # a sorted run first, as a merged log is
    keyed_hi = np.concatenate((merged[1], keyed_hi[n // 2 :]))
    for want, got in zip(_intervals.merge_ranges_numpy(keyed_lo, keyed_hi),
                         compiled.merge_ranges(keyed_lo, keyed_hi), strict=True):  # fmt: skip
        assert np.array_equal(want, np.frombuffer(got, U64))
    far = owner * U64(1 << 20)  # keys too far apart for the grouped path
    for keys in (owner, far):
        expected = _stomping._merge_by_block_numpy(keys, lo, hi)
        for want, got in zip(expected, compiled.merge_by_block(keys, lo, hi), strict=True):
            assert np.array_equal(want.astype(U64), np.frombuffer(got, U64))


@pytest.mark.parametrize("runs", [2, 3, 17, 64, 65, 300])
def test_merge_ranges_of_runs_in_order(runs: int) -> None:
    """A log of batches, each in order (keyed by owner, overlapping and touching one another): merged pairwise up to
    64 runs, sorted past that, both as numpy's; empty ranges inside the runs too."""
    rng = np.random.default_rng(runs)
    parts_lo, parts_hi = [], []
    for _ in range(runs):
        size = int(rng.integers(0, 200))
        owner = np.sort(rng.integers(0, 48, size)).astype(U64)
        lo = (owner << U64(49)) | (rng.integers(0, 1 << 12, size).astype(U64) * U64(32))
        lo = np.sort(lo)
        hi = lo + rng.choice([0, 1, 32, 64, 4096], size).astype(U64)
        parts_lo.append(lo)
        parts_hi.append(hi)
    lo, hi = np.concatenate(parts_lo), np.concatenate(parts_hi)
    for want, got in zip(_intervals.merge_ranges_numpy(lo, hi), compiled.merge_ranges(lo, hi), strict=True):
        assert np.array_equal(want, np.frombuffer(got, U64))


def test_merge_ranges_joins_touching_ranges() -> None:
    lo, hi = u64([8, 0, 16, 40, 2**64 - 2]), u64([16, 8, 24, 40, 2**64 - 1])
    found = [np.frombuffer(a, U64) for a in compiled.merge_ranges(lo, hi)]
    assert [a.tolist() for a in found] == [[0, 2**64 - 2], [24, 2**64 - 1]]
    assert [a.tolist() for a in _intervals.merge_ranges_numpy(lo, hi)] == [a.tolist() for a in found]


@SETTINGS
@given(held=ranges_drawn, drawn=ranges_drawn, ascending=st.booleans(), data=st.data())
def test_keyed_claims(
    held: list[tuple[int, int, int]], drawn: list[tuple[int, int, int]], ascending: bool, data: st.DataObject
) -> None:
    """The claims a merged log holds already, left out: against numpy's, for ranges in order (the gallop's walk) and
    not (it starts over), unchosen ones, empty ones, ones ending at 2**64 - 1, keys that pass 15 bits (the shift
    drops their top bits, as numpy's does) and an empty log."""
    held_lo, held_hi = _intervals.merge_ranges_numpy(u64([a for _, a, _ in held]),
                                                      u64([min(a + n, TOP) for _, a, n in held]))  # fmt: skip
    key = data.draw(st.sampled_from([0, 1, 47, 2**15 - 1, 2**15, 2**16 - 1]))
    inside = [(int(held_lo[i]) & (2**49 - 1), min(int(held_hi[i]), int(held_lo[i]) + n) & (2**49 - 1))
              for i, (_, _, n) in zip(range(held_lo.size), drawn, strict=False)]  # fmt: skip
    keyed = [(int(held_lo[i]) >> 49, a, b) for i, (a, b) in enumerate(inside)]
    # starting inside a held range and ending past it: not held
    keyed += [(int(held_lo[i]) >> 49, a, min(b + 1 + (int(held_hi[i]) - int(held_lo[i])), 2**49 - 1))
              for i, (a, b) in enumerate(inside)]  # fmt: skip
    keyed += [(key, a & (2**49 - 1), min(a + n, 2**49 - 1)) for _, a, n in drawn]
    if ascending:
        keyed.sort()
    keys, lo, hi = (u64([t[i] for t in keyed]) for i in range(3))
    chosen = np.array(data.draw(st.lists(st.booleans(), min_size=len(keyed), max_size=len(keyed))), dtype=bool)
    for held_arrays in ((held_lo, held_hi), (u64([]), u64([]))):
        expected = _stomping._keyed_claims_numpy(keys, lo, hi, chosen, *held_arrays)
        found = compiled.keyed_claims(keys, lo, hi, chosen.view(np.uint8), *held_arrays)
        found = [np.frombuffer(a, U64) for a in found]
        for want, got in zip(expected, found, strict=True):
            assert np.array_equal(want, got), (want, got)


def test_keyed_claims_refuses_unpaired_arrays() -> None:
    one = u64([1])
    with pytest.raises(ValueError):
        compiled.keyed_claims(one, one, one, np.ones(2, np.uint8), one, one)
    with pytest.raises(ValueError):
        compiled.keyed_claims(one, one, u64([1, 2]), np.ones(1, np.uint8), one, one)
    with pytest.raises(ValueError):
        compiled.keyed_claims(one, one, one, np.ones(1, np.uint8), one, u64([1, 2]))


@SETTINGS
@given(held=range_sets(), bounds=st.lists(st.tuples(addresses, addresses), max_size=30), pending=st.booleans())
def test_covered_by(held: tuple[np.ndarray, np.ndarray], bounds: list[tuple[int, int]], pending: bool) -> None:
    """Bytes of ranges inside a set, against numpy's: ranges in any order, ends before their starts (both wrap
    alike), at 0 and at 2**64 - 1, and through IntervalSet.covered with a pending level too."""
    starts, ends = held
    cumulative = np.concatenate(([0], np.cumsum(ends - starts, dtype=U64))).astype(U64)
    lo, hi = u64([a for a, _ in bounds]), u64([b for _, b in bounds])
    expected = _intervals._covered_by_numpy(starts, ends, cumulative, lo, hi)
    if starts.size:
        assert np.array_equal(np.frombuffer(compiled.covered_by(starts, ends, cumulative, lo, hi), U64), expected)
    found = []
    for handle in (None, compiled):
        with patch.object(_intervals, "native", handle):
            ranges = IntervalSet(starts, ends)
            if pending and starts.size:
                ranges.add(starts[-1:] + U64(1) if int(starts[-1]) < TOP else starts[-1:], ends[-1:])
            found.append(ranges.covered(lo, hi))
    assert np.array_equal(found[0], found[1])


def test_covered_by_refuses_unpaired_arrays() -> None:
    with pytest.raises(ValueError):
        compiled.covered_by(u64([0]), u64([4]), u64([0]), u64([1]), u64([2]))  # cumulative one short
    with pytest.raises(ValueError):
        compiled.covered_by(u64([0]), u64([4]), u64([0, 4]), u64([1, 2]), u64([2]))


@SETTINGS
@given(drawn=st.lists(st.lists(st.tuples(st.integers(0, 3), st.integers(0, 40 << 16), st.integers(1, 3 << 16)),
                               min_size=1, max_size=20), min_size=1, max_size=5))  # fmt: skip
def test_page_note(drawn: list[list[tuple[int, int, int]]]) -> None:
    """A kernel's batches noted by both paths: the answers and the tables stay the same, batch after batch."""
    ours, theirs = _page_owners.PageOwners(), _page_owners.PageOwners()
    for batch in drawn:
        owners = u64([o for o, _, _ in batch])
        lo = u64([a for _, a, _ in batch])
        hi = lo + u64([n for _, _, n in batch])
        expected = theirs.note_numpy(owners, lo, hi)
        noted = compiled.page_note(owners.astype(np.int64), lo, hi, ours.pages, ours.owners, _page_owners.MAX_PAGES, 16)
        alone, shared, pages, table = noted
        if pages is not None:
            ours.pages, ours.owners = np.frombuffer(pages, U64), np.frombuffer(table, np.int64)
        assert expected is not None
        assert np.array_equal(expected[0], np.frombuffer(alone, bool))
        assert np.array_equal(expected[1], np.frombuffer(shared, U64))
        assert np.array_equal(ours.pages, theirs.pages) and np.array_equal(ours.owners, theirs.owners)


def test_page_note_past_its_bound_records_nothing() -> None:
    table = _page_owners.PageOwners()
    lo, hi = u64([0]), u64([10 << 16])
    assert compiled.page_note(np.zeros(1, np.int64), lo, hi, table.pages, table.owners, 5, 16) is None
    assert table.note_numpy(np.zeros(1, U64), lo, hi) is not None  # the bound is the caller's: numpy's is 2**21


@SETTINGS
@given(seed=st.integers(0, 2**32 - 1), ranges=st.integers(1, 40), period=st.integers(1, 9))
def test_bounds_over_many_ranges_interleaved(seed: int, ranges: int, period: int) -> None:
    """The first look's bounds and the listing's held test remember the few ranges looked up lately: accesses dealt
    round robin over ``period`` of up to 40 ranges (more than it remembers, and fewer), at their starts, their
    ends, across them, in the gaps and below the first, give numpy's answer (searchsorted per access)."""
    rng = np.random.default_rng(seed)
    gaps = rng.choice([0, 1, 32, 4096], ranges)  # 0: ranges that touch (a range's end is the next one's start)
    sizes = rng.choice([1, 32, 512, 4096], ranges).astype(U64)
    starts = (U64(GM) + np.cumsum(gaps + sizes, dtype=U64) - sizes).astype(U64)
    ends = starts + sizes
    n = 600
    events = np.zeros(n, dtype=EVENT_DTYPE)
    which = (np.arange(n) % period + rng.integers(0, ranges, n) * (period == 1)) % ranges
    offset = rng.choice([0, 1, 31, -1, -32, -4096], n)
    anchor = np.where(rng.random(n) < 0.5, starts[which], ends[which])
    events["address"] = (anchor.astype(np.int64) + offset).astype(U64)
    events["address"][::53] = U64(GM - 1)  # below every range
    events["block_size"] = rng.choice([1, 2, 32], n)
    events["block_num"] = rng.choice([1, 2], n)
    events["block_stride"] = 1
    events["repeat"] = 1
    events["kind"] = rng.choice([EventKind.READ, EventKind.WRITE], n)
    events["space"] = Space.GM
    events["block_id"] = rng.integers(0, 4, n)
    events["serial"] = np.arange(1, n + 1)
    limits = np.full(256, TOP, dtype=U64)
    align = np.ones(256, dtype=U64)
    parts = compiled.batch(events, limits, align, starts, ends, WIDE_ACCESS_PIECES)
    ext = extents(events)
    lo = events["address"]
    hi = lo + ext  # no wrap: every address is far below the top
    j = np.searchsorted(starts, lo, side="right") - 1
    inside = (j >= 0) & (hi <= ends[np.maximum(j, 0)])
    assert np.array_equal(np.frombuffer(parts[4], np.int64), np.flatnonzero(~inside))
    index = np.flatnonzero(events["kind"] == EventKind.WRITE).astype(np.int64)
    within = IntervalSet(starts, ends)
    listed = compiled.list_touching(events, index, ext, within.starts, within.ends)
    expected = _runs.listed_touching_numpy(within, events, ext, index)
    for ours, theirs in zip(listed, expected, strict=True):
        assert np.array_equal(np.frombuffer(ours, theirs.dtype), theirs)


# --- the whole detector, both ways ----------------------------------------------------------------------------------


def detector() -> Memcheck:
    found = make_detector("memcheck")
    assert isinstance(found, Memcheck)
    for address, size in ((GM, 4096), (GM + 8192, 1024), (2**64 - 2048, 1024), (2**48 - 512, 1024)):
        found.host_op(HostOp(op="malloc", address=address, size=size))
    return found


def findings_both_ways(batches: list[np.ndarray]) -> tuple[list[Finding], ...]:
    found = []
    for handle in (None, compiled):
        with patch.object(_intervals, "native", handle):
            found.append(run_kernel(detector(), *(b.copy() for b in batches), name="k"))
    return found[0], found[1]


def comparable(findings: list[Finding]) -> list[tuple[object, ...]]:
    return [(f.kind, f.address, f.size, f.serial, f.space, str(f.blocks), f.detail) for f in findings]


@SETTINGS
@given(events=records(max_size=40), cuts=st.lists(st.integers(1, 39), max_size=3))
def test_memcheck_finds_the_same(events: np.ndarray, cuts: list[int]) -> None:
    bounds = sorted({0, events.size, *(c for c in cuts if c < events.size)})
    batches = [events[a:b] for a, b in itertools.pairwise(bounds)]
    numpy_found, compiled_found = findings_both_ways(batches)
    assert comparable(compiled_found) == comparable(numpy_found)


def test_memcheck_finds_the_same_on_a_strided_stream() -> None:
    """Blocks writing strided patterns over each other's bytes, some past the allocations, some misaligned, repeats
    and strides at their limits: every finding, in order, the same."""
    rng = np.random.default_rng(29)
    batches = []
    for b in range(6):
        n = 4096
        events = np.zeros(n, dtype=EVENT_DTYPE)
        events["address"] = GM + rng.integers(0, 4096, n).astype(U64)
        events["address"][::97] = U64(2**64 - 1500) + rng.integers(0, 1000, events["address"][::97].size).astype(U64)
        events["block_size"] = rng.choice([1, 8, 32], n)
        events["block_num"] = rng.choice([1, 2, 8, 65535], n, p=[0.3, 0.3, 0.39, 0.01])
        events["block_stride"] = rng.choice([0, 1, 2, 3, 65535], n)
        events["repeat"] = rng.choice([0, 1, 2, 8], n)
        events["repeat_stride"] = rng.choice([0, 1, 8, 16, 65535], n)
        events["repeat"][events["block_num"] == 65535] = 1
        events["block_id"] = rng.integers(0, 8, n)
        events["block_type"] = 2
        events["kind"] = rng.choice([EventKind.READ, EventKind.WRITE], n)
        events["space"] = rng.choice([Space.GM, Space.GM, Space.UB], n)
        events["flags"] = rng.choice([0, 0, 0, FLAG_ATOMIC], n)
        events["serial"] = np.arange(b * n + 1, (b + 1) * n + 1)
        events["pc"] = rng.integers(0, 64, n)
        batches.append(events)
    numpy_found, compiled_found = findings_both_ways(batches)
    assert numpy_found  # the stream is hostile: there is something to agree on
    assert comparable(compiled_found) == comparable(numpy_found)


def test_the_compiled_path_is_the_one_taken(monkeypatch: pytest.MonkeyPatch) -> None:
    """With the handle set, memcheck's batch goes through the compiled loops (and not through numpy's listing)."""
    monkeypatch.setattr(_intervals, "native", compiled)
    monkeypatch.setattr(_runs, "listed_touching_numpy", None)  # would fail if called
    events = np.zeros(2, dtype=EVENT_DTYPE)
    events["address"] = GM
    events["block_size"], events["block_num"], events["repeat"], events["block_stride"] = 32, 1, 1, 1
    events["kind"] = EventKind.WRITE
    events["space"] = Space.GM
    events["block_id"] = [0, 1]
    found = run_kernel(detector(), events, name="k")
    assert [f.kind for f in found] == ["out_of_bounds"]


def test_batch_fields_give_their_records() -> None:
    events = np.zeros(3, dtype=EVENT_DTYPE)
    from sanitizerd.detectors._batches import records_of

    assert records_of(BatchFields(events)) is not None
    assert records_of(BatchFields(events[::2])) is not None  # made contiguous
    assert records_of({"address": events["address"]}) is None


@pytest.mark.parametrize("handle", ["numpy", "compiled"])
def test_claims_the_log_holds_are_left_out_without_changing_findings(handle: str) -> None:
    """Blocks rewriting their own pages (claims logged, the log merged, then the same claims left out), a block
    writing into another's page at last: the same findings and owner sets as a log that never merges (so never
    leaves a claim out)."""
    rng = np.random.default_rng(3)
    batches = []
    for b in range(8):
        n = 2048
        events = np.zeros(n, dtype=EVENT_DTYPE)
        block = rng.integers(0, 4, n)
        events["block_id"] = block
        events["block_type"] = 2
        # each block its own 64 KiB pages, 32-byte writes at random places in them, rewritten batch after batch
        events["address"] = U64(GM) + block.astype(U64) * U64(1 << 16) + rng.integers(0, 512, n).astype(U64) * U64(64)
        events["block_size"], events["block_num"], events["repeat"], events["block_stride"] = 32, 1, 1, 1
        events["kind"] = EventKind.WRITE
        events["space"] = Space.GM
        events["serial"] = np.arange(b * n + 1, (b + 1) * n + 1)
        if b == 7:
            events["block_id"][-4:] = 3  # block 3 into block 0's page: a conflict, the log flushed
            events["address"][-4:] = U64(GM) + U64(64) * np.arange(4, dtype=U64)
        batches.append(events)

    def found(log_merge: int) -> tuple[list[tuple[object, ...]], list[list[int]]]:
        memcheck = make_detector("memcheck")
        assert isinstance(memcheck, Memcheck)
        memcheck.host_op(HostOp(op="malloc", address=GM, size=4 << 16))
        with patch.object(_intervals, "native", compiled if handle == "compiled" else None), \
                patch.object(_stomping, "_LOG_MERGE", log_merge):  # fmt: skip
            memcheck.kernel_begin(KernelLaunch(kernel=1, name="k", block_dim=4, kernel_type="aiv"))
            for events in batches[:-1]:
                memcheck.check(events.copy())
            merged_before = memcheck.stomping._log_head_merged
            memcheck.stomping._flush()
            owned = [memcheck.stomping.owned_by.starts.tolist(), memcheck.stomping.owned_by.ends.tolist()]
            memcheck.check(batches[-1].copy())
            findings = comparable(memcheck.kernel_end())
        assert merged_before == (log_merge < 1 << 20)
        return findings, owned

    dedupe, plain = found(64), found(1 << 30)
    assert dedupe[0] and dedupe == plain
