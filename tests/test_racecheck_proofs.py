"""racecheck proves blocks race-free as they complete (issue 13, ``_block_proofs``): its verdict must be the whole
check's, field for field, on every kernel: race-free and racy, deadlocked (stuck waits, cycles of cross-block
waits, SyncAlls some blocks never reach), GM shared between blocks, batches cut anywhere, with and without
msSanitizer's BLOCK_FINISH after each block, and clients that send more of a block after its BLOCK_FINISH."""

from __future__ import annotations

import random

import numpy as np
import pytest

from client_shim.events import EventKind, Pipe, Space, accesses, make_events, syncs
from sanitizerd.detectors import _happens_before, racecheck
from sanitizerd.detectors._patterns import ADDRESS_LIMIT
from sanitizerd.detectors.memory_budget import MemoryBudget
from sanitizerd.detectors.racecheck import Kernel
from tests.detector_helpers import make_detector, run_kernel
from tests.test_racecheck_model import random_kernel, to_events
from tests.test_racecheck_stream import batches, random_events


@pytest.fixture(autouse=True)
def every_block_proven(monkeypatch: pytest.MonkeyPatch) -> None:
    """Blocks are checked as soon as they complete, however few their events (the random tests vary it)."""
    monkeypatch.setattr(racecheck, "PROOF_STRETCH", 1)


