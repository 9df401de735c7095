"""racecheck's compiled hold (sanitizerd/native/_racecheck.c, issue 29) against numpy's reference path: the columns
a batch becomes, the byte ranges it reserves for, and the whole detector's findings, the same both ways on random
and hostile records (fields at their bounds, addresses near 2**64, garbage kinds and pipes, empty and one-record
batches). Both paths are imported explicitly, whatever SANITIZERD_NATIVE says."""

from __future__ import annotations

import importlib
import random

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from client_shim.events import EventKind, make_events
from sanitizerd.chips import chip_named
from sanitizerd.detectors import _block_parts, _happens_before, _patterns, _race_columns, _race_pairs, racecheck
from sanitizerd.detectors._batches import Columns
from sanitizerd.detectors._block_parts import place
from sanitizerd.detectors._race_columns import _EXTENT_FIELDS, ACCESS_FIELDS, PLACED_FIELDS, SYNC_FIELDS, HeldColumns
from sanitizerd.detectors._race_pairs import Cut, pieces
from sanitizerd.detectors._simt import SECTION_MARKS
from sanitizerd_protocol.patterns import extents
from sanitizerd_protocol.records import EVENT_DTYPE, FLAG_SIMT_ENTRY
from tests.detector_helpers import make_detector, run_kernel
from tests.test_racecheck_model import random_kernel, to_events
from tests.test_racecheck_stream import batches, merged, random_events

try:
    COMPILED = importlib.import_module("sanitizerd.native._racecheck")
except ImportError:  # no C compiler where this was installed: numpy's path is the only one (and is tested elsewhere)
    COMPILED = None
needs_compiled = pytest.mark.skipif(COMPILED is None, reason="sanitizerd.native._racecheck is not built")

_U64 = (1 << 64) - 1
_KINDS = [int(k) for k in EventKind]


def hostile_records(rng: np.random.Generator, n: int) -> np.ndarray:
    """``n`` records of random bytes, then fields pushed to their bounds now and then, kinds mostly real ones."""
    events = np.frombuffer(rng.integers(0, 256, size=n * EVENT_DTYPE.itemsize, dtype=np.uint8).tobytes(),
                           dtype=EVENT_DTYPE).copy()  # fmt: skip
    if not n:
        return events
    events["kind"] = np.where(rng.random(n) < 0.9, rng.choice(_KINDS, n), events["kind"])
    for name in ("address", "serial", "pc"):
        bounds = np.array([0, 1, _U64, _U64 - 31, 1 << 63], dtype=np.uint64)
        events[name] = np.where(rng.random(n) < 0.3, bounds[rng.integers(0, bounds.size, n)], events[name])
    for name in ("block_num", "block_stride", "repeat", "repeat_stride", "block_id", "event_id", "thread"):
        events[name] = np.where(rng.random(n) < 0.4, rng.choice([0, 1, 2, 0xFFFF], n), events[name])
    events["block_size"] = np.where(rng.random(n) < 0.3, rng.choice([0, 1, 32, 0xFFFFFFFF], n), events["block_size"])
    # Runs of one block, as blocks arrive, now and then
    events["block_id"] = np.where(rng.random(n) < 0.5, np.sort(rng.integers(0, 3, n)), events["block_id"])
    events["block_type"] = np.where(rng.random(n) < 0.5, 1, events["block_type"])
    return events


def columns_of(held: HeldColumns) -> dict[str, np.ndarray]:
    out = {}
    for table, name in ((held._events, "event"), (held._accesses, "access"), (held._syncs, "sync")):
        for field, column in table.view().items():
            if field not in PLACED_FIELDS:  # filled only when the block's nodes are made (not here)
                out[f"{name}.{field}"] = column
    return out


def assert_same_columns(a: HeldColumns, b: HeldColumns) -> None:
    ca, cb = columns_of(a), columns_of(b)
    assert ca.keys() == cb.keys()
    for name in ca:
        assert ca[name].dtype == cb[name].dtype, name
        assert np.array_equal(ca[name], cb[name]), name
    assert a.in_order == b.in_order
    assert a.completed == b.completed
    assert a._complete_to == b._complete_to


def masks(events: np.ndarray, rng: np.random.Generator, how: int) -> tuple[np.ndarray | None, np.ndarray]:
    """(keep, access) as racecheck.check makes them (an access is kept), in three shapes: every event kept,
    some, none."""
    is_access = events["kind"] <= EventKind.WRITE
    if how == 0:
        return None, is_access
    keep = rng.random(events.size) < (0.7 if how == 1 else 0.0)
    return keep, keep & is_access


@needs_compiled
@settings(max_examples=300, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), sizes=st.lists(st.sampled_from([0, 1, 2, 3, 17, 200]), min_size=1, max_size=5),
       shapes=st.lists(st.integers(0, 2), min_size=5, max_size=5), finish=st.integers(0, 5))  # fmt: skip
def test_compiled_hold_gathers_the_columns_numpy_gathers(seed: int, sizes: list[int], shapes: list[int],
                                                         finish: int) -> None:  # fmt: skip
    rng = np.random.default_rng(seed)
    native, reference = HeldColumns(COMPILED), HeldColumns(None)
    for i, n in enumerate(sizes):
        events = hostile_records(rng, n)
        keep, access = masks(events, rng, shapes[i])
        kept = events.size if keep is None else int(np.count_nonzero(keep))
        if kept:  # racecheck appends only what it keeps
            native.append(events, keep, access)
            reference.append(events, keep, access)
        if i == finish and native.size:
            last = int(native._events.columns["block_key"][native.size - 1])
            native.finish(last)
            reference.finish(last)
        assert_same_columns(native, reference)
    native.complete_all()
    reference.complete_all()
    assert_same_columns(native, reference)


@needs_compiled
@pytest.mark.parametrize("seed", range(40))
def test_compiled_gather_copies_any_fields_in_any_order(seed: int) -> None:
    """The compiled gather copies fields grouped by size (its loops unrolled for racecheck's own counts of each
    size): any fields, in any order, repeated or not, of the same counts per size as racecheck's or not, land
    where numpy's compress puts them."""
    rng = np.random.default_rng(seed)
    events = hostile_records(rng, int(rng.integers(0, 300)))
    keep, access = masks(events, rng, int(rng.integers(0, 3)))
    kept = np.ones(events.size, bool) if keep is None else keep
    names = list(EVENT_DTYPE.names)

    def chosen(own: tuple[str, ...]) -> list[str]:
        roll = rng.random()
        if roll < 0.3:  # racecheck's own counts per size, but other fields
            return [str(rng.choice([n for n in names if EVENT_DTYPE[n].itemsize == EVENT_DTYPE[o].itemsize]))
                    for o in own]  # fmt: skip
        if roll < 0.5:
            return list(rng.permutation(own))
        return [str(n) for n in rng.choice(names, int(rng.integers(0, 33)))]

    access_names, sync_names = chosen(ACCESS_FIELDS), chosen(SYNC_FIELDS)
    rows = {"access": access, "sync": kept & ~access}
    columns = {part: [np.full(int(rows[part].sum()), 0xAB, EVENT_DTYPE[n]) for n in names_]
               for part, names_ in (("access", access_names), ("sync", sync_names))}  # fmt: skip
    key, kind = np.zeros(int(kept.sum()), np.uint32), np.zeros(int(kept.sum()), np.uint8)
    offset = {n: EVENT_DTYPE.fields[n][1] for n in names}
    copy = np.zeros(int(kept.sum()), EVENT_DTYPE) if rng.random() < 0.5 else None
    COMPILED.gather(events, keep, access, key, kind,
                    tuple(zip((offset[n] for n in access_names), columns["access"], strict=True)),
                    tuple(zip((offset[n] for n in sync_names), columns["sync"], strict=True)), copy)  # fmt: skip
    if copy is not None:  # each kept record whole
        assert copy.tobytes() == events[kept].tobytes()
    for part, names_ in (("access", access_names), ("sync", sync_names)):
        for name, column in zip(names_, columns[part], strict=True):
            assert np.array_equal(column, events[name][rows[part]]), (part, name)
    assert np.array_equal(kind, events["kind"][kept])


@needs_compiled
def test_compiled_hold_takes_strided_and_misaligned_batches() -> None:
    """A batch that is a strided view, or whose records start off their alignment, is made contiguous first."""
    rng = np.random.default_rng(7)
    events = hostile_records(rng, 301)
    raw = np.zeros(events.nbytes + 1, dtype=np.uint8)
    misaligned = raw[1:].view(EVENT_DTYPE)
    misaligned[:] = events
    for batch in (events[::2], misaligned, events[::-1]):
        native, reference = HeldColumns(COMPILED), HeldColumns(None)
        keep, access = masks(batch, rng, 1)
        native.append(batch, keep[::1], access)
        reference.append(batch, keep, access)
        assert_same_columns(native, reference)


@needs_compiled
@settings(max_examples=300, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), n=st.sampled_from([0, 1, 2, 5, 64, 1000]))
def test_compiled_ranges_are_numpys_pieces(seed: int, n: int) -> None:
    rng = np.random.default_rng(seed)
    events = hostile_records(rng, n)
    mask = rng.random(n) < 0.8
    expected = int(pieces(events)[mask].sum()) - int(mask.sum())
    assert COMPILED.ranges_beyond(events, mask) == expected


@needs_compiled
def test_compiled_ranges_at_their_bounds() -> None:
    """Every field at 0xFFFF: 65535 * 65535 ranges less one per access, summed without overflow."""
    events = make_events(kind=np.full(1000, EventKind.WRITE), block_num=0xFFFF, block_stride=0xFFFF, repeat=0xFFFF,
                         repeat_stride=0xFFFF)  # fmt: skip
    mask = np.ones(events.size, dtype=bool)
    assert COMPILED.ranges_beyond(events, mask) == int(pieces(events).sum()) - events.size == 1000 * (0xFFFF**2 - 1)


