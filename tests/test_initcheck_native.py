"""initcheck's compiled pass (sanitizerd/native/_initcheck.c) against numpy's path: the same findings and the same
state, batch by batch, on random and hostile streams; and ``scan`` itself against a numpy model of what it answers.

Both paths are named explicitly (``Initcheck(context, native=...)``), whatever SANITIZERD_NATIVE says; the tests
skip where the module was not built (CI's first pass, SANITIZERD_NATIVE=1, requires it)."""

from __future__ import annotations

from types import ModuleType
from unittest.mock import patch

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from client_shim.events import EventKind, Space, accesses, make_events
from sanitizerd import native
from sanitizerd.chips import chip_named
from sanitizerd.detectors import initcheck as initcheck_module
from sanitizerd.detectors._intervals import SMALL_SET, IntervalSet, merge_ranges
from sanitizerd.detectors._patterns import extents, ranges
from sanitizerd.detectors._runs import CHUNK, piece_bounds
from sanitizerd.detectors.base import KernelLaunch, SessionContext
from sanitizerd.detectors.initcheck import WIDE_ACCESS, Initcheck, composite
from sanitizerd_protocol.messages import Config, HostOp
from sanitizerd_protocol.model import Finding
from sanitizerd_protocol.records import EVENT_DTYPE, FLAG_CLAIM, BlockType

U64 = np.uint64
TOP = (1 << 64) - 1
SLICE = 2048  # initcheck._SLICE, patched with the module's where a test makes it small
GM = 0x12C0_C000_0000
READ, WRITE = EventKind.READ, EventKind.WRITE


@pytest.fixture(scope="module")
def compiled() -> ModuleType:
    module = native.load("_initcheck") if native.mode() != "reference" else None
    if module is None:
        try:
            import sanitizerd.native._initcheck as module  # the reference pass runs these tests too
        except ImportError:
            pytest.skip("sanitizerd.native._initcheck is not built")
    return module


def context() -> SessionContext:
    config = Config(tools=["initcheck"])
    return SessionContext(job="j", session=1, pid=2, device=0, chip=chip_named("910B1"), config=config)


# --- hostile and tame values for each field -------------------------------------------------------------------------

HOSTILE_ADDRESSES = [0, 32, 64, 96, 256, 480, 1 << 42, (1 << 42) - 32, (1 << 48) - 1, (1 << 59) - 32, (1 << 59) - 1,
                     1 << 59, (1 << 60) + 7, TOP - 31, TOP - 1, TOP]  # fmt: skip
ADDRESSES = st.one_of(
    st.sampled_from(HOSTILE_ADDRESSES),
    st.integers(0, 15).map(lambda k: GM + 32 * k),
    st.integers(0, 31).map(lambda k: 16 * k),
    st.integers(0, TOP),
)
TAME = st.fixed_dictionaries(
    {
        "block_size": st.sampled_from([1, 16, 32, 64]),
        "block_num": st.sampled_from([0, 1, 2, 4, 8, 8]),
        "block_stride": st.sampled_from([0, 1, 1, 2, 3]),  # 2, 3: strided blocks, one piece each
        "repeat": st.sampled_from([0, 1, 1, 1, 2]),
        "repeat_stride": st.sampled_from([0, 1, 2, 8]),
    }
)
WILD = st.fixed_dictionaries(
    {
        "block_size": st.sampled_from([0, 1, 32, 4096, (1 << 32) - 1]),
        "block_num": st.sampled_from([0, 1, 2, 8, 64, 65, 255, 65535]),
        "block_stride": st.sampled_from([0, 1, 2, 65535]),
        "repeat": st.sampled_from([0, 1, 2, 64, 255, 65535]),
        "repeat_stride": st.sampled_from([0, 1, 8, 16, 65535]),
    }
)
KINDS = st.sampled_from([READ, READ, READ, WRITE, WRITE, WRITE, EventKind.BLOCK_FINISH, EventKind.SET_FLAG,
                         EventKind.SIMT_START])  # fmt: skip
SPACES = st.sampled_from([Space.GM, Space.GM, Space.UB, Space.UB, Space.L1, Space.PRIVATE, Space.FB, 9, 200])


