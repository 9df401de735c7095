"""racecheck compares the blocks that arrive after a proven block with it, record by record, instead of gathering
them (``HeldColumns.mirror_from`` and the compiled ``mirror``, issue 29): a block found alike is proven by the
reference's proof, and its rows are written only when something reads them. Its findings must be the whole
check's and numpy's path's on SPMD kernels with a record changed anywhere (the last one too), blocks cut short or
run long, GM offsets near ADDRESS_LIMIT and 2**64, extents past what a batch computes exactly, BLOCK_FINISH or
none, batches cut anywhere and blocks out of order; the rows it leaves unwritten must read as gathered ones; and
the compiled loops must refuse what does not fit and compare as a plain Python loop does."""

from __future__ import annotations

import importlib
import random

import numpy as np
import pytest

from client_shim.events import EventKind, Pipe, Space, accesses, make_events, syncs
from sanitizerd.detectors import _race_columns, racecheck
from sanitizerd.detectors._patterns import ADDRESS_LIMIT
from sanitizerd.detectors._race_columns import (
    _ACCESS_MASK,
    _SYNC_MASK,
    ACCESS_FIELDS,
    PLACED_FIELDS,
    SYNC_FIELDS,
    HeldColumns,
)
from sanitizerd.detectors.memory_budget import MemoryBudget
from sanitizerd_protocol.records import EVENT_DTYPE
from tests.detector_helpers import make_detector
from tests.test_racecheck_model import random_kernel, to_events
from tests.test_racecheck_stream import batches, merged

try:
    COMPILED = importlib.import_module("sanitizerd.native._racecheck")
except ImportError:  # no C compiler where this was installed: nothing is mirrored (numpy's path gathers every block)
    COMPILED = None
needs_compiled = pytest.mark.skipif(COMPILED is None, reason="sanitizerd.native._racecheck is not built")

_U64 = 1 << 64
_OFFSET = {name: EVENT_DTYPE.fields[name][1] for name in EVENT_DTYPE.names}
_BATCH_END, _BLOCK_END, _MISMATCH = range(3)
_NO_MATCH, _ACCESS, _SYNC = range(3)


# --- SPMD kernels, and what goes wrong with them ---
def spmd(rng: random.Random, blocks: int) -> np.ndarray:
    """One random block's program run by ``blocks`` blocks, as a compiler makes them: the same pc per
    instruction, serials counting on across blocks, each block on its own GM tile (offsets small, near
    ADDRESS_LIMIT, past it, or wrapping past 2**64)."""
    race_free = rng.random() < 0.8  # most: a block that races is proven by nothing, so nothing is mirrored
    for _ in range(8):
        (body,) = random_kernel(rng, 1)
        one, _ = to_events([body])
        one["pc"] = one["serial"] - one["serial"].min()
        if not race_free or not run([one], native=None, prove=False)[0]:
            break
    if rng.random() < 0.1:  # an access whose extent a batch does not compute exactly (the reference matches none)
        at = rng.choice(np.flatnonzero(one["kind"] <= EventKind.WRITE).tolist() or [0])
        one["block_size"][at], one["block_num"][at], one["block_stride"][at] = 0xFFFFFFFF, 0xFFFF, 0xFFFF
    start = rng.choice((0, 0x1000, 0x1000, ADDRESS_LIMIT - 0x4000, ADDRESS_LIMIT + 0x1000, _U64 - 0x2000))
    step = rng.choice((0, 0x100, 0x800, 1 << 40))
    out = []
    for block in range(blocks):
        part = one.copy()
        part["block_id"] = block
        part["serial"] += np.uint64(block * (one.size + rng.choice((0, 0, 5))))
        gm = part["space"] == Space.GM
        part["address"][gm] += np.uint64((start + block * step) % _U64)
        out.append(part)
    return np.concatenate(out)


def changed(events: np.ndarray, rng: random.Random) -> np.ndarray:
    """A block other than the first changed in one record (any position, the last too), cut short, or run long."""
    blocks = np.unique(events["block_id"]).tolist()
    if len(blocks) < 2:
        return events
    rows = np.flatnonzero(events["block_id"] == rng.choice(blocks[1:]))
    at = int(rng.choice(rows.tolist() + [int(rows[-1])] * 3))
    roll = rng.random()
    if roll < 0.1:
        return np.delete(events, at)
    if roll < 0.2:
        return np.insert(events, at + 1, events[at])
    events = events.copy()
    name = rng.choice(("address", "serial", "pc", "block_size", "location", "block_num", "block_stride", "repeat",
                       "repeat_stride", "event_id", "kind", "space", "pipe", "dst_pipe", "block_type", "flags",
                       "mode"))  # fmt: skip
    if name == "kind":
        kinds = (EventKind.READ, EventKind.WRITE, EventKind.SET_FLAG, EventKind.WAIT_FLAG, EventKind.PIPE_BARRIER)
        events["kind"][at] = rng.choice(kinds)
    elif name == "pipe" or name == "dst_pipe":
        events[name][at] = rng.choice((Pipe.MTE2, Pipe.MTE3, Pipe.V, Pipe.S))
    elif name == "space":
        events["space"][at] = rng.choice((Space.GM, Space.UB))
    else:
        events[name][at] += events[name].dtype.type(rng.choice((1, 32)))
    return events