@needs_compiled
def test_compiled_hold_refuses_what_does_not_fit() -> None:
    """Wrong lengths, item sizes, offsets and masks are refused before anything is written."""
    events = make_events(kind=np.array([EventKind.READ, EventKind.SET_FLAG, EventKind.WRITE]))
    access = events["kind"] <= EventKind.WRITE
    key, kind = np.zeros(3, np.uint32), np.zeros(3, np.uint8)

    def cols(n: int, names: tuple[str, ...], *, offset: int | None = None, short: bool = False) -> tuple:
        return tuple(
            (EVENT_DTYPE.fields[name][1] if offset is None else offset,
             np.zeros(n - short, EVENT_DTYPE[name] if EVENT_DTYPE[name].itemsize > 1 else np.uint8))
            for name in names
        )  # fmt: skip

    good_a, good_s = cols(2, ACCESS_FIELDS), cols(1, SYNC_FIELDS)
    COMPILED.gather(events, None, access, key, kind, good_a, good_s)
    assert key.tolist() == [events["block_type"][0] << 16 | events["block_id"][0]] * 3
    bad = [
        (events.view(np.uint8)[:-1], None, access, key, kind, good_a, good_s),  # not whole records
        (events, None, access[:2], key, kind, good_a, good_s),  # a mask too short
        (events, np.ones(4, bool), access, key, kind, good_a, good_s),
        (events, np.array([False, True, True]), access, key, kind, good_a, good_s),  # an access not kept
        (events, None, access, key[:2], kind, good_a, good_s),
        (events, None, access, key.view(np.uint8), kind, good_a, good_s),
        (events, None, access, key, kind, cols(2, ACCESS_FIELDS, short=True), good_s),
        (events, None, access, key, kind, good_a, cols(1, SYNC_FIELDS, offset=55)),  # past the record's end
        (events, None, access, key, kind, good_a, cols(1, SYNC_FIELDS, offset=-1)),
        (events, None, access, key, kind, ((0, np.zeros(2, np.complex128)),), good_s),  # 16-byte items
        (events, None, access, key, kind, ((0, np.zeros(2, np.uint64)),) * 33, good_s),  # too many fields
        (events, None, access, key, kind, good_a, good_s, np.zeros(2, EVENT_DTYPE)),  # a copy without room
        (events, None, access, key, kind, good_a, good_s, np.zeros(3 * 56 + 1, np.uint8)),
    ]
    for args in bad:
        before = key.copy()
        with pytest.raises((ValueError, TypeError)):
            COMPILED.gather(*args)
        assert np.array_equal(key, before)
    with pytest.raises(ValueError):
        COMPILED.ranges_beyond(events, access[:2])
    with pytest.raises((ValueError, TypeError)):  # read-only columns are not written
        frozen = np.zeros(3, np.uint32)
        frozen.flags.writeable = False
        COMPILED.gather(events, None, access, frozen, kind, good_a, good_s)


def findings_both_ways(parts: list[np.ndarray], *, prove: bool = True) -> tuple[list, list]:
    out = []
    for native in (COMPILED, None):
        detector = make_detector("racecheck")
        detector.native = native
        detector.prove_blocks = prove
        out.append(run_kernel(detector, *parts))
    return out[0], out[1]


def with_finish(events: np.ndarray, rng: random.Random) -> np.ndarray:
    if rng.random() < 0.5:
        return events
    out = []
    for block in np.unique(events["block_id"]).tolist():
        out.append(events[events["block_id"] == block])
        out.append(make_events(kind=EventKind.BLOCK_FINISH, block_id=block, block_size=0))
    return np.concatenate(out)


@needs_compiled
@pytest.mark.parametrize("seed", range(80))
def test_the_detector_finds_the_same_both_ways_on_random_kernels(seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """Random kernels (pipes, set/wait flags, unmatched ones, barriers, SyncAlls, overlapping and disjoint UB and GM
    accesses, several blocks), blocks one after the other or interleaved, batches cut anywhere, blocks proven as
    they complete or the whole check at the end: the same findings, texts and pairs."""
    rng = random.Random(seed)
    monkeypatch.setattr(racecheck, "PROOF_STRETCH", rng.choice((1, 8, 1 << 15)))
    if rng.random() < 0.5:
        events, _ = to_events(random_kernel(rng, blocks=rng.choice((1, 2, 3, 4)), spmd=rng.random() < 0.4))
    else:  # any sync kind on any pipe: waits left unreleased, stuck blocks
        events = random_events(rng, rng.choice((1, 2, 3)))
    if rng.random() < 0.3:
        events = merged(events, rng)
    events = with_finish(events, rng)
    native, reference = findings_both_ways(batches(events, rng), prove=rng.random() < 0.7)
    assert native == reference
    if seed < 10:  # some of them race, so the comparison is not of empty lists only
        assert isinstance(native, list)


@needs_compiled
@pytest.mark.parametrize("seed", range(40))
def test_the_detector_finds_the_same_both_ways_on_hostile_records(seed: int) -> None:
    """Records of random bytes (small patterns, so each check stays small): whatever the detector makes of them,
    internal errors included, it makes both ways."""
    rng = np.random.default_rng(seed)
    events = hostile_records(rng, int(rng.integers(1, 120)))
    for name in ("block_num", "repeat"):
        events[name] = np.minimum(events[name], 4)
    events["space"] %= 8
    # Mostly on defined pipes and off SIMT threads, so that most records reach the model and the pair search.
    for name in ("pipe", "dst_pipe"):
        events[name] = np.where(rng.random(events.size) < 0.95, events[name] % 12, events[name])
    events["thread"] = np.where(rng.random(events.size) < 0.95, 0, events["thread"])
    events["flags"] &= np.uint8(0xFB)  # no SIMT call entries
    parts = np.split(events, sorted(rng.integers(0, events.size, int(rng.integers(0, 4)))))
    native, reference = findings_both_ways(parts)
    assert native == reference


@needs_compiled
def test_some_random_kernels_race_both_ways(monkeypatch: pytest.MonkeyPatch) -> None:
    """The random kernels above are not all race-free: the comparison covers reported races; and the compiled
    loops do run on them (none refuses its input and leaves it to numpy)."""
    ran: list[str] = []
    loops = ("gather", "select", "place", "fixpoint", "extents", "unordered", "site_pairs", "make_nodes", "sort_by",
             "fifo_match", "ranges")  # fmt: skip
    for name in loops:

        def spy(*args: object, _name: str = name, _loop: object = getattr(COMPILED, name)) -> object:
            ran.append(_name)
            return _loop(*args)  # type: ignore[operator]

        monkeypatch.setattr(COMPILED, name, spy, raising=False)
    fixpoints: list[bool] = []
    solve = _happens_before._fixpoint_native
    monkeypatch.setattr(_happens_before, "_fixpoint_native", lambda *a: fixpoints.append(solve(*a) is not None)
                        or solve(*a))  # fmt: skip
    raced = 0
    for seed in range(40):
        rng = random.Random(seed)
        events, _ = to_events(random_kernel(rng, blocks=2))
        native, reference = findings_both_ways([events])
        assert native == reference
        raced += any(f.kind.startswith("race") for f in native)
    assert raced >= 5
    assert set(loops) <= set(ran)
    assert fixpoints and all(fixpoints)


def test_the_reference_path_is_chosen_by_none() -> None:
    """``HeldColumns(None)`` gathers with numpy whatever was built; the module default follows SANITIZERD_NATIVE."""
    assert HeldColumns(None).native is None
    assert HeldColumns().native is _race_columns.NATIVE


def random_blocks(rng: np.random.Generator, n: int) -> tuple[np.ndarray, ...]:
    """``place``'s inputs: kinds of every sort (unkept ones between WRITE and SET_FLAG too), pipes of every value
    (PIPE_S, PIPE_ALL, undefined ones up to 255), block starts, serials that repeat."""
    kinds = np.array([*_KINDS, 2, 15, 255], dtype=np.uint8)
    kind = kinds[rng.integers(0, kinds.size, n)]
    kind = np.where(rng.random(n) < 0.4, rng.integers(0, 2, n), kind).astype(np.uint8)
    start = rng.random(n) < rng.choice([0.0, 0.05, 0.5])
    if n:
        start[0] = True
    is_sync, is_access = kind >= EventKind.SET_FLAG, kind <= EventKind.WRITE
    common = np.array([0, 1, 2, 4, 5, 6, 11], dtype=np.uint8)

    def pipes(m: int) -> np.ndarray:
        return np.where(rng.random(m) < 0.9, common[rng.integers(0, common.size, m)],
                        rng.integers(0, 256, m)).astype(np.uint8)  # fmt: skip

    sync_pipe, sync_dst, access_pipe = pipes(int(is_sync.sum())), pipes(int(is_sync.sum())), pipes(int(is_access.sum()))
    serial = np.cumsum(rng.random(access_pipe.size) < 0.6).astype(np.uint64)
    if serial.size and rng.random() < 0.2:
        serial[rng.integers(0, serial.size)] = np.uint64(_U64)
    return kind, start, sync_pipe, sync_dst, access_pipe, serial


@needs_compiled
@settings(max_examples=400, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), n=st.sampled_from([1, 2, 3, 10, 50, 400]))
def test_compiled_place_counts_what_numpy_counts(seed: int, n: int) -> None:
    args = random_blocks(np.random.default_rng(seed), n)
    native = place(*args, native=COMPILED)
    reference = place(*args)
    for name, a, b in zip(PLACED_FIELDS, native, reference, strict=True):
        assert a.dtype == b.dtype == np.int64, name
        assert np.array_equal(a, b), name