# A tame record's address: of the pool the prelude defines, or now and then a hostile one (near 2**59, past the
# 42 bits of an on-chip key, near 2**64), with a tame pattern, so that the compiled pass meets those too.
EDGES = [(1 << 42) - 32, 1 << 42, (1 << 48) - 32, (1 << 59) - 32, (1 << 59) - 1, 1 << 59, (1 << 59) + 64,
         (1 << 60) + 7, TOP - 31, TOP - 1, TOP]  # fmt: skip
TAME_ADDRESSES = st.one_of(
    st.integers(0, 15).map(lambda k: GM + 32 * k), st.integers(0, 15).map(lambda k: 32 * k), st.sampled_from(EDGES)
)


@st.composite
def records(draw: st.DrawFn, wild: bool) -> dict[str, int]:
    """One record: a tame one (a kernel's own accesses, mostly live and keyed, often of bytes written before),
    or a wild one (every field from its hostile values too)."""
    fields = dict(draw(WILD if wild else TAME))
    fields.update(
        kind=draw(KINDS if wild else st.sampled_from([READ, READ, WRITE, WRITE, EventKind.SET_FLAG])),
        space=draw(SPACES if wild else st.sampled_from([Space.GM, Space.UB, Space.L1])),
        address=draw(ADDRESSES if wild else TAME_ADDRESSES),
        block_type=draw(st.sampled_from([0, 0, 1, 2, 3, 255] if wild else [0, 0, 1])),
        block_id=draw(st.sampled_from([0, 0, 1, 7, 65535] if wild else [0, 1])),
        flags=draw(st.sampled_from([0, 0, 0, FLAG_CLAIM, 1] if wild else [0, 0, 0, 0, FLAG_CLAIM])),
        thread=draw(st.sampled_from([0, 0, 0, 1])),
    )
    if not wild and fields["space"] == Space.GM and fields["address"] < 512:
        fields["address"] |= GM
    return fields


@st.composite
def batches(draw: st.DrawFn) -> np.ndarray:
    # Most batches tame, so that the compiled pass decides many; a wild batch mixes in hostile records.
    wild = draw(st.booleans()) and draw(st.booleans())
    rows = draw(st.lists(st.one_of(records(False), records(True)) if wild else records(False), max_size=24))
    if draw(st.booleans()):  # reads of what the batch wrote earlier (the in-order recheck's case), now and then
        for at, row in enumerate(rows):
            earlier = [w for w in rows[:at] if w["kind"] == WRITE]
            if row["kind"] == READ and earlier and draw(st.integers(0, 3)):
                copied = draw(st.sampled_from(earlier))
                row.update({k: v for k, v in copied.items() if k not in ("kind", "flags", "thread")})
    events = np.zeros(len(rows), dtype=EVENT_DTYPE)
    for i, row in enumerate(rows):
        for name, value in row.items():
            events[name][i] = value
    events["serial"] = np.arange(1, events.size + 1)
    events["pc"] = events["serial"] % 5  # a few sites, so that findings fold
    return events


HOST_OPS = st.builds(
    HostOp,
    op=st.sampled_from(["malloc", "free", "store", "memset", "memcpy"]),
    address=st.sampled_from([GM, GM + 64, GM + 256, (1 << 48) - 64, (1 << 59) - 32]),
    size=st.sampled_from([0, 32, 100, 512, 4096]),
    source=st.sampled_from(["acl", "extra"]),
)
STEPS = st.lists(
    st.one_of(batches(), HOST_OPS, st.sampled_from(["kernel_end", "kernel_begin"])), min_size=1, max_size=14
)


def prelude() -> list[object]:
    """GM of the tame pool stored, and UB and L1 of blocks 0 and 1 written: later tame reads are mostly defined."""
    written = [accesses(WRITE, space, 0, 512, block_id=block, block_type=block_type)
               for space in (Space.UB, Space.L1) for block in (0, 1) for block_type in (0, 1)]  # fmt: skip
    written += [accesses(WRITE, space, edge, 64) for space in (Space.GM, Space.UB) for edge in EDGES]
    stores = [HostOp(op="malloc", address=GM, size=512), HostOp(op="store", address=GM, size=512)]
    return [*stores, np.concatenate(written)]