def stretch(rng: random.Random, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(racecheck, "PROOF_STRETCH", rng.choice((1, 8, 40, 1 << 15)))


def check(*parts: np.ndarray, prove: bool = True) -> list[object]:
    detector = make_detector("racecheck")
    detector.prove_blocks = prove
    return run_kernel(detector, *parts)


def whole_checks(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Counts the whole-kernel checks (a block's own check is a trial, with its own memory account)."""
    made: list[int] = []
    init = Kernel.__init__

    def counted(self: Kernel, *args: object, memory: object = None, **kwargs: object) -> None:
        if memory is None:
            made.append(1)
        init(self, *args, memory=memory, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(Kernel, "__init__", counted)
    return made


def finished(events: np.ndarray, rng: random.Random) -> np.ndarray:
    """The events with a BLOCK_FINISH after each block (blocks one after the other), now and then a few of the
    block's own events again after it, as a confused or hostile client might send them."""
    out = []
    for block in np.unique(events["block_id"]).tolist():
        own = events[events["block_id"] == block]
        out.append(own)
        out.append(make_events(kind=EventKind.BLOCK_FINISH, block_id=block, block_size=0))
        if rng.random() < 0.1:
            out.append(own[: rng.randint(1, 3)])
    return np.concatenate(out)


def mutated(program: list[list[tuple]], rng: random.Random) -> list[list[tuple]]:
    """A random kernel, now and then broken: a set dropped (its wait is stuck), a block's SyncAll dropped (the
    others wait for it forever), or its accesses moved to GM shared by all blocks."""
    roll = rng.random()
    program = [list(body) for body in program]
    if roll < 0.2:
        body = rng.choice(program)
        sets = [i for i, ins in enumerate(body) if ins[0] == "set"]
        if sets:
            del body[rng.choice(sets)]
    elif roll < 0.4:
        body = rng.choice(program)
        alls = [i for i, ins in enumerate(body) if ins[0] == "sync_all"]
        if alls:
            del body[rng.choice(alls)]
    elif roll < 0.6:
        program = [[(*ins[:3], Space.GM, *ins[4:]) if ins[0] == "mem" else ins for ins in body] for body in program]
    return program


@pytest.mark.parametrize("seed", range(150))
def test_proven_blocks_give_the_whole_checks_findings(seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    rng = random.Random(seed)
    stretch(rng, monkeypatch)
    spmd = rng.random() < 0.4
    program = mutated(random_kernel(rng, blocks=rng.choice((1, 2, 3, 4)), spmd=spmd), rng)
    events, _ = to_events(program)
    if spmd and rng.random() < 0.7:
        events = alike(events)
    if rng.random() < 0.5:
        events = finished(events, rng)
    parts = batches(events, rng)
    assert check(*parts) == check(*parts, prove=False)


def alike(events: np.ndarray) -> np.ndarray:
    """SPMD blocks as a compiler makes them: an instruction has the same pc in every block (to_events gives each
    event its own), so blocks alike up to their GM offset are alike to the proofs too (``_block_proofs.digest``)."""
    events = events.copy()
    first = {b: int(events["serial"][events["block_id"] == b].min()) for b in np.unique(events["block_id"]).tolist()}
    events["pc"] = events["serial"] - np.array([first[b] for b in events["block_id"].tolist()], dtype=np.uint64)
    return events


def test_alike_blocks_share_a_proof() -> None:
    """Three blocks of one program, each on its own GM tile: the first block's proof stands for the other two
    (spans of one block each), and the verdict is still the whole check's."""
    events = alike(tiled(3))
    detector = make_detector("racecheck")
    detector.kernel_begin(racecheck.KernelLaunch(kernel=1, name="k", block_dim=3, kernel_type="aiv"))
    for b in range(3):
        detector.check(events[events["block_id"] == b])
    assert detector.proofs.spans == 2 and detector.proofs.reused == 1  # the last block completes at kernel_end
    proofs = detector.proofs
    assert detector.kernel_end() == [] and proofs.reused == 2
    assert check(events, prove=False) == []


def test_a_block_alike_but_for_one_field_is_checked_on_its_own(monkeypatch: pytest.MonkeyPatch) -> None:
    """The third block runs the same instructions but reads its UB tile on MTE3, which the flag from MTE2 to V
    does not order: the same kinds in the same order, one field apart, so the proof of the first block does not
    stand for it; its own check finds the race, and the whole check reports it."""
    events = alike(tiled(3))
    v_read = (events["block_id"] == 2) & (events["kind"] == EventKind.READ) & (events["pipe"] == Pipe.V)
    events["pipe"][v_read] = Pipe.MTE3
    whole = whole_checks(monkeypatch)
    detector = make_detector("racecheck")
    detector.kernel_begin(racecheck.KernelLaunch(kernel=1, name="add_custom", block_dim=3, kernel_type="aiv"))
    for b in range(3):
        detector.check(events[events["block_id"] == b])
    proofs = detector.proofs
    found = detector.kernel_end()
    assert proofs.reused == 1 and proofs.failed
    assert [(f.kind, f.blocks) for f in found] == [("race_raw", {"aiv": [2]})]
    assert whole == [1]
    assert found == check(events, prove=False)


def mostly_ordered(rng: random.Random, blocks: int) -> list[list[tuple]]:
    """Blocks whose accesses are mostly kept apart by pipe_barrier(PIPE_ALL) and set/wait pairs, on UB, their own
    GM tile and a GM tile every block reads; as many SyncAlls in each block (most of these kernels are race-free,
    so the blocks' proofs decide them, across SyncAlls); now and then a stray access, a write to the shared
    tile, or a SyncAll some block lacks."""
    syncalls = rng.randint(0, 2)
    program = []
    for block in range(blocks):
        body: list[tuple] = []
        for phase in range(syncalls + 1):
            for _ in range(rng.randint(1, 6)):
                space, address = rng.choice(((Space.UB, 0x100 * rng.randint(0, 2)), (Space.GM, 0x1000 * (block + 1)),
                                             (Space.GM, 0)))  # fmt: skip
                kind = rng.choice((EventKind.READ, EventKind.WRITE))
                if space == Space.GM and address == 0 and rng.random() < 0.9:
                    kind = EventKind.READ
                pipe = rng.choice((Pipe.MTE2, Pipe.V, Pipe.MTE3))
                body.append(("mem", pipe, kind, space, address, 0x100))
                roll = rng.random()
                if roll < 0.7:
                    body.append(("all",))
                elif roll < 0.9:
                    other = rng.choice([p for p in (Pipe.MTE2, Pipe.V, Pipe.MTE3) if p != pipe])
                    body += [("set", pipe, other, 0), ("wait", pipe, other, 0), ("all",)]
            if phase < syncalls and not (rng.random() < 0.05 and block == blocks - 1):
                body.append(("sync_all",))
        program.append(body)
    return program


@pytest.mark.parametrize("seed", range(150))
def test_mostly_ordered_kernels_give_the_whole_checks_findings(seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    rng = random.Random(seed)
    stretch(rng, monkeypatch)
    events, _ = to_events(mostly_ordered(rng, rng.randint(1, 5)))
    if rng.random() < 0.5:
        events = finished(events, rng)
    parts = batches(events, rng)
    assert check(*parts) == check(*parts, prove=False)


@pytest.mark.parametrize("seed", range(80))
def test_any_sync_on_any_pipe_gives_the_whole_checks_findings(seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every sync kind on every pipe (cross-block flags, soft syncs, mstx, buffers: most waits stuck), UB and GM."""
    rng = random.Random(seed)
    stretch(rng, monkeypatch)
    events = random_events(rng, rng.randint(1, 4))
    gm = np.array([rng.random() < 0.3 for _ in range(events.size)]) & (events["kind"] <= EventKind.WRITE)
    events["space"][gm] = Space.GM
    if rng.random() < 0.5:
        events = finished(events, rng)
    parts = batches(events, rng)
    assert check(*parts) == check(*parts, prove=False)


def test_a_spans_barrier_members_are_those_its_nodes_were_made_with(monkeypatch: pytest.MonkeyPatch) -> None:
    """A span's check takes the members of pipe_barrier(PIPE_ALL) from the span (its busy pipes), not found again:
    on random kernels with every sync on every pipe, they are what ``barrier_members`` finds of the span's events,
    and spans with PIPE_ALL barriers are among them."""
    build, given = racecheck.build, []

    def checked(kind: np.ndarray, pipe: np.ndarray, dst_pipe: np.ndarray, *args: object, **kwargs: object) -> object:
        members = kwargs.get("members")
        if members is not None:
            found = _happens_before.barrier_members(kind, pipe, dst_pipe, args[10])  # type: ignore[arg-type]
            assert np.array_equal(members, found), (members, found)
            given.append(bool(((kind == EventKind.PIPE_BARRIER) & (pipe == Pipe.ALL)).any()))
        return build(kind, pipe, dst_pipe, *args, **kwargs)

    monkeypatch.setattr(racecheck, "build", checked)
    for seed in range(60):
        rng = random.Random(seed)
        events = random_events(rng, rng.randint(1, 4))
        check(*batches(events, rng))
    assert any(given) and not all(given)


def sync_all(block: int, serial: int) -> np.ndarray:
    return np.concatenate((
        syncs(EventKind.PIPE_BARRIER, Pipe.ALL, block_id=block, serial=serial),
        syncs(EventKind.CROSS_SET, Pipe.S, Pipe.S, 31, mode=0, block_id=block, serial=serial + 1),
        syncs(EventKind.CROSS_WAIT, Pipe.S, Pipe.S, 31, block_id=block, serial=serial + 2),
    ))  # fmt: skip


def tiled(blocks: int, *, shared_gm: bool = False, write_after_sync: bool = False) -> np.ndarray:
    """Each block copies its GM tile into UB, hands it to V by a flag, and V writes UB; a SyncAll in between.
    ``shared_gm``: every block reads the same GM tile; ``write_after_sync``: after the SyncAll each block writes
    the tile its left neighbour read before it (ordered by the SyncAll: no race)."""
    parts = []
    for b in range(blocks):
        gm = 0x10000 if shared_gm else 0x10000 + 0x1000 * b
        s = 100 * b
        parts += [
            accesses(EventKind.READ, Space.GM, gm, 256, pipe=Pipe.MTE2, block_id=b, serial=s + 1),
            accesses(EventKind.WRITE, Space.UB, 0, 256, pipe=Pipe.MTE2, block_id=b, serial=s + 1),
            syncs(EventKind.SET_FLAG, Pipe.MTE2, Pipe.V, 0, block_id=b, serial=s + 2),
            syncs(EventKind.WAIT_FLAG, Pipe.MTE2, Pipe.V, 0, block_id=b, serial=s + 3),
            accesses(EventKind.READ, Space.UB, 0, 256, pipe=Pipe.V, block_id=b, serial=s + 4),
            sync_all(b, s + 5),
        ]
        if write_after_sync:
            left = 0x10000 + 0x1000 * ((b + 1) % blocks)
            parts.append(accesses(EventKind.WRITE, Space.GM, left, 256, pipe=Pipe.MTE3, block_id=b, serial=s + 9))
    return np.concatenate(parts)


def test_gm_past_the_address_limit_is_left_to_the_whole_check(monkeypatch: pytest.MonkeyPatch) -> None:
    """The whole check's sweep clamps GM ranges at ADDRESS_LIMIT (2**48), so writes apart past it meet there and
    race; no span's proof can say so of another span, so the whole check decides."""
    events = np.concatenate([
        accesses(EventKind.WRITE, Space.GM, ADDRESS_LIMIT + (b << 40), 32, pipe=Pipe.MTE3, block_id=b, serial=b + 1)
        for b in range(2)
    ])  # fmt: skip
    whole = whole_checks(monkeypatch)
    found = check(events)
    assert whole == [1]
    assert found == check(events, prove=False) and [f.kind for f in found] == ["race_waw"]


class TestTheWholeCheckIsLeftOut:
    def test_for_a_race_free_kernel_whose_blocks_arrive_in_turn(self, monkeypatch: pytest.MonkeyPatch) -> None:
        whole = whole_checks(monkeypatch)
        events = tiled(4)
        assert check(*(events[i : i + 7] for i in range(0, events.size, 7))) == []
        assert whole == []

    def test_when_blocks_only_read_the_same_gm(self, monkeypatch: pytest.MonkeyPatch) -> None:
        whole = whole_checks(monkeypatch)
        assert check(tiled(3, shared_gm=True)) == []
        assert whole == []

    def test_when_each_block_finished_before_the_next_batch(self, monkeypatch: pytest.MonkeyPatch) -> None:
        events = finished(tiled(3), random.Random(1))
        whole = whole_checks(monkeypatch)
        detector = make_detector("racecheck")
        detector.kernel_begin(racecheck.KernelLaunch(kernel=1, name="k", block_dim=3, kernel_type="aiv"))
        at = np.flatnonzero(events["kind"] == EventKind.BLOCK_FINISH)
        for part in np.split(events, np.sort(np.concatenate((at, at + 1)))):  # each BLOCK_FINISH a batch of its own
            detector.check(part)
        assert detector.proofs.spans == 3  # the last block too, at its BLOCK_FINISH, before kernel_end
        assert detector.kernel_end() == []
        assert whole == []


class TestTheWholeCheckDecides:
    def test_a_race_inside_a_block(self, monkeypatch: pytest.MonkeyPatch) -> None:
        whole = whole_checks(monkeypatch)
        events = tiled(2)
        events = events[events["kind"] != EventKind.WAIT_FLAG]  # V reads UB with nothing between it and MTE2
        found = check(events)
        assert [f.kind for f in found] == ["race_raw", "deadlock"] or [f.kind for f in found] == ["race_raw"]
        assert whole == [1]

    def test_blocks_writing_gm_that_another_block_reads(self, monkeypatch: pytest.MonkeyPatch) -> None:
        """Ordered by the SyncAll: the spans alone cannot tell, the whole check can, and finds no race."""
        whole = whole_checks(monkeypatch)
        assert check(tiled(3, write_after_sync=True)) == []
        assert whole == [1]

    def test_a_block_that_never_reaches_the_syncall(self, monkeypatch: pytest.MonkeyPatch) -> None:
        events = tiled(3)
        events = events[~((events["block_id"] == 2) & (events["kind"] >= EventKind.CROSS_SET))]
        whole = whole_checks(monkeypatch)
        found = check(events)
        assert {f.kind for f in found} == {"deadlock"}
        assert found == check(events, prove=False)
        assert whole == [1, 1]

    def test_cross_block_waits_in_a_cycle(self, monkeypatch: pytest.MonkeyPatch) -> None:
        """Every block waits for the SyncAll's flag before it sets its own: each wait is matched (every block
        sets), yet none can be released; each block alone looks fine."""
        events = np.concatenate([
            np.concatenate((
                accesses(EventKind.WRITE, Space.UB, 0, 32, pipe=Pipe.V, block_id=b, serial=10 * b + 1),
                syncs(EventKind.CROSS_WAIT, Pipe.S, Pipe.S, 31, block_id=b, serial=10 * b + 2),
                syncs(EventKind.CROSS_SET, Pipe.S, Pipe.S, 31, mode=0, block_id=b, serial=10 * b + 3),
            ))
            for b in range(3)
        ])  # fmt: skip
        whole = whole_checks(monkeypatch)
        found = check(events)
        assert {f.kind for f in found} == {"deadlock"}
        assert whole == [1]
        assert found == check(events, prove=False)


def test_a_blocks_trial_gives_its_memory_back_and_counts_no_refusal() -> None:
    """A block's own check takes its temporaries from the host's budget while it runs only. (A refusal there only
    hands the verdict to the whole check, which asks and counts for itself, once: test_racecheck_memory's nested
    ranges.)"""
    events = tiled(4)
    budget = MemoryBudget(1 << 40)
    detector = make_detector("racecheck")
    detector.context.race_memory = budget.account()
    detector.kernel_begin(racecheck.KernelLaunch(kernel=1, name="k", block_dim=4, kernel_type="aiv"))
    detector.check(events)
    held = events[events["kind"] <= EventKind.WRITE].size  # every held event reserves its share; no more
    assert budget.used == detector.asked and held
    assert detector.proofs.spans == 1  # the first three blocks, complete in that batch
    assert detector.kernel_end() == [] and budget.used == 0 and budget.refusals == 0


def test_small_blocks_are_checked_together(monkeypatch: pytest.MonkeyPatch) -> None:
    """A block's check has a fixed cost of a few milliseconds: blocks of a few events, a batch each (as a client
    sending one event at a time might), are checked PROOF_STRETCH events at a time, not one by one."""
    monkeypatch.setattr(racecheck, "PROOF_STRETCH", 100)
    events = tiled(40)  # 8 events a block
    blocks = [events[events["block_id"] == b] for b in range(40)]
    detector = make_detector("racecheck")
    detector.kernel_begin(racecheck.KernelLaunch(kernel=1, name="k", block_dim=40, kernel_type="aiv"))
    for block in blocks:
        detector.check(block)
    assert 2 <= detector.proofs.spans <= 3  # 39 complete blocks: 312 events, in stretches of 100 or more
    assert detector.kernel_end() == [] and detector.proofs.spans == 0  # the next launch starts afresh