@needs_compiled
def test_compiled_place_refuses_columns_that_disagree() -> None:
    kind, start, sync_pipe, sync_dst, access_pipe, serial = random_blocks(np.random.default_rng(3), 200)
    out = [np.empty(access_pipe.size, np.int64) for _ in range(4)]
    good = [kind, start, sync_pipe, sync_dst, access_pipe, serial, _block_parts._TABLES, _block_parts._CONSTANTS]
    COMPILED.place(*good, *out)
    bad_start = start.copy()
    bad_start[0] = False
    for i, bad in ((2, sync_pipe[:-1]), (3, sync_dst[:-1]), (4, access_pipe[1:]), (5, serial[1:]),
                   (5, serial.astype(np.uint32)), (1, bad_start), (1, start[1:]), (6, _block_parts._TABLES[1:]),
                   (7, _block_parts._CONSTANTS[1:]), (7, (256, *_block_parts._CONSTANTS[1:]))):  # fmt: skip
        args = list(good)
        args[i] = bad
        with pytest.raises((ValueError, TypeError)):
            COMPILED.place(*args, *out)
    with pytest.raises(ValueError):
        COMPILED.place(*good, *out[:3], out[3][1:])
    with pytest.raises(ValueError):
        COMPILED.place(*good, *out[:3], out[3].view(np.int32))


@needs_compiled
@settings(max_examples=300, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), n=st.sampled_from([0, 1, 2, 7, 100, 1000]))
def test_compiled_select_holds_what_numpy_holds(seed: int, n: int) -> None:
    """Kinds of every value, non-blocking GET_BUFs, SIMT threads and their call's entry records, pipes and
    destination pipes past the last defined one."""
    rng = np.random.default_rng(seed)
    events = hostile_records(rng, n)
    events["kind"] = np.where(rng.random(n) < 0.1, EventKind.GET_BUF, events["kind"])
    events["kind"] = np.where(rng.random(n) < 0.05, EventKind.BLOCK_FINISH, events["kind"])
    events["mode"] = np.where(rng.random(n) < 0.5, rng.integers(0, 3, n), events["mode"])
    events["thread"] = np.where(rng.random(n) < 0.6, 0, events["thread"])
    events["flags"] = np.where(rng.random(n) < 0.5, rng.integers(0, 8, n), events["flags"])
    for name in ("pipe", "dst_pipe"):
        events[name] = np.where(rng.random(n) < 0.8, events[name] % 13, events[name])
    keep, kept, off = racecheck.select(events)
    selected = racecheck.select_native(COMPILED, events)
    assert np.array_equal(selected.keep, keep)
    assert np.array_equal(selected.accesses, keep & (events["kind"] <= EventKind.WRITE))
    assert (selected.kept, selected.off_pipe) == (kept, off)
    assert selected.simt_seen is seen_by_feed(events)
    finished = np.flatnonzero(events["kind"] == EventKind.BLOCK_FINISH)
    assert selected.last_finish == (int(finished[-1]) if finished.size else -1)
    assert selected.records_ended is bool((events["mode"][finished] == racecheck.BLOCK_RECORDS_ENDED).any())
    assert selected.ranges == int(pieces(events)[selected.accesses].sum()) - int(selected.accesses.sum())


def seen_by_feed(events: np.ndarray) -> bool:
    """SimtSections.feed's own test for a batch it has something to do with, no section being open."""
    marks = SECTION_MARKS[events["kind"]]
    threads = (events["thread"] != 0) & ((events["flags"] & FLAG_SIMT_ENTRY) == 0)
    return bool(marks.any() or threads.any())


@needs_compiled
@settings(max_examples=200, deadline=None)
@given(
    size=st.integers(1, 300),
    mark=st.sampled_from([None, *np.flatnonzero(SECTION_MARKS).tolist()]),
    thread=st.sampled_from([None, "thread", "entry"]),
    at=st.integers(0, 299),
)
def test_compiled_select_says_where_a_batch_has_simt_records(size: int, mark: int | None, thread: str | None,
                                                             at: int) -> None:  # fmt: skip
    """A batch of plain accesses, with or without one SIMT mark and one thread's record (or a call's entry
    record, which is its block's): select says it has SIMT records exactly where SimtSections.feed would look."""
    events = make_events(kind=EventKind.READ, block_id=1, address=0x100, block_size=32)
    events = np.repeat(events, size)
    at %= size
    if mark is not None:
        events["kind"][at] = mark
    if thread is not None:
        events["thread"][(at + 1) % size] = 7
        if thread == "entry":
            events["flags"][(at + 1) % size] |= FLAG_SIMT_ENTRY
    simt_seen = racecheck.select_native(COMPILED, events).simt_seen
    assert simt_seen is seen_by_feed(events) is (mark is not None or thread == "thread")


@needs_compiled
def test_compiled_select_refuses_what_does_not_fit() -> None:
    events = hostile_records(np.random.default_rng(1), 10)
    keep, mem = np.empty(10, bool), np.empty(10, bool)
    tables, constants = racecheck._SELECT_TABLES, racecheck._SELECT_CONSTANTS
    COMPILED.select(events, tables, constants, keep, mem)
    for args in ((events[:9], tables, constants, keep, mem), (events, tables[1:], constants, keep, mem),
                 (events, tables, constants, keep[1:], mem), (events, tables, constants, keep, mem[1:]),
                 (events, tables, constants[1:], keep, mem), (events, tables, (300, *constants[1:]), keep, mem),
                 (events, tables, (*constants[:-1], -1), keep, mem),
                 (events.view(np.uint8)[1:], tables, constants, np.empty(0, bool), np.empty(0, bool))):  # fmt: skip
        with pytest.raises((ValueError, TypeError)):
            COMPILED.select(*args)