def out_of_order(events: np.ndarray, rng: random.Random) -> np.ndarray:
    roll = rng.random()
    if roll < 0.1:
        return merged(events, rng)
    if roll < 0.2 and events.size > 2:  # a piece of a block sent again after the blocks after it
        at = rng.randrange(events.size - 1)
        return np.concatenate((events, events[at : at + rng.randint(1, 3)]))
    return events


def with_finish(events: np.ndarray, rng: random.Random) -> np.ndarray:
    """A BLOCK_FINISH after each block's last record, now and then."""
    if rng.random() < 0.5:
        return events
    last = np.flatnonzero(np.append(events["block_id"][1:] != events["block_id"][:-1], True))
    finish = make_events(kind=EventKind.BLOCK_FINISH, block_id=events["block_id"][last], block_size=0)
    return np.insert(events, last + 1, finish)


def cut(events: np.ndarray, rng: random.Random) -> list[np.ndarray]:
    """Batches cut anywhere, or at each block's start (where a block begins in a batch of its own), or both."""
    roll = rng.random()
    if roll < 0.4:
        return batches(events, rng)
    starts = np.flatnonzero(events["block_id"][1:] != events["block_id"][:-1]) + 1
    parts = np.split(events, starts)
    if roll < 0.7:
        return parts
    return [piece for part in parts for piece in batches(part, rng)]


def fed(parts: list[np.ndarray], *, native: object, prove: bool = True) -> racecheck.Racecheck:
    """A detector that has been sent one launch's batches, not ended."""
    detector = make_detector("racecheck")
    detector.native = native
    detector.prove_blocks = prove
    detector.kernel_begin(racecheck.KernelLaunch(kernel=1, name="k", block_dim=8, kernel_type="aiv"))
    for part in parts:
        detector.check(part)
    return detector


def run(parts: list[np.ndarray], *, native: object, prove: bool = True) -> tuple[list, int]:
    """One launch's findings, and how many of its blocks were found alike as they arrived."""
    detector = fed(parts, native=native, prove=prove)
    proofs = detector.proofs
    return detector.kernel_end(), proofs.mirrored_blocks


def random_case(seed: int, monkeypatch: pytest.MonkeyPatch) -> tuple[list[np.ndarray], bool]:
    """A random case's batches, and whether its blocks are all alike, in order, each a batch of its own or more."""
    rng = random.Random(seed)
    monkeypatch.setattr(racecheck, "PROOF_STRETCH", rng.choice((1, 1, 8, 1 << 15)))
    events = spmd(rng, rng.choice((2, 3, 4, 6, 6)))
    plain = rng.random() < 0.4
    if not plain:
        events = out_of_order(changed(events, rng), rng)
    return cut(with_finish(events, rng), rng), plain