def state(detector: Initcheck) -> tuple[object, ...]:
    """Everything a later batch's answer depends on, representation included (``len`` bounds the ranges)."""
    defined = detector.defined
    return (
        defined._starts.tolist(), defined._ends.tolist(), defined._pending_starts.tolist(),
        defined._pending_ends.tolist(), len(defined), detector.given_up, detector.unkeyed,
        sorted(detector.allocations.items()), dict(detector.simt_dims.dims),
    )  # fmt: skip


def drive(detector: Initcheck, steps: list[object]) -> tuple[list[Finding], list[tuple[object, ...]]]:
    found: list[Finding] = []
    states = []
    detector.kernel_begin(KernelLaunch(kernel=1, name="k", block_dim=8, kernel_type="aiv"))
    for step in steps:
        if isinstance(step, np.ndarray):
            detector.check(step)
        elif isinstance(step, HostOp):
            found += detector.host_op(step)
        elif step == "kernel_end":
            found += detector.kernel_end()
        else:
            detector.kernel_begin(KernelLaunch(kernel=2, name="k2", block_dim=8, kernel_type="aiv"))
        states.append(state(detector))
    return found + detector.finish(), states


def both_ways(compiled: ModuleType, steps: list[object]) -> None:
    reference = drive(Initcheck(context(), native=None), steps)
    built = drive(Initcheck(context(), native=compiled), steps)
    assert built[1] == reference[1]
    assert built[0] == reference[0]


class TestWholeDetector:
    @settings(max_examples=300, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])
    @given(
        steps=STEPS,
        defined=st.booleans(),
        bound=st.sampled_from([None, None, 3, 12]),
        slice_events=st.sampled_from([2048, 1, 3]),
        chunk=st.sampled_from([CHUNK, CHUNK, 16, 5]),
        kept=st.sampled_from([1024, 1]),
    )
    def test_random_and_hostile_streams(
        self,
        compiled: ModuleType,
        steps: list[object],
        defined: bool,
        bound: int | None,
        slice_events: int,
        chunk: int,
        kept: int,
    ) -> None:
        """Every step leaves both paths with the same state, and the session with the same findings; with the
        bound on ranges made small, they give up at the same batch; with the recheck's slices and the groups made
        small, their calls fall alike."""
        steps = prelude() + steps if defined else steps
        with (
            patch.object(initcheck_module, "MAX_TRACKED_RANGES", bound or initcheck_module.MAX_TRACKED_RANGES),
            patch.object(initcheck_module, "_SLICE", slice_events),
            patch.object(initcheck_module, "CHUNK", chunk),
            patch.object(initcheck_module, "NATIVE_WRITTEN_RANGES", kept),
        ):
            both_ways(compiled, steps)

    @pytest.mark.parametrize("chunk", [CHUNK, 40, 7])
    def test_steady_kernel_with_groups_and_findings(self, compiled: ModuleType, chunk: int) -> None:
        """A kernel's tiles over several batches: UB rewritten and reread, GM written fresh, a few reads of
        nothing and a block finishing; with CHUNK made small, a batch is checked in groups."""
        parts = []
        for tile in range(60):
            block = tile % 4
            gm = GM + 512 * tile
            parts += [
                accesses(WRITE, Space.UB, 0, 32, block_num=8, block_id=block),
                accesses(READ, Space.UB, 0, 32, block_num=4, repeat=2, repeat_stride=4, block_id=block),
                accesses(WRITE, Space.GM, gm, 32, block_num=8, block_id=block),
                accesses(READ, Space.GM, gm if tile % 7 else gm + 4096 * 64, 32, block_num=8, block_id=block),
            ]
            if tile % 13 == 12:
                parts.append(make_events(kind=EventKind.BLOCK_FINISH, block_id=block))
        events = np.concatenate(parts)
        events["serial"] = np.arange(1, events.size + 1)
        steps: list[object] = [HostOp(op="malloc", address=GM, size=1 << 20)]
        steps += [events[lo : lo + 37] for lo in range(0, events.size, 37)]
        steps += [HostOp(op="free", address=GM, size=0), "kernel_end"]
        with patch.object(initcheck_module, "CHUNK", chunk):
            both_ways(compiled, steps)

    def test_the_compiled_pass_decides_steady_batches(self, compiled: ModuleType) -> None:
        """Not a vacuous comparison: batches whose reads were defined earlier, before the batch or in it, are
        answered by the compiled pass; a read of bytes nothing wrote is left to numpy's path, which reports it."""
        detector = Initcheck(context(), native=compiled)
        detector.kernel_begin(KernelLaunch(kernel=1, name="k", block_dim=8, kernel_type="aiv"))
        write = accesses(WRITE, Space.UB, 0, 32, block_num=8)
        read = accesses(READ, Space.UB, 0, 32, block_num=8)
        assert not detector._check_native(np.concatenate([read, write]))  # read before the write: a finding
        assert detector._check_native(np.concatenate([write, read]))  # read after a write of its batch
        assert detector._check_native(np.concatenate([read, write, read]))