def random_clocks(rng: np.random.Generator, n: int, width: int) -> tuple:
    """``_fixpoint``'s inputs: chains of nodes (sorted), their ordinals, clocks of -1 or ordinals, edge lists with
    rows written twice (numpy's last write wins), pipe_barrier lists (np.maximum.at: every one counts), and
    cross-block knowledge into rows named twice."""
    chain = np.sort(rng.integers(0, max(1, n // 3), n)).astype(np.int64)
    starts = np.flatnonzero(np.concatenate(([True], chain[1:] != chain[:-1]))) if n else np.empty(0, np.int64)
    ordinal = np.arange(n) - np.repeat(starts, np.diff(np.append(starts, n))) if n else np.empty(0, np.int64)
    top = int(ordinal.max()) if n else 0
    K = np.where(rng.random((n, width)) < 0.8, -1, rng.integers(-1, top + 1, (n, width))).astype(np.int32)
    own_col = rng.integers(0, width, n).astype(np.int64)

    def lists(count: int) -> list[tuple[np.ndarray, np.ndarray]]:
        return [(rng.integers(0, n, m).astype(np.int64), rng.integers(0, n, m).astype(np.int64))
                for m in rng.integers(0, 2 * n + 1, count)] if n else []  # fmt: skip

    x = rng.integers(0, n, int(rng.integers(0, 4))).astype(np.int64) if n else np.empty(0, np.int64)
    inj = rng.integers(-1, top + 1, (x.size, width)).astype(np.int32)
    return K, chain, ordinal.astype(np.int64), own_col, top + 2, lists(3), lists(int(rng.integers(0, 2))), x, inj


@needs_compiled
@settings(max_examples=400, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), n=st.sampled_from([1, 2, 3, 8, 40, 200]), width=st.integers(1, 12))
def test_compiled_fixpoint_is_numpys(seed: int, n: int, width: int) -> None:
    K, chain, ordinal, own_col, span, edges, multi, x, inj = random_clocks(np.random.default_rng(seed), n, width)
    native = _happens_before._fixpoint(K.copy(), chain, ordinal, own_col, span, edges, multi, x, inj, COMPILED)
    reference = _happens_before._fixpoint(K.copy(), chain, ordinal, own_col, span, edges, multi, x, inj)
    assert native[0].dtype == reference[0].dtype == np.int32
    assert np.array_equal(native[0], reference[0])
    assert native[1] == reference[1]  # the same rounds


@needs_compiled
def test_compiled_fixpoint_refuses_rows_out_of_range() -> None:
    """A row, column or list bound out of range, or chains out of order, is refused (numpy's rounds run then)."""
    K, chain, ordinal, own_col, _span, edges, multi, x, inj = random_clocks(np.random.default_rng(5), 30, 4)
    fine = _happens_before._fixpoint_native(COMPILED, K, chain, ordinal, own_col, edges, multi, x, inj)
    assert fine is not None
    bad_edges = [(np.array([0, 30]), np.array([1, 2]))]
    bad_dst = [(np.array([0, 1]), np.array([-1, 2]))]
    unsorted = chain[::-1].copy()
    for args in ((K, chain, ordinal, own_col, bad_edges, multi, x, inj),
                 (K, chain, ordinal, own_col, edges, bad_dst, x, inj),
                 (K, chain, ordinal, own_col + 4, edges, multi, x, inj),
                 (K, unsorted, ordinal, own_col, edges, multi, x, inj) if chain[0] != chain[-1] else None,
                 (K, chain, ordinal, own_col, edges, multi, np.array([30]), inj[:1]),
                 (K, chain, ordinal, own_col, edges, multi, x, inj[:, :3]),
                 (K, chain[1:], ordinal, own_col, edges, multi, x, inj)):  # fmt: skip
        if args is not None:
            assert _happens_before._fixpoint_native(COMPILED, *args) is None
    with pytest.raises(ValueError):  # the list bounds, given straight
        COMPILED.fixpoint(K.copy(), 4, chain, ordinal, own_col, np.zeros(2, np.int64), np.zeros(2, np.int64),
                          np.array([3], np.int64), *(np.empty(0, np.int64),) * 4, np.empty(0, np.int32))  # fmt: skip


@settings(max_examples=200, deadline=None)
@given(values=st.lists(st.integers(-3, 5000), max_size=50), dtype=st.sampled_from([np.int64, np.uint8, np.int32]))
def test_small_unique_is_numpys_unique(values: list[int], dtype: type) -> None:
    array = np.array(values, dtype=np.int64)
    if dtype is np.uint8:
        array = array[(array >= 0) & (array < 256)]
    array = array.astype(dtype)
    got, want = _happens_before.small_unique(array), np.unique(array)
    assert got.dtype == want.dtype
    assert np.array_equal(got, want)


def extent_columns(rng: np.random.Generator, n: int, how: int) -> np.ndarray:
    """Access records whose pattern fields are small (numpy's one-row branch), random, at their bounds, or just
    either side of the batch-wide saturation at 2**62 (units times block_size)."""
    events = np.zeros(n, dtype=EVENT_DTYPE)
    for name in ("repeat", "block_num", "block_stride", "repeat_stride"):
        small = rng.integers(0, 3, n)
        wide = np.where(rng.random(n) < 0.5, rng.choice([0, 1, 2, 0xFFFE, 0xFFFF], n), rng.integers(0, 1 << 16, n))
        events[name] = small if how in (0, 3) else wide if how == 1 else np.where(rng.random(n) < 0.3, wide, small)
    sizes = np.where(rng.random(n) < 0.5, rng.choice([0, 1, 32, 0xFFFFFFFF], n), rng.integers(0, 1 << 32, n))
    events["block_size"] = sizes if how else rng.integers(0, 64, n)
    if how == 3 and n:  # one access at 2**62 / block_size units, give or take one: saturating or not
        i = int(rng.integers(0, n))
        events["block_size"] = np.minimum(events["block_size"], 1 << 20)
        if rng.random() < 0.5:
            events[["repeat", "block_num", "block_stride", "repeat_stride"]][i] = (0xFFFF, 0xFFFF, 0xFFFF, 0xFFFF)
            units = 2 * 0xFFFE * 0xFFFF + 1
            events["block_size"][i] = (1 << 62) // units + int(rng.integers(-1, 2))
        else:  # 2**31 units (65534 * 32768 + 257 * 255 + 1) of 2**31 bytes: exactly 2**62, which saturates
            events[["repeat", "block_num", "block_stride", "repeat_stride"]][i] = (0xFFFF, 258, 255, 32768)
            events["block_size"][i] = (1 << 31) - int(rng.integers(0, 2))
            if n > 1:  # (2**31 - 1)**2 bytes: odd and over 2**53, so it shows whether the batch saturated
                j = (i + 1) % n
                events[["repeat", "block_num", "block_stride", "repeat_stride"]][j] = (0xFFFF, 0xFFFF, 1, 32768)
                events["block_size"][j] = (1 << 31) - 1
    return events


@needs_compiled
@settings(max_examples=400, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), n=st.sampled_from([0, 1, 2, 7, 300]), how=st.integers(0, 3))
def test_compiled_extents_are_numpys(seed: int, n: int, how: int) -> None:
    """The extents the compiled hold writes are patterns.extents' bit for bit, the batch-wide saturation
    included."""
    events = extent_columns(np.random.default_rng(seed), n, how)
    want = extents(events)
    columns = [np.ascontiguousarray(events[name]) for name in _EXTENT_FIELDS]
    got = np.full(n, 12345, dtype=np.uint64)
    assert COMPILED.extents(*columns, got) is None
    assert want.dtype == got.dtype
    assert np.array_equal(got, want)
    held = Columns({name: column for name, column in zip(_EXTENT_FIELDS, columns, strict=True)})
    held["ext"] = np.zeros(n, dtype=np.uint64)
    _race_columns.native_extents(COMPILED, held)
    assert np.array_equal(held["ext"], want)


@needs_compiled
def test_compiled_extents_refuse_bad_buffers() -> None:
    """Lengths that differ, items of the wrong size, a read-only or strided out: refused, nothing written; the
    wrapper gives numpy what the compiled loop would refuse."""
    events = extent_columns(np.random.default_rng(3), 10, 2)
    columns = [np.ascontiguousarray(events[name]) for name in _EXTENT_FIELDS]
    out = np.zeros(10, dtype=np.uint64)
    frozen = np.zeros(10, dtype=np.uint64)
    frozen.flags.writeable = False
    for bad in ([*columns[:4], columns[4][:9], out], [*columns, out[:9]], [*columns[:2], columns[0], *columns[3:], out],
                [*columns, out.view(np.uint32)], [*columns, frozen]):  # fmt: skip
        with pytest.raises((ValueError, TypeError, BufferError)):
            COMPILED.extents(*bad)
        assert not out.any()
    with pytest.raises((ValueError, TypeError, BufferError)):
        COMPILED.extents(*columns, np.zeros(20, dtype=np.uint64)[::2])
    held = Columns({name: events[name] for name in _EXTENT_FIELDS})  # strided views of the records: numpy's path
    held["ext"] = np.zeros(10, dtype=np.uint64)
    _race_columns.native_extents(COMPILED, held)
    assert np.array_equal(held["ext"], extents(events))


def pairs_checked_both_ways(monkeypatch: pytest.MonkeyPatch, rng: np.random.Generator) -> list[int]:
    """Within it, every racecheck.Kernel's ``_unordered`` asserts that the compiled pairs' verdicts are numpy's:
    on the candidate pairs, and on as many random pairs of its accesses (any two, of one block or two, an access
    with itself), truncated or not. The count of pairs compared, per call."""
    compared: list[int] = []
    compiled = racecheck.Kernel._unordered

    def both_ways(kernel: racecheck.Kernel, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        out = compiled(kernel, a, b)
        n = kernel.mem.size
        extra_a, extra_b = rng.integers(0, n, a.size + 8), rng.integers(0, n, a.size + 8)
        for x, y in ((a, b), (extra_a, extra_b)):
            for truncated in (kernel.truncated, not kernel.truncated):
                kept, kernel.truncated = kernel.truncated, truncated
                try:
                    assert np.array_equal(compiled(kernel, x, y), kernel._unordered_numpy(x, y))
                finally:
                    kernel.truncated = kept
                compared.append(x.size)
        return out

    monkeypatch.setattr(racecheck.Kernel, "_unordered", both_ways)
    return compared


def unordered_both_ways(seed: int, monkeypatch: pytest.MonkeyPatch) -> int:
    """A random kernel of one to four blocks (SPMD or not, SyncAlls, atomics, every pipe) checked on the 910B and
    on the 950 (whose vector pipe keeps its order), blocks proven alone or the whole check, with every pair's
    verdict compared both ways (``pairs_checked_both_ways``); how many were compared."""
    rng = random.Random(seed)
    with monkeypatch.context() as patch:
        compared = pairs_checked_both_ways(patch, np.random.default_rng(seed))
        events, _ = to_events(random_kernel(rng, blocks=rng.choice((1, 2, 3, 4)), spmd=rng.random() < 0.4))
        for chip in ("910B1", "950"):
            detector = make_detector("racecheck")
            detector.context.chip = chip_named(chip)
            detector.prove_blocks = rng.random() < 0.5
            run_kernel(detector, *batches(with_finish(events, rng), rng))
    return sum(compared)


@needs_compiled
@pytest.mark.parametrize("seed", range(60))
def test_compiled_unordered_is_numpys(seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each pair's verdict compiled is numpy's, for pairs of one block and of two."""
    unordered_both_ways(seed, monkeypatch)


@needs_compiled
def test_compiled_unordered_compares_pairs(monkeypatch: pytest.MonkeyPatch) -> None:
    """The random kernels above do make pairs: most are compared, of one block and of two."""
    compared = [unordered_both_ways(seed, monkeypatch) for seed in range(20)]
    assert sum(1 for c in compared if c) >= 12


class _Clocks:
    """What ``Kernel._unordered`` reads of a model: the padded clocks, and no cross-block waits."""

    knowledge = _happens_before.Model.knowledge

    def __init__(self, table: np.ndarray, column: np.ndarray) -> None:
        self.padded = (table, column)
        self.G = np.empty((0, 0), dtype=np.int32)

    def clock_table(self) -> tuple[np.ndarray, np.ndarray]:
        return self.padded


def random_pair_inputs(rng: np.random.Generator, n: int, chip: str) -> racecheck.Kernel:
    """A Kernel holding only what ``_unordered`` reads, every field random within what a check makes of it: few
    values each, so that every rule decides some pairs (serials that repeat, barriers apart or not, pipes in
    order, clocks that know or not, atomics)."""
    kernel = object.__new__(racecheck.Kernel)
    nodes, width = int(rng.integers(0, 8)), int(rng.integers(0, 4))
    pipes = np.array([racecheck._S, racecheck._S_CAL, racecheck._V, 1, 2, 3])
    kernel.mem = np.sort(rng.choice(4 * n, n, replace=False)).astype(np.int64)
    kernel.serial = rng.integers(0, 4, n).astype(np.int64)
    kernel.write, kernel.atomic = rng.random(n) < 0.6, rng.random(n) < 0.3
    kernel.pipe = pipes[rng.integers(0, pipes.size, n)].astype(np.int64)
    kernel.mblock = rng.integers(0, 2, n).astype(np.int64)
    kernel.seg = rng.integers(0, 4, n).astype(np.int64)
    kernel.prev, kernel.issuer = (rng.integers(-1, nodes, n).astype(np.int64) for _ in range(2))
    kernel.pipe_index = rng.integers(0, 6, n).astype(rng.choice([np.int32, np.int64]))
    kernel.barrier_no = rng.integers(0, 2, n).astype(rng.choice([np.int32, np.int64]))
    table = rng.integers(-1, 4, (nodes + 1, width + 1)).astype(np.int32)
    table[-1] = -1
    table[:, -1] = -1
    column = np.where(rng.random(racecheck.NPIPES) < 0.7, rng.integers(0, width + 1, racecheck.NPIPES), width)
    kernel.model = _Clocks(table, column.astype(np.int64))  # type: ignore[assignment]
    kernel.distance = int(rng.integers(0, 4))
    kernel.truncated = bool(rng.random() < 0.3)
    kernel.context = make_detector("racecheck").context
    kernel.context.chip = chip_named(chip)
    kernel.native, kernel._pair_inputs = COMPILED, None
    return kernel


@needs_compiled
@settings(max_examples=300, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), n=st.sampled_from([1, 2, 5, 40, 300]), chip=st.sampled_from(["910B1", "950"]))
def test_compiled_unordered_is_numpys_on_random_fields(seed: int, n: int, chip: str) -> None:
    """Random fields (``random_pair_inputs``) and random pairs of them: each verdict compiled is numpy's."""
    rng = np.random.default_rng(seed)
    kernel = random_pair_inputs(rng, n, chip)
    m = int(rng.integers(0, 3 * n + 1))
    a, b = rng.integers(0, n, m), rng.integers(0, n, m)
    assert np.array_equal(kernel._unordered(a, b), kernel._unordered_numpy(a, b))


@needs_compiled
def test_random_fields_exercise_every_rule() -> None:
    """Each rule of the pairs' verdict decides some random pairs: dropping any one changes some verdict, and so
    does the 950's ordered vector pipe."""
    rng = np.random.default_rng(11)
    kernels = [random_pair_inputs(rng, 300, chip) for chip in ("910B1", "950") * 10]
    pairs = [(rng.integers(0, 300, 900), rng.integers(0, 300, 900)) for _ in kernels]
    verdicts = [k._unordered_numpy(a, b) for k, (a, b) in zip(kernels, pairs, strict=True)]
    for name, value in (("barrier_no", lambda k: np.zeros_like(k.barrier_no)),
                        ("pipe_index", lambda k: np.zeros_like(k.pipe_index)),
                        ("serial", lambda k: np.arange(k.serial.size)),
                        ("atomic", lambda k: np.zeros_like(k.atomic)),
                        ("issuer", lambda k: np.full_like(k.issuer, -1)),
                        ("seg", lambda k: np.full_like(k.seg, 99))):  # fmt: skip
        changed = 0
        for kernel, (a, b), verdict in zip(kernels, pairs, verdicts, strict=True):
            kept = getattr(kernel, name)
            setattr(kernel, name, value(kernel))
            changed += int((kernel._unordered_numpy(a, b) != verdict).sum())
            setattr(kernel, name, kept)
        assert changed, name
    on_910b = make_detector("racecheck").context.chip
    vector_ordered = 0
    for kernel, (a, b), verdict in zip(kernels, pairs, verdicts, strict=True):
        if kernel.context.chip.is_950:
            kernel.context.chip = on_910b
            vector_ordered += int((kernel._unordered_numpy(a, b) != verdict).sum())
    assert vector_ordered


@needs_compiled
def test_compiled_unordered_refuses_what_does_not_fit(monkeypatch: pytest.MonkeyPatch) -> None:
    """A pair, a node row or a pipe column out of range, or arrays of other lengths or widths, is refused with
    ValueError and writes nothing."""
    seen: list[tuple] = []
    compiled = racecheck.Kernel._unordered

    def keep_inputs(kernel: racecheck.Kernel, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        table, column = kernel.model.clock_table()
        seen.append((a.astype(np.int64), b.astype(np.int64), kernel._pair_columns(), table, column))
        return compiled(kernel, a, b)

    monkeypatch.setattr(racecheck.Kernel, "_unordered", keep_inputs)
    events, _ = to_events(random_kernel(random.Random(3), blocks=2))
    run_kernel(make_detector("racecheck"), events)
    a, b, per_access, table, column = next(s for s in seen if s[0].size)
    n = per_access[0].size

    def call(a: np.ndarray = a, b: np.ndarray = b, per_access: tuple = per_access, table: np.ndarray = table,
             width: int = table.shape[1], column: np.ndarray = column, out: np.ndarray | None = None) -> int:
        out = np.zeros(a.size, dtype=bool) if out is None else out
        return COMPILED.unordered(a, b, *per_access, table, width, column, 0, 0, 2, out)

    call()  # the inputs as given are fine

    def with_access(k: int, values: np.ndarray) -> tuple:
        return tuple(values if i == k else x for i, x in enumerate(per_access))

    prev, issuer, pipe = 5, 6, 2
    bad = [
        {"a": np.full(a.size, n)}, {"b": np.full(b.size, -1)}, {"b": b[:-1]},
        {"per_access": with_access(prev, np.full(n, table.shape[0], np.int64))},
        {"per_access": with_access(issuer, np.full(n, -table.shape[0] - 1, np.int64))},
        {"per_access": with_access(pipe, np.full(n, 64, np.int64))},
        {"per_access": with_access(pipe, np.full(n, -1, np.int64))},
        {"per_access": with_access(0, per_access[0][:-1])},
        {"per_access": with_access(10, per_access[10][:-1])},
        {"column": np.full(column.size, table.shape[1], np.int64)},
        {"width": table.shape[1] + 1}, {"width": 0},
        {"out": np.zeros(a.size + 1, dtype=bool)},
        {"per_access": with_access(0, per_access[0].astype(np.int32))},
    ]
    for change in bad:
        out = np.zeros(a.size, dtype=bool)
        with pytest.raises(ValueError):
            call(**{**change, "out": change.get("out", out)})
        assert not out.any()
    frozen = np.zeros(a.size, dtype=bool)
    frozen.flags.writeable = False
    with pytest.raises((ValueError, TypeError, BufferError)):
        call(out=frozen)


def random_incidences(rng: np.random.Generator, size: int, n: int) -> tuple[np.ndarray, ...]:
    """``_site_pairs``' inputs: incidences sorted by segment (segments of one to five keys, runs of a key, an
    access in several segments), per access few keys, writes or reads, instructions that repeat (an instruction's
    other events beside it)."""
    seg = np.sort(rng.integers(0, max(size // int(rng.integers(1, 8)), 1), size)).astype(np.int64)
    who = rng.integers(0, n, size).astype(np.int64)
    key = rng.integers(0, int(rng.integers(1, 6)), n).astype(np.int64)
    is_write = rng.random(n) < rng.random()
    instruction = np.cumsum(rng.random(n) < 0.5).astype(np.int64)
    return seg, who, key, is_write, instruction


def site_pairs_both_ways(seg: np.ndarray, who: np.ndarray, key: np.ndarray, is_write: np.ndarray,
                         instruction: np.ndarray, max_sites: int = 3) -> list:  # fmt: skip
    out = []
    for native in (COMPILED, None):
        cut, asked = Cut(), []
        chunks = _race_pairs._site_pairs(
            seg, who, np.arange(key.size), key, is_write, instruction, np.arange(seg.size + 1, dtype=np.uint64),
            np.arange(1, seg.size + 2, dtype=np.uint64), asked.append, cut, max_sites, native,
        )  # fmt: skip
        out.append(([(a.tolist(), b.tolist(), s.segment.tolist()) for a, b, s in chunks], asked,
                    (cut.segments, cut.most)))  # fmt: skip
    return out


@needs_compiled
@settings(max_examples=400, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), size=st.sampled_from([0, 1, 2, 7, 60, 500]), n=st.sampled_from([1, 3, 40]))
def test_compiled_site_pairs_are_numpys(seed: int, size: int, n: int) -> None:
    """The same pairs, in the same chunks and order, the same pairs asked for and the same segments cut."""
    native, reference = site_pairs_both_ways(*random_incidences(np.random.default_rng(seed), size, n))
    assert native == reference


@needs_compiled
def test_random_incidences_make_pairs_of_every_sort() -> None:
    """The random incidences make pairs of the other key and of the own key, general segments too, and skip an
    instruction's own other events: dropping the skip changes some pairs."""
    rng = np.random.default_rng(4)
    other = own = general = skipped = 0
    for _ in range(100):
        seg, who, key, is_write, instruction = random_incidences(rng, 200, 40)
        (chunks, _, _), _ = site_pairs_both_ways(seg, who, key, is_write, instruction)
        *general_chunks, (a_other, _, _), (a_own, _, _) = chunks
        other, own, general = other + len(a_other), own + len(a_own), general + len(general_chunks)
        (apart, _, _), _ = site_pairs_both_ways(seg, who, key, is_write, np.arange(key.size))
        skipped += apart != chunks
    assert other and own and general and skipped


@needs_compiled
def test_compiled_site_pairs_refuse_what_does_not_fit() -> None:
    seg, who, key, is_write, instruction = random_incidences(np.random.default_rng(2), 50, 10)
    general, pairs = np.zeros(50, dtype=bool), np.zeros((4, 50), dtype=np.int64)
    COMPILED.site_pairs(seg, who, key, is_write, instruction, general, pairs)
    for i, bad in ((1, np.full(50, 10, np.int64)), (1, np.full(50, -1, np.int64)), (1, who[1:]), (2, key[1:]),
                   (3, is_write[1:]), (4, instruction[1:]), (5, general[1:]), (6, pairs[:, 1:].copy()),
                   (0, seg.astype(np.int32)), (2, key.astype(np.int32))):  # fmt: skip
        args = [seg, who, key, is_write, instruction, np.zeros(50, dtype=bool), np.zeros((4, 50), dtype=np.int64)]
        args[i] = bad
        with pytest.raises(ValueError):
            COMPILED.site_pairs(*args)
        if i < 5:
            assert not args[5].any() and not args[6].any()  # nothing written


def random_sort_keys(rng: np.random.Generator) -> np.ndarray:
    """uint64 keys of every shape a sort meets: few or many distinct, differing in low bits, high bits or both,
    all equal, at 0 and 2**64 - 1."""
    n = int(rng.choice((0, 1, 2, 7, 300, 5000)))
    shape = int(rng.integers(0, 5))
    if shape == 0:
        return rng.integers(0, 1 << 64, n, dtype=np.uint64, endpoint=False)
    if shape == 1:  # a region in the high bits, an address in the low ones, as racecheck's segment starts
        region = rng.integers(0, 4, n).astype(np.uint64) << np.uint64(rng.choice((38, 44, 60)))
        return region + rng.integers(0, 1 << 15, n).astype(np.uint64)
    if shape == 2:
        return np.full(n, rng.choice(np.array([0, 7, _U64], dtype=np.uint64)), dtype=np.uint64)
    if shape == 3:
        return rng.choice(np.array([0, 1, 1 << 11, 1 << 63, _U64], dtype=np.uint64), n)
    return rng.integers(0, 3, n).astype(np.uint64) << np.uint64(rng.integers(0, 63))


@needs_compiled
@pytest.mark.parametrize("seed", range(60))
def test_compiled_sort_by_is_numpys_stable_argsort(seed: int) -> None:
    """``sort_by`` orders rows (any permutation or selection of the keys', repeated or not) as numpy's stable
    argsort of their keys does, ties in the order given."""
    rng = np.random.default_rng(seed)
    keys = random_sort_keys(rng)
    n = keys.size
    roll = rng.random()
    if not n:
        order = np.zeros(0, dtype=np.int64)
    elif roll < 0.4:
        order = rng.permutation(n).astype(np.int64)
    elif roll < 0.7:
        order = np.arange(n, dtype=np.int64)
    else:
        order = rng.integers(0, n, int(rng.integers(0, 2 * n + 1))).astype(np.int64)
    out = np.full(order.size, -1, dtype=np.int64)
    COMPILED.sort_by(keys, order, out)
    assert np.array_equal(out, order[np.argsort(keys[order], kind="stable")])


@needs_compiled
def test_compiled_sort_by_refuses_what_does_not_fit() -> None:
    keys, order = np.arange(10, dtype=np.uint64)[::-1].copy(), np.arange(10, dtype=np.int64)
    out = np.zeros(10, dtype=np.int64)
    COMPILED.sort_by(keys, order, out)
    assert out.tolist() == list(range(9, -1, -1))
    for i, bad in ((1, np.full(10, 10, np.int64)), (1, np.full(10, -1, np.int64)), (2, out[1:]), (0, keys[::2]),
                   (0, keys.astype(np.uint32)), (1, order.astype(np.int32)), (2, out.astype(np.int32))):  # fmt: skip
        args = [keys, order, np.zeros(10, dtype=np.int64)]
        args[i] = bad
        with pytest.raises((ValueError, BufferError)):
            COMPILED.sort_by(*args)
        if i < 2:
            assert not args[2].any()  # nothing written


@needs_compiled
@pytest.mark.parametrize("seed", range(40))
def test_compiled_placed_in_blocks_is_numpys(seed: int) -> None:
    """Kernel._placed_in_blocks compiled (``placed_nodes``) and by numpy: each access's counts of nodes before it
    (0 or more, on its pipe and on PIPE_S) as node rows, over blocks with and without nodes on a pipe."""
    from types import SimpleNamespace

    rng = np.random.default_rng(seed)
    blocks, n = int(rng.integers(1, 5)), int(rng.integers(0, 300))
    chain = rng.integers(0, blocks * _happens_before.NPIPES, int(rng.integers(0, 200)))
    key = np.sort((chain << _happens_before.POS_BITS) + rng.integers(0, 1 << 20, chain.size)).astype(np.int64)
    access = {name: rng.integers(0, 6, n).astype(np.int32) for name in PLACED_FIELDS}

    def placed(native: object | None) -> tuple[np.ndarray, ...]:
        kernel = SimpleNamespace(
            access=access, block_keys=np.arange(blocks), model=SimpleNamespace(nodes=SimpleNamespace(key=key)),
            mblock=np.random.default_rng(seed + 1).integers(0, blocks, n), native=native,
            pipe=np.random.default_rng(seed + 2).integers(0, _happens_before.NPIPES, n),
        )  # fmt: skip
        racecheck.Kernel._placed_in_blocks(kernel)  # type: ignore[arg-type]
        return kernel.prev, kernel.issuer, kernel.seg, kernel.barrier_no, kernel.pipe_index

    for want, got in zip(placed(None), placed(COMPILED), strict=True):
        assert want.dtype == got.dtype and np.array_equal(want, got)


@needs_compiled
def test_compiled_placed_nodes_refuse_what_does_not_fit() -> None:
    seg, issued = np.array([0, 2], np.int32), np.array([1, 0], np.int32)
    block, pipe, first = np.array([0, 1], np.int64), np.array([3, 1], np.int64), np.arange(8, dtype=np.int64) * 10
    outs = [np.zeros(2, np.int64) for _ in range(3)]
    COMPILED.placed_nodes(seg, issued, block, pipe, first, 4, 0, *outs)  # two blocks of 4 pipes
    assert [x.tolist() for x in outs] == [[-1, 51], [0, -1], [0, 2]]
    for i, bad in ((2, np.array([0, 2], np.int64)), (2, np.array([0, -1], np.int64)), (3, np.array([3, 4], np.int64)),
                   (3, np.array([-1, 0], np.int64)), (4, first[:7]), (0, seg[:1]), (5, outs[0][:1]),
                   (0, seg.astype(np.int64)), (2, block.astype(np.int32)), (7, outs[2].astype(np.int32))):  # fmt: skip
        args: list[object] = [seg, issued, block, pipe, first, 4, 0, *(np.zeros(2, np.int64) for _ in range(3))]
        args[i if i < 5 else i + 2] = bad
        with pytest.raises((ValueError, BufferError)):
            COMPILED.placed_nodes(*args)
    for npipes, s in ((0, 0), (4, 4), (4, -1)):
        with pytest.raises(ValueError):
            COMPILED.placed_nodes(seg, issued, block, pipe, first, npipes, s, *outs)


@needs_compiled
@pytest.mark.parametrize("seed", range(80))
def test_compiled_issuer_is_numpys(seed: int) -> None:
    """``issuer_of`` compiled and by numpy: the last PIPE_S node before each position, asked in node order (as
    block_edges asks), by block then position, in any order, or of blocks whose keys wrap past int64."""
    from types import SimpleNamespace

    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 300))
    blocks = int(rng.integers(1, 4))
    s_pipe = int(_happens_before._S)
    pipe = np.where(rng.random(n) < rng.choice([0.05, 0.3, 1.0]), s_pipe, rng.integers(0, _happens_before.NPIPES, n))
    block = rng.integers(0, blocks, n).astype(np.int64)
    pos = rng.integers(0, 1 << int(rng.choice([4, 20, 35])), n).astype(np.int64)
    key = ((block * _happens_before.NPIPES + pipe) << _happens_before.POS_BITS) + pos
    order = np.argsort(key, kind="stable")
    nodes = SimpleNamespace(pipe=pipe[order].astype(np.int64), key=key[order])
    how = seed % 4
    if how == 0:  # the nodes themselves, in node order
        qblock, qpos = block[order], pos[order]
    elif how == 1:  # by block, then position
        m = int(rng.integers(0, 400))
        qblock, qpos = np.sort(rng.integers(0, blocks + 1, m)), rng.integers(0, 1 << 20, m)
        qpos = qpos[np.lexsort((qpos, qblock))]
    elif how == 2:  # anywhere
        m = int(rng.integers(0, 400))
        qblock, qpos = rng.integers(-1, blocks + 1, m), rng.integers(-(1 << 20), 1 << 36, m)
    else:  # blocks whose key wraps past int64
        m = int(rng.integers(0, 100))
        qblock = rng.choice(np.array([0, 1 << 30, (1 << 62) - 1, -(1 << 62)], dtype=np.int64), m)
        qpos = rng.integers(0, 1 << 36, m)
    qblock, qpos = qblock.astype(np.int64), qpos.astype(np.int64)
    want = _happens_before.issuer_of(nodes, qblock, qpos)  # type: ignore[arg-type]
    got = _happens_before.issuer_of(nodes, qblock, qpos, COMPILED)  # type: ignore[arg-type]
    assert np.array_equal(want, got)


@needs_compiled
def test_compiled_issuer_refuses_what_does_not_fit() -> None:
    s_key, s_rows = np.array([3, 9], dtype=np.int64), np.array([0, 4], dtype=np.int64)
    block, pos, out = np.zeros(3, np.int64), np.array([2, 5, 12], np.int64), np.zeros(3, np.int64)
    COMPILED.issuer(s_key, s_rows, block, pos, 16, 0, 8, out)  # every key on chain 0
    assert out.tolist() == [-1, 0, 4]
    for i, bad in ((0, s_key[::-1].copy()), (1, s_rows[:1]), (3, pos[:2]), (7, out[:2]), (2, block.astype(np.int32)),
                   (7, out.astype(np.int32)), (2, block[::2])):  # fmt: skip
        args: list[object] = [s_key, s_rows, block, pos, 16, 0, 8, np.full(3, 7, np.int64)]
        args[i] = bad
        with pytest.raises((ValueError, BufferError)):
            COMPILED.issuer(*args)
        assert bad is args[7] or args[7].tolist() == [7, 7, 7]  # type: ignore[union-attr]  # nothing written
    for pos_bits, npipes, s in ((0, 16, 0), (63, 16, 0), (2, 0, 0), (2, 16, 16), (2, 16, -1)):
        with pytest.raises(ValueError):
            COMPILED.issuer(s_key, s_rows, block, pos, npipes, s, pos_bits, out)


@needs_compiled
@pytest.mark.parametrize("seed", range(40))
def test_the_reference_cut_is_the_same_compiled_and_by_numpy(seed: int) -> None:
    """Where racecheck cuts a batch for its reference block (after the first BLOCK_FINISH, unless that is the last
    record): the compiled ``first_of_kind`` on a contiguous batch, numpy's mask on a strided one, and the rule."""
    rng = np.random.default_rng(seed)
    n = int(rng.integers(0, 200))
    events = hostile_records(rng, n)
    events["kind"][events["kind"] == EventKind.BLOCK_FINISH] = EventKind.READ
    finishes = np.sort(rng.choice(n, size=min(n, seed % 4), replace=False)) if n else np.zeros(0, dtype=np.int64)
    if seed % 5 == 0 and n:
        finishes = np.array([n - 1])  # the last record: no cut
    events["kind"][finishes] = EventKind.BLOCK_FINISH
    detector = make_detector("racecheck")
    assert isinstance(detector, racecheck.Racecheck)
    detector.native = COMPILED
    detector.columns = HeldColumns(COMPILED)
    strided = np.repeat(events, 2)[::2]
    assert n < 2 or not strided.flags.c_contiguous
    expected = int(finishes[0]) + 1 if finishes.size and finishes[0] + 1 < n else 0
    assert detector._reference_cut(events) == detector._reference_cut(strided) == expected
    assert COMPILED.first_of_kind(events, int(EventKind.BLOCK_FINISH)) == (int(finishes[0]) if finishes.size else -1)


@needs_compiled
def test_compiled_first_of_kind_refuses_what_does_not_fit() -> None:
    events = make_events(kind=np.full(3, EventKind.WRITE))
    for kind in (-1, 256):
        with pytest.raises(ValueError):
            COMPILED.first_of_kind(events, kind)
    for bad in (events.view(np.uint8)[:-1], np.repeat(events, 2)[::2]):
        with pytest.raises((ValueError, BufferError)):
            COMPILED.first_of_kind(bad, int(EventKind.WRITE))


@needs_compiled
@pytest.mark.parametrize("seed", range(60))
def test_compiled_key_steps_are_numpys(seed: int) -> None:
    """``key_steps`` (whether a batch's block keys only go up, and where its last block begins) compiled and by
    numpy: blocks in order, one block, a block coming back, keys at 0 and 2**32 - 1."""
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 700))  # spans of 64 keys compared at once, and the keys after the last whole one
    keys = np.sort(rng.choice(np.array([0, 1, 2, 7, (1 << 24) - 1, (1 << 32) - 1], dtype=np.uint32), n))
    if seed % 3 == 0:
        keys = np.full(n, keys[0], dtype=np.uint32)
    elif seed % 3 == 1 and n > 1:  # one block's key comes back after a later one, or the keys go down
        i = int(rng.integers(1, n))
        keys[i:] = keys[int(rng.integers(0, i))] if seed % 2 else keys[i:][::-1]
    got = _race_columns.key_steps(keys, COMPILED)
    assert got == _race_columns.key_steps(keys) and isinstance(got[0], bool) and isinstance(got[1], int)


@needs_compiled
def test_compiled_key_steps_refuse_what_does_not_fit() -> None:
    assert COMPILED.key_steps(np.array([1, 2, 2, 5, 5], dtype=np.uint32)) == (True, 3)
    assert COMPILED.key_steps(np.array([9, 2], dtype=np.uint32)) == (False, 1)
    assert COMPILED.key_steps(np.zeros(0, dtype=np.uint32)) == (True, 0)
    for bad in (np.arange(4, dtype=np.int64), np.arange(8, dtype=np.uint32)[::2], np.arange(4, dtype=np.uint16)):
        with pytest.raises((ValueError, BufferError)):
            COMPILED.key_steps(bad)


@needs_compiled
@pytest.mark.parametrize("seed", range(60))
def test_compiled_by_rank_is_numpys_stable_argsort(seed: int) -> None:
    """``_by_rank`` with the compiled inverse: ranks 0 .. m - 1 each once, or one repeated, missing, negative or past
    the end (then numpy's argsort)."""
    rng = np.random.default_rng(seed)
    m = int(rng.integers(0, 400))
    rank = rng.permutation(m).astype(np.int64)
    if m and seed % 4:
        i = int(rng.integers(0, m))
        rank[i] = rng.choice([-1, m, m + 5, int(rank[int(rng.integers(0, m))]), -(1 << 63), (1 << 63) - 1])
    got = _race_pairs._by_rank(rank, COMPILED)
    assert np.array_equal(got, np.argsort(rank, kind="stable"))
    assert np.array_equal(got, _race_pairs._by_rank(rank))


def random_ranges(rng: np.random.Generator, n: int, tiled: bool) -> tuple[np.ndarray, np.ndarray]:
    """``n`` ranges [lo, hi): tiles, each equal to or apart from every other (``tiled``), or any, touching, nested
    and overlapping; near 2**64 now and then."""
    base = np.uint64(rng.choice([0, 1 << 40, (1 << 64) - (1 << 20)]))
    if tiled:
        tiles = int(rng.integers(1, 40))
        size = int(rng.integers(1, 64))
        gap = int(rng.integers(0, 3)) * size  # tiles that touch, or lie apart
        tile = rng.integers(0, tiles, n).astype(np.uint64)
        lo = base + tile * np.uint64(size + gap)
        return lo, lo + np.uint64(size)
    lo = base + rng.integers(0, 200, n).astype(np.uint64)
    return lo, lo + rng.integers(1, 60, n).astype(np.uint64)


@needs_compiled
@pytest.mark.parametrize("seed", range(80))
def test_compiled_segments_are_numpys(seed: int) -> None:
    """``_segments`` compiled (tiles in one pass, else numpy's cuts) and numpy's give the same incidences and
    segments, ranks a permutation or not."""
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 300))
    lo, hi = random_ranges(rng, n, tiled=seed % 3 != 0)
    if seed % 5 == 0:  # one tile ends elsewhere: it overlaps its equal-start twin
        hi[int(rng.integers(0, n))] += np.uint64(1)
    owner = rng.permutation(n).astype(np.int64) if seed % 2 else np.arange(n, dtype=np.int64)
    rank = rng.permutation(n).astype(np.int64) if seed % 4 else rng.integers(0, n, n).astype(np.int64)
    got = _race_pairs._segments(lo, hi, owner, rank, n, lambda more: None, COMPILED)
    expected = _race_pairs._segments(lo, hi, owner, rank, n, lambda more: None, None)
    for a, b in zip(got, expected, strict=True):
        assert a.dtype == b.dtype and np.array_equal(a, b)