@needs_compiled
@pytest.mark.parametrize("seed", range(200))
def test_mirrored_blocks_give_the_whole_checks_findings(seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    parts, _ = random_case(seed, monkeypatch)
    mirrored, _ = run(parts, native=COMPILED)
    whole, _ = run(parts, native=COMPILED, prove=False)
    numpy_path, none = run(parts, native=None)
    assert mirrored == whole == numpy_path
    assert none == 0


@needs_compiled
def test_the_random_kernels_are_mirrored(monkeypatch: pytest.MonkeyPatch) -> None:
    """The comparison above is not of cases where nothing was mirrored: alike blocks in order are, most of them;
    some changed blocks are still found alike up to their change, and some cases race."""
    alike = mirrored = raced = 0
    for seed in range(200):
        parts, plain = random_case(seed, monkeypatch)
        found, count = run(parts, native=COMPILED)
        alike += plain and racecheck.PROOF_STRETCH == 1
        mirrored += count > 0
        raced += any(f.kind.startswith("race") for f in found)
    assert alike and mirrored >= 20
    assert raced > 0


def tiles(blocks: int, change: int | None = None, gm: int = 0x10000) -> list[np.ndarray]:
    """A block copies its GM tile (from ``gm``, 0x1000 apart) into UB, hands it to V by a flag, V reads it, and
    MTE3 writes the tile's second half: a batch per block. ``change``: that block's V reads UB on MTE3 instead,
    which no flag orders after MTE2's write."""
    parts = []
    for b in range(blocks):
        s, tile = 10 * b, gm + 0x1000 * b
        v = Pipe.MTE3 if b == change else Pipe.V
        parts.append(np.concatenate((
            accesses(EventKind.READ, Space.GM, tile, 256, pipe=Pipe.MTE2, block_id=b, serial=s + 1, pc=1),
            accesses(EventKind.WRITE, Space.UB, 0, 256, pipe=Pipe.MTE2, block_id=b, serial=s + 1, pc=1),
            syncs(EventKind.SET_FLAG, Pipe.MTE2, Pipe.V, 0, block_id=b, serial=s + 2),
            syncs(EventKind.WAIT_FLAG, Pipe.MTE2, Pipe.V, 0, block_id=b, serial=s + 3),
            accesses(EventKind.READ, Space.UB, 0, 256, pipe=v, block_id=b, serial=s + 4, pc=4),
            accesses(EventKind.WRITE, Space.GM, tile + 0x800, 256, pipe=Pipe.MTE3, block_id=b, serial=s + 5, pc=5),
        )))  # fmt: skip
    return parts


@pytest.fixture
def every_block_proven(monkeypatch: pytest.MonkeyPatch) -> None:
    """Blocks are proven as soon as they complete, however few their events (a block becomes the reference only
    when proven alone)."""
    monkeypatch.setattr(racecheck, "PROOF_STRETCH", 1)


@needs_compiled
@pytest.mark.usefixtures("every_block_proven")
def test_alike_blocks_are_proven_as_they_arrive() -> None:
    """Block 0 is proven when block 1 begins; blocks 2 to 5 are compared with it as they arrive."""
    found, mirrored = run(tiles(6), native=COMPILED)
    assert found == [] and mirrored == 4


@needs_compiled
@pytest.mark.usefixtures("every_block_proven")
def test_a_batch_is_cut_where_its_first_block_finishes() -> None:
    """All six blocks in one batch, each with its BLOCK_FINISH: the batch is checked in two after block 0's, so
    that block 0 is proven and blocks 1 to 5 are compared with it; later finishes cut nothing more."""
    parts = [np.concatenate([np.concatenate((part, finish(part))) for part in tiles(6)])]
    found, mirrored = run(parts, native=COMPILED)
    assert found == [] and mirrored == 5
    assert found == run(parts, native=COMPILED, prove=False)[0] == run(parts, native=None)[0]
    finishes = [np.concatenate([finish(part) for part in tiles(6)] * 50)]  # nothing but finishes, many
    assert run(finishes, native=COMPILED) == ([], 0)


@needs_compiled
@pytest.mark.usefixtures("every_block_proven")
def test_the_first_blocks_records_as_they_arrived_are_compared_by_their_held_fields() -> None:
    """The reference's records are the first block's as they arrived, not written back from the columns: bytes the
    check does not hold (align, instr) may differ from the next blocks' and they are alike still; a held field
    that differs (a pc) makes a block not alike, and the verdict is the whole check's."""
    parts = tiles(6)
    parts[0] = parts[0].copy()
    parts[0]["align"], parts[0]["instr"] = 7, 3
    assert run(parts, native=COMPILED) == ([], 4)
    parts[3] = parts[3].copy()
    parts[3]["pc"][-1] += 1
    found, mirrored = run(parts, native=COMPILED)
    assert mirrored == 3 and found == run(parts, native=COMPILED, prove=False)[0] == run(parts, native=None)[0]


class Counted:
    """The compiled module, its calls counted by name."""

    def __init__(self, module: object) -> None:
        self.module, self.calls = module, dict[str, int]()

    def __getattr__(self, name: str) -> object:
        function = getattr(self.module, name)

        def counted(*args: object) -> object:
            self.calls[name] = self.calls.get(name, 0) + 1
            return function(*args)

        return counted


@needs_compiled
@pytest.mark.usefixtures("every_block_proven")
@pytest.mark.parametrize("split", [0, 2, 4], ids=["at block 1", "in block 1", "block 1 and more"])
def test_the_first_block_is_kept_up_to_where_the_next_begins(split: int) -> None:
    """Block 0 with the start of block 1 in one batch: block 0's records are kept up to where block 1 begins, and
    the reference is made of them, not written back (no ``scatter``)."""
    blocks = tiles(6)
    parts = [np.concatenate((blocks[0], blocks[1][:split])), blocks[1][split:], *blocks[2:]]
    detector = make_detector("racecheck")
    detector.native = counted = Counted(COMPILED)
    detector.kernel_begin(racecheck.KernelLaunch(kernel=1, name="k", block_dim=6, kernel_type="aiv"))
    for part in parts:
        detector.check(part)
    assert detector.proofs.reference is not None and counted.calls["mirror"] >= 4
    assert "scatter" not in counted.calls
    proofs = detector.proofs
    assert detector.kernel_end() == [] and proofs.mirrored_blocks == 4


@needs_compiled
def test_the_first_blocks_records_end_at_its_finish() -> None:
    """Records of the first block sent after its BLOCK_FINISH (a hostile client's) are not kept with it, nor are
    a next block's: the copy stops at the finish, and at a batch that begins with another block."""
    blocks = tiles(3)
    for more in (blocks[0], blocks[1]):
        detector = make_detector("racecheck")
        detector.native = COMPILED
        detector.kernel_begin(racecheck.KernelLaunch(kernel=1, name="k", block_dim=3, kernel_type="aiv"))
        columns = detector.columns
        detector.prove_blocks = False  # no proof takes them: what is kept stays to be seen
        detector.columns.keep_first_block(detector.context.race_memory)
        detector.check(np.concatenate((blocks[0], finish(blocks[0]))))
        detector.check(more)
        assert columns._first_rows == blocks[0].size and not columns._first_open


@needs_compiled
@pytest.mark.usefixtures("every_block_proven")
def test_the_first_block_not_taken_gives_its_bytes_back() -> None:
    """Block 0 races: no reference is made, and its records kept are let go and their bytes given back."""
    detector = make_detector("racecheck")
    detector.native = COMPILED
    detector.kernel_begin(racecheck.KernelLaunch(kernel=1, name="k", block_dim=6, kernel_type="aiv"))
    spared: list[int] = []
    memory = detector.context.race_memory
    spare = memory.spare
    memory.spare = lambda nbytes: spared.append(nbytes) or spare(nbytes)  # type: ignore[method-assign]
    parts = tiles(6, change=0)
    detector.check(parts[0])
    assert spared == [6 * EVENT_DTYPE.itemsize] and detector.columns._first is not None
    for part in parts[1:]:
        detector.check(part)
    assert detector.proofs.failed and detector.columns._first is None
    assert memory.held == detector.asked
    assert [f.kind for f in detector.kernel_end()] == ["race_raw"]


@needs_compiled
@pytest.mark.usefixtures("every_block_proven")
def test_no_reference_where_no_block_can_follow() -> None:
    """A launch of one block (block_dim 1) makes no reference of it: its records written back would serve nothing."""
    (part,) = tiles(1)
    detector = make_detector("racecheck")
    detector.native = COMPILED
    detector.kernel_begin(racecheck.KernelLaunch(kernel=1, name="k", block_dim=1, kernel_type="aiv"))
    detector.check(np.concatenate((part, finish(part))))
    assert detector.proofs.spans == 1 and detector.proofs.reference is None
    assert detector.columns._first is None and detector.context.race_memory.held == detector.asked  # none kept
    assert detector.kernel_end() == []


@needs_compiled
@pytest.mark.usefixtures("every_block_proven")
def test_blocks_are_no_longer_compared_after_some_found_not_alike(monkeypatch: pytest.MonkeyPatch) -> None:
    """A client sending one-record blocks after a proven one: each would be compared and found not alike, at some
    25 us each over gathering it; after MAX_MISSES of them the launch gathers every block."""
    calls: list[int] = []
    compare = COMPILED.mirror

    def counted(*args: object) -> object:
        calls.append(1)
        return compare(*args)

    monkeypatch.setattr(COMPILED, "mirror", counted)
    (part,) = tiles(1)
    stray = np.repeat(part[:1], 500)
    stray["block_id"] = np.arange(1, 501)
    parts = [np.concatenate((part, finish(part), stray))]
    found, mirrored = run(parts, native=COMPILED)
    assert mirrored == 0 and len(calls) == _race_columns.MAX_MISSES
    monkeypatch.setattr(COMPILED, "mirror", compare)
    assert found == run(parts, native=COMPILED, prove=False)[0] == run(parts, native=None)[0]


def finish(part: np.ndarray) -> np.ndarray:
    return make_events(kind=EventKind.BLOCK_FINISH, block_id=part["block_id"][:1], block_size=0)


@needs_compiled
@pytest.mark.usefixtures("every_block_proven")
def test_a_block_that_differs_is_checked_on_its_own() -> None:
    """Block 3 reads UB on MTE3, which no flag orders after MTE2's write: it is gathered from its first record
    that differs, and its own check finds the race (block 2 was mirrored; after block 3 the whole check decides)."""
    found, mirrored = run(tiles(6, change=3), native=COMPILED)
    assert mirrored == 1
    assert [(f.kind, f.blocks) for f in found] == [("race_raw", {"aiv": [3]})]
    assert found == run(tiles(6, change=3), native=COMPILED, prove=False)[0]


@needs_compiled
@pytest.mark.usefixtures("every_block_proven")
def test_a_block_moved_past_the_address_limit_is_not_alike() -> None:
    """The sweep clamps GM ranges at ADDRESS_LIMIT, where ranges apart meet: blocks 3 to 5 write past it, so the
    whole check finds them racing, and they are not taken as alike to block 0 (blocks 1 and 2 are)."""
    parts = tiles(6, gm=ADDRESS_LIMIT - 0x3000)
    found, mirrored = run(parts, native=COMPILED)
    assert mirrored == 1
    assert "race_waw" in {f.kind for f in found}
    assert found == run(parts, native=COMPILED, prove=False)[0]


@needs_compiled
@pytest.mark.usefixtures("every_block_proven")
@pytest.mark.parametrize("granted", [True, False])
@pytest.mark.parametrize("kept", [True, False], ids=["kept as they arrived", "written back"])
def test_the_reference_takes_its_bytes_from_the_budget(
    granted: bool, kept: bool, monkeypatch: pytest.MonkeyPatch
) -> None:  # fmt: skip
    """The reference's records, the first block's kept as they arrived or written back from the columns, are taken
    from the host's race-check memory, like the bytes held; refused, no block is mirrored, the verdict is the same,
    and the refusal is not counted (nothing was refused the user)."""
    budget = MemoryBudget(1 << 30)
    account = budget.account()
    reference = 6 * EVENT_DTYPE.itemsize  # block 0's six events
    asked: list[int] = []
    spare = type(account).spare

    def refusing(self: object, nbytes: int) -> bool:
        asked.append(nbytes)
        return (granted or nbytes != reference) and spare(self, nbytes)  # type: ignore[arg-type]

    monkeypatch.setattr(type(account), "spare", refusing)
    if not kept:
        monkeypatch.setattr(HeldColumns, "keep_first_block", lambda self, memory: None)
    detector = make_detector("racecheck")
    detector.context.race_memory = account
    detector.native = COMPILED
    detector.kernel_begin(racecheck.KernelLaunch(kernel=1, name="k", block_dim=6, kernel_type="aiv"))
    for part in tiles(6):
        detector.check(part)
    assert reference in asked
    assert budget.used == detector.asked + (reference if granted else 0)
    proofs = detector.proofs
    assert detector.kernel_end() == [] and proofs.mirrored_blocks == (4 if granted else 0)
    assert budget.used == 0 and budget.refusals == 0


def held_rows(parts: list[np.ndarray], *, mirror: bool, monkeypatch: pytest.MonkeyPatch) -> tuple[dict, dict]:
    """The launch's held rows before kernel_end, read two ways: the sync events by ``sync_rows`` before anything
    is written, then every table as its properties give it."""
    with monkeypatch.context() as patch:
        if not mirror:
            patch.setattr(HeldColumns, "mirror_from", lambda *args: False)
        detector = fed(parts, native=COMPILED)
        held = detector.columns
        syncs = held.sync_rows(np.arange(held._syncs.size))
        early = {name: syncs[name].copy() for name in SYNC_FIELDS}
        rows = {
            f"{table}.{name}": column.copy()
            for table, columns in (("event", held.events), ("access", held.accesses), ("sync", held.syncs))
            for name, column in columns.items()
            if name not in PLACED_FIELDS
        }
        detector.kernel_end()
    return early, rows


@pytest.mark.parametrize("native", [COMPILED, None], ids=["compiled", "numpy"])
@pytest.mark.parametrize("seed", range(60))
def test_complete_block_keys_are_where_the_keys_change(seed: int, native: object,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    """The blocks' keys that the verdict reads, collected stretch by stretch (alike ones too), are the held
    events' block keys where they change, once the launch has ended in order."""
    parts, _ = random_case(seed, monkeypatch)
    held = fed(parts, native=native).columns
    held.complete_all()
    if not held.in_order:  # out of order on purpose (random_case): the verdict is not asked
        return
    key = held.block_key.astype(np.int64)
    starts = np.ones(key.size, dtype=bool)
    starts[1:] = key[1:] != key[:-1]
    assert held.complete_block_keys().tolist() == key[starts].tolist()


@needs_compiled
@pytest.mark.parametrize("seed", range(40))
def test_unwritten_rows_read_as_gathered_ones(seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    parts, _ = random_case(seed, monkeypatch)
    early, rows = held_rows(parts, mirror=True, monkeypatch=monkeypatch)
    early_gathered, gathered = held_rows(parts, mirror=False, monkeypatch=monkeypatch)
    assert rows.keys() == gathered.keys()
    for name in rows:
        assert np.array_equal(rows[name], gathered[name]), name
    for name in SYNC_FIELDS:
        assert np.array_equal(early[name], early_gathered[name]), name


@needs_compiled
@pytest.mark.usefixtures("every_block_proven")
@pytest.mark.parametrize("change", [None, 9, 15])
def test_rows_left_unwritten_survive_the_tables_growth(change: int | None, monkeypatch: pytest.MonkeyPatch) -> None:
    """Twenty blocks of 1 500 events, in batches of 1 000: the tables grow past their first 4 096 rows while
    blocks are compared, and a larger table copies only the rows written; every row reads as gathered after, a
    block that differs in its last record (``change``) included, and the findings are the whole check's."""
    parts = []
    for block, part in enumerate(tiles(20, gm=0x100000)):
        long = np.concatenate([part] * 250)
        step = np.repeat(np.arange(250, dtype=np.uint64), part.size)
        long["serial"] += step * np.uint64(1000)
        ub, gm = long["space"] == Space.UB, long["space"] == Space.GM
        long["address"][ub] += step[ub] * np.uint64(256)  # each round its own tiles: no round races the next
        long["address"][gm] += step[gm] * np.uint64(0x100000)
        if block == change:
            long["pc"][-1] += np.uint64(1)
        parts.append(long)
    events = np.concatenate(parts)
    batched = np.split(events, range(1000, events.size, 1000))
    _, rows = held_rows(batched, mirror=True, monkeypatch=monkeypatch)
    _, gathered = held_rows(batched, mirror=False, monkeypatch=monkeypatch)
    for name in rows:
        assert np.array_equal(rows[name], gathered[name]), name
    found, mirrored = run(batched, native=COMPILED)
    assert mirrored >= 15
    assert found == run(batched, native=COMPILED, prove=False)[0]


# --- the compiled loops alone ---
def mirror_slow(records: np.ndarray, keep: np.ndarray | None, access: np.ndarray, start: int, key: int,
                ref: np.ndarray, ref_class: np.ndarray, masks: tuple[bytes, bytes], gm: int,
                state: tuple[int, ...]) -> tuple:  # fmt: skip
    """``mirror`` as its comment says, one record at a time in Python."""
    p, a, s, has_gm, gm_offset, has_serial, serial_offset = state
    raw, ref_raw = records.view(np.uint8).reshape(-1, 56), ref.view(np.uint8).reshape(-1, 56)
    keys, kinds = [], []
    status, i = _BATCH_END, start
    while i < raw.shape[0]:
        if keep is not None and not keep[i]:
            i += 1
            continue
        r = raw[i]
        k = int(r[48]) << 16 | int(r[40]) | int(r[41]) << 8
        if k != key:
            status = _BLOCK_END
            break
        is_access = bool(access[i])
        if p >= ref_class.size or ref_class[p] != (_ACCESS if is_access else _SYNC):
            status = _MISMATCH
            break
        rr, mask = ref_raw[p], masks[0 if is_access else 1]
        words = [int.from_bytes(r[8 * w : 8 * w + 8].tobytes(), "little") for w in range(7)]
        ref_words = [int.from_bytes(rr[8 * w : 8 * w + 8].tobytes(), "little") for w in range(7)]
        mask_words = [int.from_bytes(mask[8 * w : 8 * w + 8], "little") for w in range(7)]
        same = all((words[w] ^ ref_words[w]) & mask_words[w] == 0 for w in range(2, 7))
        serial = serial_offset if has_serial else (words[1] - ref_words[1]) % _U64
        same &= words[1] == (ref_words[1] + serial) % _U64
        offset = gm_offset
        if is_access and r[45] == gm:
            offset = gm_offset if has_gm else (words[0] - ref_words[0]) % _U64
            same &= words[0] == (ref_words[0] + offset) % _U64
        else:
            same &= words[0] == ref_words[0]
        if not same:
            status = _MISMATCH
            break
        if is_access and r[45] == gm:
            has_gm, gm_offset = 1, offset
        has_serial, serial_offset = 1, serial
        keys.append(k)
        kinds.append(int(r[44]))
        p, a, s = p + 1, a + is_access, s + (not is_access)
        i += 1
    return i, status, (p, a, s, has_gm, gm_offset, has_serial, serial_offset), keys, kinds


def mirror_inputs(rng: np.random.Generator) -> tuple:
    """A random reference, and a block's records made from it (moved by a serial and a GM offset, bits flipped
    now and then), with another block's records before and after it."""
    n = int(rng.integers(0, 12))
    ref = np.frombuffer(rng.integers(0, 256, n * 56, dtype=np.uint8).tobytes(), dtype=EVENT_DTYPE).copy()
    ref["space"] = rng.choice([1, 2], n)
    ref_class = rng.choice([_NO_MATCH, _ACCESS, _SYNC], n, p=[0.1, 0.5, 0.4]).astype(np.uint8)
    block = ref.copy()
    block["block_type"], block["block_id"] = 1, 7
    block["serial"] += np.uint64(int(rng.integers(0, 1 << 63)) * int(rng.integers(0, 3)))
    gm = block["space"] == 1
    block["address"][gm] += np.uint64(int(rng.integers(0, 1 << 64, dtype=np.uint64)) * int(rng.integers(0, 2)))
    raw = block.view(np.uint8).reshape(-1, 56)
    for _ in range(int(rng.integers(0, 3)) if n else 0):
        raw[int(rng.integers(0, n)), int(rng.integers(0, 56))] ^= np.uint8(1 << int(rng.integers(0, 8)))
    block_access = (ref_class != _SYNC) ^ (rng.random(n) < 0.05)
    other = block[: int(rng.integers(0, n + 1))].copy()
    other["block_id"] = 8
    head = int(rng.integers(0, other.size + 1))
    records = np.concatenate((other[:head], block, other))
    access = np.concatenate((np.ones(head, bool), block_access, np.ones(other.size, bool)))
    keep = None if rng.random() < 0.5 else (rng.random(records.size) < 0.9) | access
    return records, keep, access, head, (1 << 16) | 7, ref, ref_class


@needs_compiled
@pytest.mark.parametrize("seed", range(300))
def test_compiled_mirror_is_the_plain_loop(seed: int) -> None:
    rng = np.random.default_rng(seed)
    records, keep, access, start, key, ref, ref_class = mirror_inputs(rng)
    masks = (_ACCESS_MASK, _SYNC_MASK) if rng.random() < 0.7 else (rng.bytes(56), rng.bytes(56))
    state: tuple[int, ...] = (0, 0, 0, 0, 0, 0, 0)
    if rng.random() < 0.3 and ref.size:  # part way: some matched before, offsets learned or not
        p = int(rng.integers(0, ref.size + 1))
        a = int(rng.integers(0, p + 1))
        state = (p, a, p - a, int(rng.integers(0, 2)), int(rng.integers(0, 1 << 64, dtype=np.uint64)),
                 int(rng.integers(0, 2)), int(rng.integers(0, 1 << 64, dtype=np.uint64)))  # fmt: skip
    keys, kinds = np.zeros(records.size, np.uint32), np.zeros(records.size, np.uint8)
    stop, status, after = COMPILED.mirror(records, keep, access, start, key, keys, kinds, ref, ref_class, *masks, 1,
                                          state)  # fmt: skip
    want = mirror_slow(records, keep, access, start, key, ref, ref_class, masks, 1, state)
    assert (stop, status, after) == want[:3]
    matched = after[0] - state[0]
    assert keys[:matched].tolist() == want[3] and kinds[:matched].tolist() == want[4]
    assert not keys[matched:].any()


def long_mirror_inputs(rng: np.random.Generator) -> tuple:
    """A block of tens to hundreds of records made from a random reference, long enough for the compiled loop's
    runs of 32 compared together, with one change or none planted anywhere: a byte of any field, the block's key, an
    access's mark (not 0 or 1: still an access), a record not kept, a class the reference cannot vouch for (also
    with such a mark)."""
    n = int(rng.integers(32, 300))
    ref = np.frombuffer(rng.integers(0, 256, n * 56, dtype=np.uint8).tobytes(), dtype=EVENT_DTYPE).copy()
    ref["space"] = rng.choice([1, 2], n)
    ref["block_type"] = 1
    ref_class = rng.choice([_ACCESS, _SYNC], n).astype(np.uint8)
    block = ref.copy()
    block["block_id"] = 7
    serial = int(rng.integers(0, 1 << 64, dtype=np.uint64))
    gm_offset = int(rng.integers(0, 1 << 64, dtype=np.uint64))
    block["serial"] += np.uint64(serial)
    gm = (block["space"] == 1) & (ref_class == _ACCESS)
    block["address"][gm] += np.uint64(gm_offset)
    access = (ref_class == _ACCESS).astype(np.uint8)
    keep = None if rng.random() < 0.5 else np.ones(n, bool)
    at = int(rng.integers(0, n))
    change = rng.integers(0, 7)
    if change == 1:
        raw = block.view(np.uint8).reshape(-1, 56)
        raw[at, int(rng.integers(0, 56))] ^= np.uint8(1 << int(rng.integers(0, 8)))
    elif change == 2:
        block["block_id"][at:] = 8 if rng.random() < 0.5 else 7 + 256
    elif change == 3:
        access[at] *= 2
    elif change == 4 and keep is not None:
        keep[at] = False
    elif change == 5:
        ref_class[at] = _NO_MATCH
    elif change == 6:  # an access of mark 2 where the reference vouches for nothing: 0 + 2 is a sync's sum
        access[at], ref_class[at] = 2, _NO_MATCH
    state: tuple[int, ...] = (0, 0, 0, 0, 0, 0, 0)
    if rng.random() < 0.5:  # offsets already learned (or the GM one not yet) from a record before
        state = (0, 0, 0, int(rng.integers(0, 2)), gm_offset, 1, serial)
    return block, keep, access, (1 << 16) | 7, ref, ref_class, state


@needs_compiled
@pytest.mark.parametrize("seed", range(300))
def test_compiled_mirror_runs_are_the_plain_loop(seed: int) -> None:
    rng = np.random.default_rng(seed)
    records, keep, access, key, ref, ref_class, state = long_mirror_inputs(rng)
    if rng.random() < 0.2:  # a key no record has: past 24 bits, or one that 32 bits would wrap to the block's
        key = int(rng.choice([key | 1 << 24, key + (1 << 32), -key]))
    keys, kinds = np.zeros(records.size, np.uint32), np.zeros(records.size, np.uint8)
    masks = (_ACCESS_MASK, _SYNC_MASK)
    stop, status, after = COMPILED.mirror(records, keep, access, 0, key, keys, kinds, ref, ref_class, *masks, 1,
                                          state)  # fmt: skip
    want = mirror_slow(records, keep, access, 0, key, ref, ref_class, masks, 1, state)
    assert (stop, status, after) == want[:3]
    matched = after[0] - state[0]
    assert keys[:matched].tolist() == want[3] and kinds[:matched].tolist() == want[4]
    assert not keys[matched:].any()


@needs_compiled
def test_compiled_mirror_matches_a_whole_block_moved() -> None:
    """The plain loop above agrees on random inputs, mostly mismatches: here a block that is the reference moved
    by a GM and a serial offset (GM addresses wrapping past 2**64) matches all of it."""
    ref = make_events(kind=np.array([0, 16, 1, 17], np.uint8), space=np.array([1, 0, 2, 0], np.uint8),
                      address=np.array([_U64 - 16, 0, 64, 0], np.uint64), serial=np.arange(4, dtype=np.uint64),
                      block_type=1)  # fmt: skip
    records = ref.copy()
    records["block_id"] = 3
    records["serial"] += np.uint64(100)
    records["address"][0] = 48  # -16 + 64, wrapped
    access = records["kind"] <= 1
    keys, kinds = np.zeros(4, np.uint32), np.zeros(4, np.uint8)
    ref_class = np.where(access, _ACCESS, _SYNC).astype(np.uint8)
    stop, status, state = COMPILED.mirror(records, None, access, 0, 1 << 16 | 3, keys, kinds, ref, ref_class,
                                          _ACCESS_MASK, _SYNC_MASK, 1, (0, 0, 0, 0, 0, 0, 0))  # fmt: skip
    assert (stop, status, state) == (4, _BATCH_END, (4, 2, 2, 1, 64, 1, 100))
    assert keys.tolist() == [1 << 16 | 3] * 4 and kinds.tolist() == [0, 16, 1, 17]
    ref_class[2] = _NO_MATCH  # an extent the reference cannot vouch for
    stop, status, state = COMPILED.mirror(records, None, access, 0, 1 << 16 | 3, keys, kinds, ref, ref_class,
                                          _ACCESS_MASK, _SYNC_MASK, 1, (0, 0, 0, 0, 0, 0, 0))  # fmt: skip
    assert (stop, status, state[:3]) == (2, _MISMATCH, (2, 1, 1))


@needs_compiled
def test_compiled_mirror_refuses_what_does_not_fit() -> None:
    ref = make_events(kind=np.array([0, 16], np.uint8), block_type=1)
    records = ref.copy()
    access = records["kind"] <= 1
    ref_class = np.array([_ACCESS, _SYNC], np.uint8)
    keys, kinds = np.zeros(2, np.uint32), np.zeros(2, np.uint8)
    zero = (0, 0, 0, 0, 0, 0, 0)
    good = (records, None, access, 0, 1 << 16, keys, kinds, ref, ref_class, _ACCESS_MASK, _SYNC_MASK, 1, zero)
    assert COMPILED.mirror(*good)[:2] == (2, _BATCH_END)
    frozen = np.zeros(2, np.uint32)
    frozen.flags.writeable = False
    replaced = {
        0: [records.view(np.uint8)[:-1]],  # not whole records
        1: [np.ones(3, bool)],  # keep of another length
        2: [access[:1]],
        3: [-1, 3],  # start outside the records
        5: [keys[:1], keys.view(np.uint8)[:2], frozen, np.zeros(2, np.uint64)],
        6: [kinds[:1], np.zeros(2, np.uint32)],
        7: [ref[:1]],  # fewer reference records than classes
        8: [ref_class[:1]],
        9: [_ACCESS_MASK[:55], _ACCESS_MASK + b"\0"],
        10: [b""],
        12: [(3, 2, 1, 0, 0, 0, 0), (1, 1, 1, 0, 0, 0, 0), (-1, 0, 0, 0, 0, 0, 0), (0, 0, 0), None],
    }
    for at, values in replaced.items():
        for value in values:
            args = list(good)
            args[at] = value
            before = keys.copy()
            with pytest.raises((ValueError, TypeError, OverflowError)):
                COMPILED.mirror(*args)
            assert np.array_equal(keys, before)
    # Room for fewer keys than records matched: refused, not written past the end.
    short_keys, short_kinds = np.zeros(1, np.uint32), np.zeros(1, np.uint8)
    with pytest.raises(ValueError):
        COMPILED.mirror(records, None, access, 0, 1 << 16, short_keys, short_kinds, ref, ref_class, _ACCESS_MASK,
                        _SYNC_MASK, 1, zero)  # fmt: skip


def gathered(records: np.ndarray) -> tuple[np.ndarray, tuple, tuple]:
    kind = records["kind"]
    access = kind <= EventKind.WRITE
    a = {name: np.zeros(int(access.sum()), records.dtype[name]) for name in ACCESS_FIELDS}
    s = {name: np.zeros(int((~access).sum()), records.dtype[name]) for name in SYNC_FIELDS}
    access_fields = tuple((_OFFSET[n], a[n]) for n in ACCESS_FIELDS)
    sync_fields = tuple((_OFFSET[n], s[n]) for n in SYNC_FIELDS)
    keys, kinds = np.zeros(kind.size, np.uint32), np.zeros(kind.size, np.uint8)
    COMPILED.gather(records, None, access, keys, kinds, access_fields, sync_fields)
    return kind.copy(), access_fields, sync_fields


@needs_compiled
@pytest.mark.parametrize("seed", range(20))
def test_compiled_scatter_is_gathers_inverse(seed: int) -> None:
    """Gathered columns scattered back give the records' held fields, and nothing else."""
    rng = np.random.default_rng(seed)
    n = int(rng.integers(0, 50))
    records = np.frombuffer(rng.integers(0, 256, n * 56, dtype=np.uint8).tobytes(), dtype=EVENT_DTYPE).copy()
    records["kind"] = rng.choice([0, 1, 16, 17, 18, 23, 200], n)
    kind, access_fields, sync_fields = gathered(records)
    out = np.zeros(n, EVENT_DTYPE)
    COMPILED.scatter(kind, access_fields, sync_fields, int(EventKind.WRITE), out)
    access = kind <= EventKind.WRITE
    for name in EVENT_DTYPE.names:
        held = np.where(access, name in ACCESS_FIELDS, name in SYNC_FIELDS)
        want = np.where(held, records[name], 0)
        assert np.array_equal(out[name], want), name


@needs_compiled
def test_compiled_scatter_and_block_start_refuse_what_does_not_fit() -> None:
    records = make_events(kind=np.array([0, 16, 1], np.uint8))
    kind, access_fields, sync_fields = gathered(records)
    out = np.zeros(3, EVENT_DTYPE)
    bad = [
        (kind[:2], access_fields, sync_fields, 1, out),  # fewer kinds than records
        (kind, access_fields, sync_fields, 1, out[:2]),
        (kind, access_fields, sync_fields, 1, out.view(np.uint8)[:-1]),
        (kind, sync_fields, sync_fields, 1, out),  # columns of the wrong length
        (kind, access_fields, sync_fields, 16, out),  # every event an access: too few access rows
        (kind, ((55, np.zeros(2, np.uint64)),), sync_fields, 1, out),  # past the record's end
        (kind, access_fields, sync_fields, 1, np.frombuffer(bytes(168), dtype=EVENT_DTYPE)),  # read-only
    ]
    for args in bad:
        with pytest.raises((ValueError, TypeError)):
            COMPILED.scatter(*args)
        assert not out.view(np.uint8).any()
    for args in [(records.view(np.uint8)[:-1], None, 0, 0), (records, None, 4, 0), (records, None, -1, 0),
                 (records, np.ones(2, bool), 0, 0)]:  # fmt: skip
        with pytest.raises(ValueError):
            COMPILED.block_start(*args)
    records["block_id"] = [0, 0, 1]
    keep = np.array([True, True, False])
    assert COMPILED.block_start(records, None, 0, 0) == 2
    assert COMPILED.block_start(records, keep, 0, 0) == 3  # the other block's record is not kept
    assert COMPILED.block_start(records, None, 1, 5) == 1
    assert COMPILED.block_start(records, None, 3, 0) == 3