# --- scan against a numpy model of its answer ------------------------------------------------------------------------


def model_scan(
    events: np.ndarray, defined: IntervalSet, check: bool, cap: int = 1024, slots: int = 0
) -> tuple[int, int, list[tuple[int, int, int, int]]]:
    """(status, unkeyed, ranges listed) as scan answers them, from the numpy path's own pieces and a replay of
    the batch in order (reads against the set and the batch's earlier writes)."""
    kind = events["kind"]
    ext = extents(events)
    live = (ext > 0) & (kind <= WRITE) & ((events["flags"] & FLAG_CLAIM) == 0)
    keyed = np.isin(events["space"], list(Space)) & np.isin(events["block_type"], list(BlockType))
    unkeyed = int((live & ~keyed).sum())
    live &= keyed
    repeats = (np.maximum(events["repeat"], 1).astype(np.int64) - 1) * events["repeat_stride"]
    blocks = (np.maximum(events["block_num"], 1).astype(np.int64) - 1) * events["block_stride"]
    units_max = int((repeats + blocks + 1).max(initial=0))
    one_row = int(events["repeat"].max(initial=0)) <= 1 and int(events["block_stride"].max(initial=0)) <= 1
    saturates = not one_row and units_max * int(events["block_size"].max(initial=0)) >= 1 << 62
    if saturates:
        return 2, 0, []
    index = np.flatnonzero(live)
    if not index.size:
        return 0, unkeyed, []
    pieces = piece_bounds(events, ext, index, exact_above=WIDE_ACCESS)
    if (pieces > CHUNK).any():  # an access checked alone, in closed form (_check_huge)
        return 2, 0, []
    if not check:
        return 1, unkeyed, []
    # Each access's pieces in the pass's order (repeat by repeat, block by block), checked against ranges().
    listed: list[tuple[int, int, int]] = []
    for at in index.tolist():
        e = events[at]
        address, size, count, stride = (int(e[name]) for name in ("address", "block_size", "block_num", "block_stride"))
        repeat, repeat_stride = int(e["repeat"]), int(e["repeat_stride"])
        row_is_range = count <= 1 or stride <= 1
        row_length = size if count <= 1 or stride == 0 else count * size
        if row_is_range and (repeat <= 1 or repeat_stride * size <= row_length):
            listed.append((at, address, min(address + int(ext[at]), TOP)))
            continue
        for r in range(repeat):
            for i in [0] if row_is_range else range(count):
                start = min(address + (r * repeat_stride + i * stride) * size, TOP)
                listed.append((at, start, min(start + (row_length if row_is_range else size), TOP)))
    columns = zip(*listed, strict=True)
    event, start, stop = (np.array(column, dtype) for column, dtype in zip(columns, (np.intp, U64, U64), strict=True))
    numpy_pieces = ranges(events, ext, index)
    assert set(listed) == set(zip(*(part.tolist() for part in numpy_pieces), strict=True))  # as sets: repeats
    group_of = dict(zip(index.tolist(), (np.zeros(index.size, np.int64) if pieces.sum() <= CHUNK
                                         else np.cumsum(pieces) // CHUNK).tolist(), strict=True))  # fmt: skip
    keys = composite(events["space"][event], events["block_type"][event], events["block_id"][event], start)
    stops = keys + (stop - start)
    inside = defined.covered(keys, stops)
    is_read = kind[event] == READ
    group = np.array([group_of[e] for e in event.tolist()], np.int64)
    fresh = ~is_read & (stops > keys) & (inside != stops - keys)
    if int(fresh.sum()) > max(events.size, slots):  # more than the pass lists
        return 2, 0, []
    set_lo = np.concatenate((defined._starts, defined._pending_starts))
    set_hi = np.concatenate((defined._ends, defined._pending_ends))

    def covers(writes: list[int], at: int) -> bool:
        union = IntervalSet(np.concatenate((set_lo, keys[writes])), np.concatenate((set_hi, stops[writes])))
        return int(union.covered(keys[at : at + 1], stops[at : at + 1])[0]) == int(stops[at] - keys[at])

    doubts: list[tuple[int, int]] = []
    rechecked = False
    written: list[int] = []
    full_at = None  # writes listed when the pass's own ranges first passed ``cap`` (then they answer no more)
    for k in range(event.size):
        if fresh[k]:
            written.append(k)
            if full_at is None and merge_ranges(keys[written], stops[written])[0].size > cap:
                full_at = len(written)
            continue
        if not is_read[k] or inside[k] == stops[k] - keys[k]:
            continue
        rechecked = True
        earlier_groups = [w for w in written if group[w] < group[k]]
        full = full_at is not None
        if full_at is not None and full_at <= len(earlier_groups):
            return 2, 0, []
        if not (earlier_groups and covers(earlier_groups, k)):
            if (int(group[k]), int(event[k]) // SLICE) not in doubts:  # a slice is visited once
                doubts.append((int(group[k]), int(event[k]) // SLICE))
            if full or not covers(written, k):
                return 2, 0, []
    if rechecked and pieces.sum() == CHUNK:
        return 2, 0, []
    listed = []
    calls = [sum(1 for g, sl in doubts if g == group[w] and sl <= event[w] // SLICE) for w in written]
    for g, call in sorted({(int(group[w]), c) for w, c in zip(written, calls, strict=True)}):
        mine = [w for w, c in zip(written, calls, strict=True) if group[w] == g and c == call]
        lo, hi = merge_ranges(keys[mine], stops[mine])
        listed += [(a, b, g, call) for a, b in zip(lo.tolist(), hi.tolist(), strict=True)]
    return 1, unkeyed, listed


def call_scan(
    compiled: ModuleType, events: np.ndarray, defined: IntervalSet, check: bool, cap: int = 1024, slots: int = 0
) -> tuple[int, int, list]:
    n = max(events.size, slots)
    keys, stops, groups, calls = np.empty(n, U64), np.empty(n, U64), np.empty(n, np.int64), np.empty(n, np.int64)
    pending = defined._pending_ends - defined._pending_starts
    status, unkeyed, listed, _, _ = compiled.scan(
        events, defined._starts, defined._ends, defined._cumulative, defined._pending_starts, defined._pending_ends,
        np.concatenate(([0], np.cumsum(pending, dtype=U64))).astype(U64), CHUNK, WIDE_ACCESS, SLICE, cap, check,
        keys, stops, groups, calls,
    )  # fmt: skip
    columns = (keys[:listed].tolist(), stops[:listed].tolist(), groups[:listed].tolist(), calls[:listed].tolist())
    return status, unkeyed, list(zip(*columns, strict=True))


@st.composite
def interval_sets(draw: st.DrawFn) -> IntervalSet:
    """Defined ranges in the composite key space: GM near the pool's addresses, UB of a few blocks; some added
    after the first fold, so that the pending level is used too."""
    def one() -> tuple[int, int]:
        space = draw(st.sampled_from([Space.GM, Space.UB, Space.PRIVATE]))
        if space == Space.GM:  # keys clamp GM addresses at 2**59 - 1, so ranges from there hold the edges
            lo = (1 << 60) | draw(st.sampled_from([GM, GM + 64, (1 << 59) - 64, (1 << 59) - 1, (1 << 48) - 64]))
        else:
            address = draw(st.sampled_from([0, 32, 64, 480, (1 << 42) - 32, 7]))
            lo = (int(space) << 60) | (draw(st.sampled_from([0, 1])) << 42) | address
        return lo, lo + draw(st.sampled_from([1, 32, 64, 256, 1 << 62]))

    first = [one() for _ in range(draw(st.integers(0, 6)))]
    if draw(st.booleans()):  # past SMALL_SET ranges far off, so that the ranges added next stay pending
        far = (np.arange(SMALL_SET + 4, dtype=U64) * U64(64)) | U64((1 << 60) | (1 << 58))
        first += list(zip(far.tolist(), (far + U64(32)).tolist(), strict=True))
    defined = IntervalSet(np.array([a for a, _ in first], U64), np.array([b for _, b in first], U64))
    for _ in range(draw(st.integers(0, 4))):
        lo, hi = one()
        defined.add(np.array([lo], U64), np.array([hi], U64))
    return defined


class TestScan:
    @settings(max_examples=400, deadline=None, database=None)
    @given(
        events=batches(),
        defined=interval_sets(),
        check=st.booleans(),
        chunk=st.sampled_from([CHUNK, 20, 8, 3]),
        slice_events=st.sampled_from([2048, 1, 3]),
        cap=st.sampled_from([1024, 0, 1, 2]),
        slots=st.sampled_from([0, 1 << 16]),
    )
    def test_against_the_numpy_model(
        self,
        compiled: ModuleType,
        events: np.ndarray,
        defined: IntervalSet,
        check: bool,
        chunk: int,
        slice_events: int,
        cap: int,
        slots: int,
    ) -> None:
        with patch(f"{__name__}.CHUNK", chunk), patch(f"{__name__}.SLICE", slice_events):
            found = call_scan(compiled, events, defined, check, cap, slots)
            assert found == model_scan(events, defined, check, cap, slots)

    def test_steady_batch_large_set(self, compiled: ModuleType) -> None:
        """Many ranges (a deep search), reads at each, writes at and between them, one-record and empty batches."""
        starts = (np.arange(10000, dtype=U64) * U64(64)) | U64(1 << 60 | GM)
        defined = IntervalSet(starts[::2], starts[::2] + U64(32))
        for at in starts[1:80:2].tolist():  # pending ranges, some touching main ones
            defined.add(np.array([at], U64), np.array([at + (64 if at % 256 == 64 else 32)], U64))
        assert defined._pending_starts.size
        rng = np.random.default_rng(7)
        for n in (0, 1, 2, 100, 3000):
            which = rng.integers(0, 80, max(n, 1))
            events = accesses(READ, Space.GM, GM + 64 * which.astype(np.uint64), 32)[:n]
            events["kind"][rng.random(n) < 0.3] = WRITE
            events["address"][(events["kind"] == WRITE) & (rng.random(n) < 0.5)] += U64(32)
            events["block_num"][rng.random(n) < 0.2] = 3  # across a main range and the pending one it touches
            assert call_scan(compiled, events, defined, True) == model_scan(events, defined, True)

    @pytest.mark.parametrize("step", [128, 256, 512])  # overlapping, touching, apart
    @pytest.mark.parametrize("chunk", [8, 16, 24, 64])
    @pytest.mark.parametrize("count", [1, 2, 3, 4])
    def test_groups_at_the_chunk(self, compiled: ModuleType, chunk: int, count: int, step: int) -> None:
        """Writes of 8 pieces each (bound), their sum at, below and past the chunk: one group while it fits; each
        group's writes merged."""
        events = accesses(WRITE, Space.GM, GM + step * np.arange(count, dtype=U64)[::-1], 32, block_num=8)
        events = np.concatenate([accesses(READ, Space.UB, 0, 32, block_num=8, block_stride=0), events])
        defined = IntervalSet(np.array([6 << 60], U64), np.array([(6 << 60) + 32], U64))
        with patch(f"{__name__}.CHUNK", chunk):
            assert call_scan(compiled, events, defined, True) == model_scan(events, defined, True)

    @pytest.mark.parametrize("slice_events", [1, 2, 2048])
    @pytest.mark.parametrize("chunk", [8, 16, 24, 32, 64])
    def test_reads_of_the_batchs_writes_across_groups(
        self, compiled: ModuleType, chunk: int, slice_events: int
    ) -> None:
        """Reads of tiles the batch wrote, in the writes' group or a later one, with the pieces summing to the chunk
        exactly for some chunks: the calls of each group, and both paths' sets, agree."""
        tiles = [GM + 256 * k for k in (0, 1, 2)]
        order = [(WRITE, 0), (READ, 0), (WRITE, 1), (READ, 0), (READ, 1), (WRITE, 2), (READ, 2), (READ, 1)]
        events = np.concatenate([accesses(kind, Space.GM, tiles[t], 32, block_num=8) for kind, t in order])
        events["serial"] = np.arange(1, events.size + 1)
        for cut in (2, 3, 4, 6, 8):
            batch = events[:cut]
            with patch(f"{__name__}.CHUNK", chunk), patch(f"{__name__}.SLICE", slice_events):
                assert call_scan(compiled, batch, IntervalSet(), True) == model_scan(batch, IntervalSet(), True)
            with patch.object(initcheck_module, "CHUNK", chunk), patch.object(initcheck_module, "_SLICE", slice_events):
                both_ways(compiled, [batch, batch[::-1].copy(), "kernel_end"])

    @pytest.mark.parametrize(
        "pattern",
        [
            dict(block_num=4, repeat=3, repeat_stride=8),  # rows of 4 blocks, gaps between them
            dict(block_num=8, block_stride=2, repeat=3, repeat_stride=16),  # every other block
            dict(block_num=8, block_stride=2, repeat=255, repeat_stride=16),  # initcheck_memory.py's
            dict(block_num=3, block_stride=5, repeat=4, repeat_stride=2),  # rows interleaved, blocks coinciding
        ],
    )
    @pytest.mark.parametrize("space", [Space.GM, Space.UB])
    def test_strided_pieces(self, compiled: ModuleType, pattern: dict[str, int], space: Space) -> None:
        """Strided writes and reads of them, in the batch and in later ones, in two blocks, at the top of GM too:
        each piece checked and listed as numpy's ranges() lists it."""
        base = GM if space == Space.GM else 0x100
        parts = []
        for block in (0, 1):
            parts += [
                accesses(WRITE, space, base, 32, block_id=block, **pattern),
                accesses(READ, space, base, 32, block_id=block, **pattern),
                accesses(READ, space, base + 32, 32, block_id=block, **pattern),  # partly written: a finding
                accesses(WRITE, space, (1 << 59) - 64, 32, block_id=block, **pattern),
            ]
        events = np.concatenate(parts)
        events["serial"] = np.arange(1, events.size + 1)
        for cut in (1, 2, 3, 4, 6):
            batch = events[:cut]
            assert call_scan(compiled, batch, IntervalSet(), True) == model_scan(batch, IntervalSet(), True)
        steady = events[events["address"] != base + 32]
        steps: list[object] = [steady, steady, events, steady[::-1].copy(), "kernel_end"]
        both_ways(compiled, steps)
        detector = Initcheck(context(), native=compiled)
        detector.kernel_begin(KernelLaunch(kernel=1, name="k", block_dim=8, kernel_type="aiv"))
        detector.check(steady)  # the first time, 2040 pieces a write are more than the pass keeps for rereads
        assert detector._check_native(steady)  # not vacuous: the compiled pass decides these

    def test_refuses_bad_buffers(self, compiled: ModuleType) -> None:
        events = accesses(READ, Space.UB, 0, 32)
        empty, one = np.zeros(0, U64), np.zeros(1, U64)
        out = np.empty(1, U64)
        level = (empty, empty, one, empty, empty, one)
        tail = (CHUNK, 64, SLICE, 16, True)
        with pytest.raises(ValueError, match="56-byte"):
            compiled.scan(events.tobytes()[:-1], *level, *tail, out, out, out, out)
        with pytest.raises(ValueError, match="level"):
            compiled.scan(events, one, empty, one, empty, empty, one, *tail, out, out, out, out)
        with pytest.raises(ValueError, match="slot"):
            compiled.scan(np.concatenate([events, events]), *level, *tail, out, out, out, out)
        with pytest.raises(ValueError, match="positive"):
            compiled.scan(events, *level, CHUNK, 64, 0, 16, True, out, out, out, out)
        with pytest.raises(ValueError, match="cap"):
            compiled.scan(events, *level, CHUNK, 64, SLICE, -1, True, out, out, out, out)
        with pytest.raises(TypeError):
            compiled.scan(events, *level, *tail, out.tobytes(), out, out, out)