@needs_compiled
def test_compiled_segments_and_by_rank_refuse_what_does_not_fit() -> None:
    lo = np.array([0, 0, 8], dtype=np.uint64)
    hi, owner, order = lo + np.uint64(8), np.array([5, 6, 7], dtype=np.int64), np.arange(3, dtype=np.int64)
    outs = [np.zeros(3, dtype=np.int64), np.zeros(3, dtype=np.int64), np.zeros(3, np.uint64), np.zeros(3, np.uint64)]
    assert COMPILED.segments(lo, hi, owner, order, *outs) == 2
    assert [x.tolist() for x in outs] == [[0, 0, 1], [5, 6, 7], [0, 8, 0], [8, 16, 0]]
    assert COMPILED.segments(lo, hi + np.uint64(1), owner, order, *outs) == -1  # [0, 9) overlaps [8, 17)
    for i, bad in ((3, np.full(3, 3, np.int64)), (3, np.full(3, -1, np.int64)), (0, lo[:2]), (2, owner[:2]),
                   (4, outs[0][:2]), (7, outs[3][1:]), (1, hi.astype(np.uint32)), (3, order.astype(np.int32)),
                   (5, outs[1].astype(np.int32)), (0, lo[::2])):  # fmt: skip
        args = [lo, hi, owner, order, *(np.zeros(3, dtype=x.dtype) for x in outs)]
        args[i] = bad
        with pytest.raises((ValueError, BufferError)):
            COMPILED.segments(*args)
        assert not any(a.any() for a in args[4:] if a.size == 3 and a is not bad)  # nothing written
    out = np.zeros(3, dtype=np.int64)
    for rank, bad_out in ((np.arange(3, dtype=np.int64), out[:2]), (np.arange(3, dtype=np.int32), out),
                          (np.arange(3, dtype=np.int64), out.astype(np.int32))):  # fmt: skip
        with pytest.raises((ValueError, BufferError)):
            COMPILED.by_rank(rank, bad_out)


@needs_compiled
@pytest.mark.parametrize("seed", range(80))
def test_compiled_fifo_match_is_numpys(seed: int) -> None:
    """Sets and waits of a few keys (negative too), positions tied or not, rows in any order, repeated or not:
    the compiled match pairs and leaves unmatched what numpy's does, in its order, with and without the free
    first wait."""
    rng = np.random.default_rng(seed)
    n = int(rng.choice((1, 2, 5, 40, 500)))
    key = rng.choice(np.array([-(1 << 62), -3, 0, 1, 7, 1 << 40], dtype=np.int64)[: int(rng.integers(1, 7))], n)
    pos = rng.integers(0, int(rng.choice((2, n + 1, 1 << 50))), n).astype(np.int64)
    sets, waits = (rng.integers(0, n, int(rng.integers(0, n + 1))).astype(np.int64) for _ in range(2))
    if rng.random() < 0.5:  # rows each once, as block_edges gives them
        rows = rng.permutation(n)
        cut = int(rng.integers(0, n + 1))
        sets, waits = np.sort(rows[:cut]).astype(np.int64), np.sort(rows[cut:]).astype(np.int64)
    for skip in (False, True):
        want = _happens_before._fifo_match(key, pos, sets, waits, skip_first_wait=skip)
        got = _happens_before._fifo_match(key, pos, sets, waits, skip_first_wait=skip, native=COMPILED)
        for w, g in zip(want, got, strict=True):
            assert np.array_equal(w, g), (skip, w, g)


@needs_compiled
def test_compiled_fifo_match_refuses_what_does_not_fit() -> None:
    key, pos = np.array([1, 1, 2], np.int64), np.array([0, 1, 2], np.int64)
    sets, waits = np.array([0], np.int64), np.array([1, 2], np.int64)
    out = np.zeros((3, 2), np.int64)
    assert COMPILED.fifo_match(key, pos, sets, waits, False, out) == (1, 1)
    assert out[:, :1].ravel().tolist() == [0, 1, 2]
    for i, bad in ((0, key[:2]), (1, pos[:2]), (2, np.array([3], np.int64)), (3, np.array([-1], np.int64)),
                   (4, np.zeros((3, 1), np.int64)), (0, key.astype(np.int32)), (4, out.astype(np.int32))):  # fmt: skip
        args: list[object] = [key, pos, sets, waits, False, np.zeros((3, 2), np.int64)]
        args[i if i < 4 else 5] = bad
        with pytest.raises(ValueError):
            COMPILED.fifo_match(*args)


def random_patterns(rng: np.random.Generator, n: int, *, scattered: bool) -> tuple[Columns, np.ndarray]:
    """Access columns of every pattern ``ranges`` meets: one block, contiguous rows that touch or leave gaps,
    strides 0 and 1, zero counts, fields at their bounds, addresses near 2**64; scattered blocks only if asked."""
    def pick(values: tuple[int, ...], dtype: type) -> np.ndarray:
        return np.array(values, dtype=dtype)[rng.integers(0, len(values), n)]

    columns = Columns({
        "address": rng.choice(np.array([0, 0x1000, 1 << 40, _U64 - 0x100, _U64], dtype=np.uint64), n)
        + rng.integers(0, 64, n).astype(np.uint64) * np.uint64(rng.integers(0, 2)),
        "block_size": pick((0, 1, 32, 256, 0xFFFFFFFF), np.uint32),
        "block_num": pick((0, 1, 2, 8, 0xFFFF), np.uint16),
        "block_stride": pick((0, 1) + ((2, 8, 0xFFFF) if scattered else ()), np.uint16),
        "repeat": pick((0, 1, 2, 3, 64, 0xFFFF), np.uint16),
        "repeat_stride": pick((0, 1, 2, 8, 9, 0xFFFF), np.uint16),
    })  # fmt: skip
    columns["repeat"][2:][columns["repeat"][2:] == 0xFFFF] = 64  # rows of 65 535 repeats: two accesses at most
    many = (columns["block_num"] > 1) & (columns["block_stride"] > 1)  # scattered: numpy lists every block
    columns["block_num"][many] = np.minimum(columns["block_num"][many], 8)
    columns["repeat"][many] = np.minimum(columns["repeat"][many], 3)
    return columns, extents(columns)


def range_inputs(columns: Columns, ext: np.ndarray) -> list[np.ndarray]:
    """The compiled ``ranges``' column inputs, in its order."""
    names = ("address", "ext", "block_size", "block_num", "block_stride", "repeat", "repeat_stride")
    return [ext if name == "ext" else np.ascontiguousarray(columns[name]) for name in names]


@needs_compiled
@pytest.mark.parametrize("seed", range(60))
def test_compiled_ranges_are_numpys(seed: int) -> None:
    """The compiled ``ranges`` lists what numpy's lists, piece for piece in its order, for any rows asked (all,
    some, repeated, out of order); an access with scattered blocks leaves the whole call to numpy."""
    rng = np.random.default_rng(seed)
    n = int(rng.choice((0, 1, 5, 300)))
    scattered = rng.random() < 0.3
    columns, ext = random_patterns(rng, n, scattered=scattered)
    index = None if rng.random() < 0.3 or not n else rng.integers(0, n, int(rng.integers(0, 2 * n))).astype(np.int64)
    want = _patterns.ranges(columns, ext, index)
    got = _patterns.ranges(columns, ext, index, COMPILED)
    for w, g in zip(want, got, strict=True):
        assert w.dtype == g.dtype and np.array_equal(w, g)
    rows = np.arange(n) if index is None else index
    listed = COMPILED.ranges(*range_inputs(columns, ext), rows, None, None, None)
    assert (listed < 0) == bool(((columns["block_num"][rows] > 1) & (columns["block_stride"][rows] > 1)).any())


@needs_compiled
def test_compiled_ranges_refuse_what_does_not_fit() -> None:
    columns, ext = random_patterns(np.random.default_rng(3), 10, scattered=False)
    fields = range_inputs(columns, ext)
    index = np.arange(10, dtype=np.int64)
    pieces = COMPILED.ranges(*fields, index, None, None, None)
    outputs = [np.zeros(pieces, np.int64), np.zeros(pieces, np.uint64), np.zeros(pieces, np.uint64)]
    COMPILED.ranges(*fields, index, *outputs)
    for i, bad in ((0, fields[0][1:]), (2, fields[2].astype(np.uint16)), (3, fields[3][:-1]), (7, index + 1),
                   (7, index - 1), (8, outputs[0][1:]), (9, outputs[1][:-1]),
                   (10, np.zeros(pieces, np.uint32))):  # fmt: skip
        args = [*fields, index, *(np.zeros_like(o) for o in outputs)]
        args[i] = bad
        with pytest.raises(ValueError):
            COMPILED.ranges(*args)
        assert not any(o.any() for o in args[8:] if o is not bad)  # nothing written


def random_sync_events(rng: np.random.Generator, m: int, *, in_order: bool) -> tuple[np.ndarray, ...]:
    """``make_nodes``' inputs: sync events of every kind (and kinds that make no node) on every pipe, PIPE_ALL
    barriers, soft SyncAlls, on a few blocks, in block-sorted program order or not; members of PIPE_ALL's barrier
    (none, some, all)."""
    kinds = np.array([k for k in _KINDS if k >= EventKind.SET_FLAG] + [2, 255], dtype=np.uint8)
    kind = kinds[rng.integers(0, kinds.size, m)]
    pipe = rng.integers(0, 12, m).astype(np.int64)
    pipe[rng.random(m) < 0.2] = int(racecheck.Pipe.ALL)
    dst_pipe = rng.integers(0, 12, m).astype(np.int64)
    block = np.sort(rng.integers(0, 4, m)).astype(np.int64)
    seq = np.sort(rng.choice(3 * m + 1, m, replace=False)).astype(np.int64)
    if not in_order:
        shuffle = rng.permutation(m)
        block, seq = block[shuffle], seq[shuffle]
    members = np.sort(rng.choice(_happens_before._ALL_PIPES, int(rng.integers(0, 11)), replace=False))
    return kind, pipe, dst_pipe, block, seq, members.astype(np.int64)


@needs_compiled
@settings(max_examples=300, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), m=st.sampled_from([0, 1, 5, 60, 400]), in_order=st.booleans())
def test_compiled_make_nodes_are_numpys(seed: int, m: int, in_order: bool) -> None:
    """The same nodes, field by field and dtype, in program order (compiled) or not (numpy's sort, told so)."""
    args = random_sync_events(np.random.default_rng(seed), m, in_order=in_order)
    native, reference = (_happens_before.make_nodes(*args, native=module) for module in (COMPILED, None))
    for name in _happens_before._NODE_FIELDS:
        a, b = getattr(native, name), getattr(reference, name)
        assert a.dtype == b.dtype and np.array_equal(a, b), name


@needs_compiled
def test_compiled_make_nodes_sort_by_count_in_program_order() -> None:
    """Events in program order are made in one pass; out of order, or with keys past POS_BITS, it says so and
    numpy's sort runs."""
    rng = np.random.default_rng(8)
    made = {True: 0, False: 0}
    for in_order in (True, False):
        for _ in range(20):
            args = random_sync_events(rng, 200, in_order=in_order)
            n = len(_happens_before.make_nodes(*args).key)
            made[in_order] += bool(_happens_before._make_nodes_native(COMPILED, *args, n))
    assert made == {True: 20, False: 0}
    kind, pipe, dst_pipe, block, seq, members = random_sync_events(rng, 200, in_order=True)
    seq[100:] += 1 << 40  # positions past POS_BITS: keys of one chain pass into the next
    n = len(_happens_before.make_nodes(kind, pipe, dst_pipe, block, seq, members).key)
    assert _happens_before._make_nodes_native(COMPILED, kind, pipe, dst_pipe, block, seq, members, n) is None


@needs_compiled
def test_compiled_make_nodes_refuse_what_does_not_fit() -> None:
    args = random_sync_events(np.random.default_rng(1), 50, in_order=True)
    n = len(_happens_before.make_nodes(*args).key)
    kind, pipe, dst_pipe, block, seq, members = args

    def call(*inputs: np.ndarray, n: int = n, tables: np.ndarray = _happens_before._NODE_TABLES,
             constants: np.ndarray = _happens_before._NODE_CONSTANTS, kind_out: type = np.uint8) -> object:
        outs = [np.empty(n, dtype=kind_out if name == "kind" else np.int64) for name in _happens_before._NODE_FIELDS]
        return COMPILED.make_nodes(*inputs, tables, constants, *outs)

    assert call(*args)
    for bad in ({"n": n + 1}, {"n": n - 1}, {"tables": _happens_before._NODE_TABLES[:-1]},
                {"constants": _happens_before._NODE_CONSTANTS[:-1]}, {"kind_out": np.int64}):  # fmt: skip
        with pytest.raises(ValueError):
            call(*args, **bad)
    for i, short in enumerate((kind[1:], pipe[1:], dst_pipe[1:], block[1:], seq[1:])):
        inputs = list(args)
        inputs[i] = short
        with pytest.raises(ValueError):
            call(*inputs)
    with pytest.raises(ValueError):
        call(kind, pipe.astype(np.int32), dst_pipe, block, seq, members)
    constants = _happens_before._NODE_CONSTANTS.copy()
    constants[-1] = 63  # POS_BITS past what a shift of int64 takes
    with pytest.raises(ValueError):
        call(*args, constants=constants)
